"""Druid's metadata tables (``SQLMetadataConnector``) as SQLAlchemy Core tables.

Names and columns are Druid's, so a Druid operator finds what they expect. Druid's DDL writes
``druid_pendingSegments`` and ``dataSource`` unquoted, and PostgreSQL folds them to lower case;
the table names here are spelled folded (SQLite ignores case anyway) so that ``create_all``'s
existence check finds them, and mixed-case columns are emitted unquoted (``quote=False``). The
schema on PostgreSQL is therefore the one Druid itself creates there.
Timestamps are ISO strings (``2015-09-12T00:00:00.000Z``) whose string order is time order; JSON
documents are stored as bytes (Druid's BLOB payload columns).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Index, Integer, LargeBinary, MetaData, String, Table

metadata = MetaData()


def _varchar(name: str, **kwargs: object) -> Column:
    return Column(name, String(255), quote=False if name != name.lower() else None, **kwargs)


segments = Table(
    "druid_segments",
    metadata,
    _varchar("id", primary_key=True),
    _varchar("dataSource", nullable=False),
    _varchar("created_date", nullable=False),
    _varchar("start", nullable=False),
    _varchar("end", nullable=False),
    # True unless the shard spec is Druid's NoneShardSpec.
    Column("partitioned", Boolean, nullable=False),
    _varchar("version", nullable=False),
    # False once the segment is overshadowed or dropped; only used segments are ever queried.
    Column("used", Boolean, nullable=False),
    # The DataSegment JSON (see sluice.segment.segment.DataSegment.to_payload).
    Column("payload", LargeBinary, nullable=False),
    _varchar("used_status_last_updated", nullable=False),
    Column("num_rows", BigInteger),
    Index("idx_druid_segments_used", "used"),
    Index("idx_druid_segments_datasource_used_end_start", "dataSource", "used", "end", "start"),
)

pending_segments = Table(
    "druid_pendingsegments",
    metadata,
    _varchar("id", primary_key=True),
    _varchar("dataSource", nullable=False),
    _varchar("created_date", nullable=False),
    _varchar("start", nullable=False),
    _varchar("end", nullable=False),
    _varchar("sequence_name", nullable=False),
    _varchar("sequence_prev_id", nullable=False),
    # SHA-1 of (sequence_name, 0xFF, sequence_prev_id). UNIQUE so that a sequence can never fork:
    # two allocations continuing the same segment of the same sequence get the same new id.
    _varchar("sequence_name_prev_id_sha1", nullable=False, unique=True),
    # SegmentIdWithShardSpec JSON: dataSource, interval, version, shardSpec.
    Column("payload", LargeBinary, nullable=False),
)
Index("idx_druid_pendingsegments_datasource_end", pending_segments.c.dataSource, pending_segments.c.end)
Index("idx_druid_pendingsegments_datasource_sequence", pending_segments.c.dataSource, pending_segments.c.sequence_name)

data_source = Table(
    "druid_datasource",
    metadata,
    _varchar("dataSource", primary_key=True),
    _varchar("created_date", nullable=False),
    # The stream's committed end offsets; moved only together with the segments holding the rows.
    Column("commit_metadata_payload", LargeBinary, nullable=False),
    # Hex SHA-1 of the payload: the compare-and-swap token of a publish.
    _varchar("commit_metadata_sha1", nullable=False),
)

supervisors = Table(
    "druid_supervisors",
    metadata,
    # Every submit, suspend and terminate appends a row: the table is the specs' history.
    Column("id", Integer, primary_key=True, autoincrement=True),
    _varchar("spec_id", nullable=False),
    _varchar("created_date", nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Index("idx_druid_supervisors_spec_id", "spec_id"),
)

tasks = Table(
    "druid_tasks",
    metadata,
    _varchar("id", primary_key=True),
    _varchar("created_date", nullable=False),
    _varchar("datasource", nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("status_payload", LargeBinary, nullable=False),
    # True while the task is runnable; the task queue reloads active tasks after a restart.
    Column("active", Boolean, nullable=False, default=False),
    _varchar("type"),
    _varchar("group_id"),
    Index("idx_druid_tasks_active_created_date", "active", "created_date"),
    Index("idx_druid_tasks_datasource_active", "datasource", "active"),
)

task_locks = Table(
    "druid_tasklocks",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    _varchar("task_id"),
    # The TaskLock JSON; the overlord re-acquires the locks of active tasks from here when it starts.
    Column("lock_payload", LargeBinary),
    Index("idx_druid_tasklocks_task_id", "task_id"),
)

announcements = Table(
    # Not a Druid table: Druid announces nodes in ZooKeeper. Sluice roles find each other here instead,
    # so the metadata store is the one thing they share.
    "sluice_announcements",
    metadata,
    _varchar("id", primary_key=True),  # <role>:<host>:<port>
    _varchar("role", nullable=False),
    _varchar("host", nullable=False),
    Column("port", Integer, nullable=False),
    # Role-specific facts, e.g. a worker's capacity, version and category.
    Column("payload", LargeBinary, nullable=False),
    # Epoch millis of the last heartbeat; a node whose heartbeat is too old is gone.
    Column("heartbeat", BigInteger, nullable=False),
)

config = Table(
    # Druid's config table: named JSON documents that every node reads, e.g. basic security's users and roles.
    "druid_config",
    metadata,
    _varchar("name", primary_key=True),
    Column("payload", LargeBinary, nullable=False),
)

rules = Table(
    # Druid's rules table: every change of a data source's retention rules is a new version (the `_default` data
    # source holds the cluster's default rules); the newest version is in force.
    "druid_rules",
    metadata,
    _varchar("id", primary_key=True),  # <dataSource>_<version>
    _varchar("dataSource", nullable=False),
    _varchar("version", nullable=False),
    Column("payload", LargeBinary, nullable=False),  # the rules array
    Index("idx_druid_rules_datasource", "dataSource"),
)

audit = Table(
    # Druid's audit table: who changed what (rules here), from the X-Druid-Author / X-Druid-Comment headers.
    "druid_audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _varchar("audit_key", nullable=False),
    _varchar("type", nullable=False),
    _varchar("author", nullable=False),
    Column("comment", String(2048), nullable=False),
    _varchar("created_date", nullable=False),
    Column("payload", LargeBinary, nullable=False),
    # Not a column of Druid's table (its AuditInfo carries the address): where the change came from.
    _varchar("ip"),
    Index("idx_druid_audit_key_time", "audit_key", "created_date"),
)

leader_leases = Table(
    # Not a Druid table: Druid elects its leaders in ZooKeeper (or Kubernetes leases). A role's leader holds the row
    # and renews it; a standby takes it once it has expired, with the next epoch. Writes made under an older epoch are
    # refused (fencing), so a leader that was paused past its lease cannot commit after its successor started.
    "sluice_leader_leases",
    metadata,
    _varchar("role", primary_key=True),
    _varchar("leader", nullable=False),  # the leader's base URL
    Column("epoch", BigInteger, nullable=False),
    Column("expires", BigInteger, nullable=False),  # epoch millis, on the leader's clock
)
