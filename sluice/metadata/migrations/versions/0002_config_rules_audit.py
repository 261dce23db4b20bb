"""Basic security's users and roles (druid_config), retention rules and their audit (druid_rules, druid_audit).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def _varchar(name: str, **kwargs: object) -> sa.Column:
    return sa.Column(name, sa.String(255), quote=False if name != name.lower() else None, **kwargs)


def upgrade() -> None:
    op.create_table("druid_config", _varchar("name", primary_key=True),
                    sa.Column("payload", sa.LargeBinary, nullable=False))
    op.create_table("druid_rules", _varchar("id", primary_key=True), _varchar("dataSource", nullable=False),
                    _varchar("version", nullable=False), sa.Column("payload", sa.LargeBinary, nullable=False))
    op.create_index("idx_druid_rules_datasource", "druid_rules", [sa.column("dataSource", is_literal=True)])
    op.create_table(
        "druid_audit", sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        _varchar("audit_key", nullable=False), _varchar("type", nullable=False), _varchar("author", nullable=False),
        sa.Column("comment", sa.String(2048), nullable=False), _varchar("created_date", nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False), _varchar("ip"))
    op.create_index("idx_druid_audit_key_time", "druid_audit", ["audit_key", "created_date"])


def downgrade() -> None:
    for table in ("druid_audit", "druid_rules", "druid_config"):
        op.drop_table(table)
