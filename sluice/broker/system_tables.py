"""Druid's INFORMATION_SCHEMA and `sys` tables, built as Arrow tables from what the metadata store and the live nodes
know (Druid's InformationSchema and SystemSchema, with their column names and types).

A query sees a system table as an in-memory relation registered on its own sandboxed DuckDB cursor, under a name no
data source can have (`sys/segments`: Druid forbids `/` in data source names), so the two can never be confused.
Builders here are pure; the broker gathers their inputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sluice.broker.sql.complex_types import arrow_complex_type
from sluice.metadata.store import TaskRecord
from sluice.segment.columns import is_multi_value, is_string_array
from sluice.segment.segment import DataSegment, Interval, SegmentId
from sluice.timestamps import format_timestamp

CATALOG = "druid"
DRUID_SCHEMA = "druid"
INFORMATION_SCHEMA = "INFORMATION_SCHEMA"
SYS_SCHEMA = "sys"
# Druid's schemas: data sources, lookups (none in Sluice), system tables, and views (none either).
_SCHEMAS = (DRUID_SCHEMA, INFORMATION_SCHEMA, "lookup", SYS_SCHEMA, "view")


@dataclass(frozen=True)
class SystemTable:
    schema: str
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, SQL type)

    @property
    def relation(self) -> str:
        """The name the query's DuckDB cursor knows it by."""
        return f"{self.schema}/{self.name}"

    def arrow_table(self, rows: Iterable[Sequence[Any]]) -> pa.Table:
        columns = list(zip(*rows)) or [()] * len(self.columns)
        arrays = [pa.array(values, _ARROW[kind]) for values, (_, kind) in zip(columns, self.columns)]
        return pa.Table.from_arrays(arrays, names=[name for name, _ in self.columns])


_ARROW = {"VARCHAR": pa.string(), "BIGINT": pa.int64()}


def _table(schema: str, name: str, *columns: str) -> SystemTable:
    """Columns as `name` (VARCHAR) or `name:BIGINT`."""
    return SystemTable(schema, name, tuple((c.split(":")[0], (c.split(":") + ["VARCHAR"])[1]) for c in columns))


SCHEMATA = _table(INFORMATION_SCHEMA, "SCHEMATA", "CATALOG_NAME", "SCHEMA_NAME", "SCHEMA_OWNER",
                  "DEFAULT_CHARACTER_SET_CATALOG", "DEFAULT_CHARACTER_SET_SCHEMA", "DEFAULT_CHARACTER_SET_NAME",
                  "SQL_PATH")
TABLES = _table(INFORMATION_SCHEMA, "TABLES", "TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "TABLE_TYPE",
                "IS_JOINABLE", "IS_BROADCAST")
COLUMNS = _table(INFORMATION_SCHEMA, "COLUMNS", "TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "COLUMN_NAME",
                 "ORDINAL_POSITION:BIGINT", "COLUMN_DEFAULT", "IS_NULLABLE", "DATA_TYPE",
                 "CHARACTER_MAXIMUM_LENGTH:BIGINT", "CHARACTER_OCTET_LENGTH:BIGINT", "NUMERIC_PRECISION:BIGINT",
                 "NUMERIC_PRECISION_RADIX:BIGINT", "NUMERIC_SCALE:BIGINT", "DATETIME_PRECISION:BIGINT",
                 "CHARACTER_SET_NAME", "COLLATION_NAME", "JDBC_TYPE:BIGINT")
SEGMENTS = _table(SYS_SCHEMA, "segments", "segment_id", "datasource", "start", "end", "size:BIGINT", "version",
                  "partition_num:BIGINT", "num_replicas:BIGINT", "num_rows:BIGINT", "is_active:BIGINT",
                  "is_published:BIGINT", "is_available:BIGINT", "is_realtime:BIGINT", "is_overshadowed:BIGINT",
                  "shard_spec", "dimensions", "metrics", "last_compaction_state", "replication_factor:BIGINT")
