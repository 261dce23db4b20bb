"""The schema before migrations existed: segments, pending segments, stream offsets, supervisors, tasks, task locks
and announcements (Druid's tables, as sluice.metadata.tables describes them, and Sluice's announcements).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def _varchar(name: str, **kwargs: object) -> sa.Column:
    # mixed-case names unquoted, as Druid's DDL writes them (PostgreSQL folds them)
    return sa.Column(name, sa.String(255), quote=False if name != name.lower() else None, **kwargs)


def upgrade() -> None:
    op.create_table(
        "druid_segments", _varchar("id", primary_key=True), _varchar("dataSource", nullable=False),
        _varchar("created_date", nullable=False), _varchar("start", nullable=False), _varchar("end", nullable=False),
        sa.Column("partitioned", sa.Boolean, nullable=False), _varchar("version", nullable=False),
        sa.Column("used", sa.Boolean, nullable=False), sa.Column("payload", sa.LargeBinary, nullable=False),
        _varchar("used_status_last_updated", nullable=False), sa.Column("num_rows", sa.BigInteger))
    op.create_index("idx_druid_segments_used", "druid_segments", ["used"])
    op.create_index("idx_druid_segments_datasource_used_end_start", "druid_segments",
                    [sa.column("dataSource", is_literal=True), "used", "end", "start"])
    op.create_table(
        "druid_pendingsegments", _varchar("id", primary_key=True), _varchar("dataSource", nullable=False),
        _varchar("created_date", nullable=False), _varchar("start", nullable=False), _varchar("end", nullable=False),
        _varchar("sequence_name", nullable=False), _varchar("sequence_prev_id", nullable=False),
        _varchar("sequence_name_prev_id_sha1", nullable=False, unique=True),
        sa.Column("payload", sa.LargeBinary, nullable=False))
    op.create_index("idx_druid_pendingsegments_datasource_end", "druid_pendingsegments",
                    [sa.column("dataSource", is_literal=True), "end"])
    op.create_index("idx_druid_pendingsegments_datasource_sequence", "druid_pendingsegments",
                    [sa.column("dataSource", is_literal=True), "sequence_name"])
    op.create_table(
        "druid_datasource", _varchar("dataSource", primary_key=True), _varchar("created_date", nullable=False),
        sa.Column("commit_metadata_payload", sa.LargeBinary, nullable=False),
        _varchar("commit_metadata_sha1", nullable=False))
    op.create_table(
        "druid_supervisors", sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        _varchar("spec_id", nullable=False), _varchar("created_date", nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False))
    op.create_index("idx_druid_supervisors_spec_id", "druid_supervisors", ["spec_id"])
    op.create_table(
        "druid_tasks", _varchar("id", primary_key=True), _varchar("created_date", nullable=False),
        _varchar("datasource", nullable=False), sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("status_payload", sa.LargeBinary, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False, default=False), _varchar("type"), _varchar("group_id"))
    op.create_index("idx_druid_tasks_active_created_date", "druid_tasks", ["active", "created_date"])
    op.create_index("idx_druid_tasks_datasource_active", "druid_tasks", ["datasource", "active"])
    op.create_table(
        "druid_tasklocks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        _varchar("task_id"), sa.Column("lock_payload", sa.LargeBinary))
    op.create_index("idx_druid_tasklocks_task_id", "druid_tasklocks", ["task_id"])
    op.create_table(
        "sluice_announcements", _varchar("id", primary_key=True), _varchar("role", nullable=False),
        _varchar("host", nullable=False), sa.Column("port", sa.Integer, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False), sa.Column("heartbeat", sa.BigInteger, nullable=False))


def downgrade() -> None:
    for table in ("sluice_announcements", "druid_tasklocks", "druid_tasks", "druid_supervisors", "druid_datasource",
                  "druid_pendingsegments", "druid_segments"):
        op.drop_table(table)