SERVERS = _table(SYS_SCHEMA, "servers", "server", "host", "plaintext_port:BIGINT", "tls_port:BIGINT", "server_type",
                 "tier", "curr_size:BIGINT", "max_size:BIGINT", "is_leader:BIGINT", "start_time")
SERVER_SEGMENTS = _table(SYS_SCHEMA, "server_segments", "server", "segment_id")
TASKS = _table(SYS_SCHEMA, "tasks", "task_id", "group_id", "type", "datasource", "created_time",
               "queue_insertion_time", "status", "runner_status", "duration:BIGINT", "location", "host",
               "plaintext_port:BIGINT", "tls_port:BIGINT", "error_msg")
SUPERVISORS = _table(SYS_SCHEMA, "supervisors", "supervisor_id", "state", "detailed_state", "healthy:BIGINT", "type",
                     "source", "suspended:BIGINT", "spec")

SYSTEM_TABLES: dict[tuple[str, str], SystemTable] = {
    (t.schema, t.name): t for t in (SCHEMATA, TABLES, COLUMNS, SEGMENTS, SERVERS, SERVER_SEGMENTS, TASKS, SUPERVISORS)
}


def find_system_table(schema: str, name: str) -> SystemTable | None:
    """The system table `schema.name`; names are matched ignoring case (Druid matches them exactly)."""
    for (table_schema, table_name), table in SYSTEM_TABLES.items():
        if table_schema.upper() == schema.upper() and table_name.upper() == name.upper():
            return table
    return None


def is_system_schema(schema: str) -> bool:
    return schema.upper() in (INFORMATION_SCHEMA, SYS_SCHEMA.upper())


# --------------------------------------------------------------------------------------------- INFORMATION_SCHEMA


def schemata() -> pa.Table:
    return SCHEMATA.arrow_table((CATALOG, schema, None, None, None, None, None) for schema in _SCHEMAS)


def tables(data_sources: Iterable[str]) -> pa.Table:
    rows = [(CATALOG, DRUID_SCHEMA, name, "TABLE", "NO", "NO") for name in sorted(data_sources)]
    rows += [(CATALOG, t.schema, t.name, "SYSTEM_TABLE", "NO", "NO") for t in SYSTEM_TABLES.values()]
    return TABLES.arrow_table(rows)


@dataclass(frozen=True)
class _SqlType:
    """Calcite's description of a column type, as Druid's INFORMATION_SCHEMA.COLUMNS reports it."""

    jdbc_type: int
    precision: int | None = None  # NUMERIC_PRECISION for numbers, DATETIME_PRECISION for TIMESTAMP
    scale: int | None = None


_SCALE_NOT_SPECIFIED = -(2**31)  # Calcite's Integer.MIN_VALUE for floating point types
_SQL_TYPES = {
    "TIMESTAMP": _SqlType(93, 3),
    "VARCHAR": _SqlType(12),
    "BIGINT": _SqlType(-5, 19, 0),
    "DOUBLE": _SqlType(8, 15, _SCALE_NOT_SPECIFIED),
    "FLOAT": _SqlType(6, 15, _SCALE_NOT_SPECIFIED),
}
_ARRAY_JDBC_TYPE, _OTHER_JDBC_TYPE = 2003, 1111


def columns(data_source_columns: Mapping[str, Sequence[tuple[str, str]]]) -> pa.Table:
    """Every column of every table; `data_source_columns` gives each data source's (name, SQL type) in order."""
    described = [(DRUID_SCHEMA, source, cols) for source, cols in sorted(data_source_columns.items())]
    described += [(t.schema, t.name, t.columns) for t in SYSTEM_TABLES.values()]
    rows = []
    for schema, table, table_columns in described:
        for position, (name, kind) in enumerate(table_columns, start=1):
            rows.append((CATALOG, schema, table, name, position, "", "NO" if name == "__time" else "YES", kind,
                         *_column_attributes(kind)))
    return COLUMNS.arrow_table(rows)


def _column_attributes(kind: str) -> tuple[Any, ...]:
    """CHARACTER_MAXIMUM_LENGTH … JDBC_TYPE of a column of SQL type `kind`."""
    known = _SQL_TYPES.get(kind)
    numeric = known is not None and known.scale is not None
    character = kind == "VARCHAR"
    jdbc = known.jdbc_type if known else _ARRAY_JDBC_TYPE if kind.endswith(" ARRAY") else _OTHER_JDBC_TYPE
    return (
        None,
        None,
        known.precision if numeric else None,
        10 if numeric else None,
        known.scale if numeric else None,
        known.precision if kind == "TIMESTAMP" else None,
        "UTF-16LE" if character else None,
        "UTF-16LE$en_US$primary" if character else None,
        jdbc,
    )


def sql_type(arrow_type: pa.DataType) -> str:
    """The SQL type Druid would report for a segment column stored as `arrow_type`."""
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMP"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_dictionary(arrow_type):
        return "VARCHAR"
    if pa.types.is_integer(arrow_type) or pa.types.is_boolean(arrow_type):
        return "BIGINT"
    if pa.types.is_float32(arrow_type):
        return "FLOAT"
    if pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type):
        return "DOUBLE"
    if is_multi_value(arrow_type):  # Druid SQL types a multi-value string VARCHAR
        return "VARCHAR"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"{sql_type(arrow_type.value_type)} ARRAY"
    if is_string_array(arrow_type):
        return "VARCHAR ARRAY"
    kind = arrow_complex_type(arrow_type)  # a first/last pair or a sketch
    return f"COMPLEX<{kind or 'json'}>"


# ---------------------------------------------------------------------------------------------------------- sys


@dataclass(frozen=True)
class RealtimeSegment:
    """Rows a running task group has read into one sequence but not published. Druid's sys.segments names such a
    segment by the id its task allocated for it; Sluice's tasks allocate ids only when they publish, so the row is
    named by the sequence (its replicas share the name; the next sequence or generation of the group gets another)."""

    segment_id: str
    data_source: str
    interval: Interval  # from its first row to just after its last
    num_rows: int
    size: int  # bytes
    server: str | None = None  # the peon that serves it (None: a task of the broker's own node)


def segments(used: Iterable[DataSegment], available: set[SegmentId], overshadowed: set[SegmentId],
             realtime: Iterable[RealtimeSegment] = ()) -> pa.Table:
    """sys.segments: the published segments, then the realtime ones. Sluice serves a published segment straight from
    deep storage, so one that the timeline shows is available with one replica; the replication factor is unknown
    (no load rules): -1. A realtime segment is served by the one replica of its group that answers queries."""
    rows = []
    for segment in used:
        is_available = segment.id in available
        is_overshadowed = segment.id in overshadowed
        rows.append((
            str(segment.id), segment.data_source, format_timestamp(segment.interval.start),
            format_timestamp(segment.interval.end), segment.size, segment.version, segment.id.partition_num,
            int(is_available), segment.num_rows, int(not is_overshadowed), 1, int(is_available), 0,
            int(is_overshadowed), _json(segment.shard_spec), _json(segment.dimensions), _json(segment.metrics),
            None, -1,
        ))
    for served in realtime:
        # is_active: Druid's (is_published AND NOT is_overshadowed) OR is_realtime
        rows.append((
            served.segment_id, served.data_source, format_timestamp(served.interval.start),
            format_timestamp(served.interval.end), served.size, None, None, 1, served.num_rows, 1, 0, 1, 1, 0,
            None, None, None, None, -1,
        ))
    return SEGMENTS.arrow_table(rows)


@dataclass(frozen=True)
class Server:
    """A discovered node, as sys.servers shows it."""

    host: str
    port: int
    server_type: str  # Druid's node role in lower case: overlord, broker, middle_manager, peon, historical…
    is_leader: bool | None = None  # only for roles that elect a leader

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"


def servers(nodes: Iterable[Server]) -> pa.Table:
    rows = [(node.name, node.host, node.port, -1, node.server_type, None, 0, 0,
             None if node.is_leader is None else int(node.is_leader), None) for node in nodes]
    return SERVERS.arrow_table(rows)


def server_segments(nodes: Iterable[Server], available: Iterable[SegmentId],
                    realtime: Iterable[RealtimeSegment] = ()) -> pa.Table:
    """Every broker serves every available segment: it reads them from deep storage itself. A realtime segment is
    served by the peon that holds its rows, or, for a task of the broker's own node, by that node's broker."""
    brokers = [node.name for node in nodes if node.server_type == "broker"]
    ids = [str(segment_id) for segment_id in available]
    rows = [(broker, segment_id) for broker in brokers for segment_id in ids]
    rows += [(server, segment.segment_id) for segment in realtime
             for server in ([segment.server] if segment.server is not None else brokers)]
    return SERVER_SEGMENTS.arrow_table(rows)


def tasks(statuses: Iterable[Mapping[str, Any]]) -> pa.Table:
    """sys.tasks from TaskStatusPlus JSON (the overlord's /druid/indexer/v1/tasks entries)."""
    rows = []
    for status in statuses:
        location = status.get("location") or {}
        host, port = location.get("host"), location.get("port", -1)
        rows.append((
            status["id"], status.get("groupId"), status.get("type"), status.get("dataSource"),
            status.get("createdTime"), status.get("queueInsertionTime"), status.get("statusCode"),
            status.get("runnerStatusCode"), status.get("duration") or 0,
            None if host is None else f"{host}:{port}", host, port, location.get("tlsPort", -1),
            status.get("errorMsg"),
        ))
    return TASKS.arrow_table(rows)


def task_status(record: TaskRecord, runner_status: str | None = None,
                location: tuple[str, int] | None = None) -> dict[str, Any]:
    """TaskStatusPlus JSON of a stored task. Where a running task runs and what its runner says are the runner's to
    tell; without them, an active task shows as RUNNING, nowhere."""
    status = record.status
    host, port = location or (None, -1)
    return {
        "id": record.id, "groupId": record.group_id, "type": record.task_type, "dataSource": record.data_source,
        "createdTime": record.created_date, "queueInsertionTime": record.created_date,
        "statusCode": status.get("statusCode") or status.get("status"),
        "runnerStatusCode": runner_status or ("RUNNING" if record.active else "NONE"),
        "duration": status.get("duration", -1), "location": {"host": host, "port": port, "tlsPort": -1},
        "errorMsg": status.get("errorMsg"),
    }


def supervisors(statuses: Iterable[Mapping[str, Any]]) -> pa.Table:
    """sys.supervisors from SupervisorStatus JSON (the overlord's `GET /druid/indexer/v1/supervisor?system`)."""
    rows = [(s["id"], s.get("state"), s.get("detailedState"), int(bool(s.get("healthy"))), s.get("type"),
             s.get("source"), int(bool(s.get("suspended"))), s.get("specString")) for s in statuses]
    return SUPERVISORS.arrow_table(rows)


def supervisor_status(spec_id: str, spec: Mapping[str, Any], health: tuple[str, str] | None = None) -> dict[str, Any]:
    """SupervisorStatus JSON of a spec. A running supervisor's health, (state, detailedState), is its overlord's to
    tell; without it, the stored spec shows as RUNNING (or SUSPENDED) and healthy."""
    suspended = bool(spec.get("suspended"))
    io_config = (spec.get("spec") or {}).get("ioConfig") or spec.get("ioConfig") or {}
    stored = "SUSPENDED" if suspended else "RUNNING"
    state, detailed = health or (stored, stored)
    return {"id": spec_id, "state": state, "detailedState": detailed, "healthy": not state.startswith("UNHEALTHY"),
            "type": spec.get("type"), "source": io_config.get("topic") or io_config.get("stream"),
            "suspended": suspended, "specString": _json(spec)}


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
