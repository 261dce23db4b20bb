"""Druid's metric and dimension names, so callers never spell them (docs/operations/metrics.md)."""

from __future__ import annotations

# ---- ingestion (a task, per emission: the change since the last one) ----
INGEST_EVENTS_PROCESSED = "ingest/events/processed"
INGEST_EVENTS_PROCESSED_WITH_ERROR = "ingest/events/processedWithError"
INGEST_EVENTS_UNPARSEABLE = "ingest/events/unparseable"
INGEST_EVENTS_THROWN_AWAY = "ingest/events/thrownAway"
INGEST_INPUT_BYTES = "ingest/input/bytes"
INGEST_ROWS_OUTPUT = "ingest/rows/output"
INGEST_PERSISTS_COUNT = "ingest/persists/count"
INGEST_HANDOFF_COUNT = "ingest/handoff/count"

# ---- stream jobs (a stream_job task; not Druid's: Druid has no stateful stream jobs) ----
INGEST_STREAM_LATE_DROPPED = "ingest/stream/lateRecordsDropped"
INGEST_STREAM_STATE_ROWS = "ingest/stream/state/rows"
INGEST_STREAM_STATE_BYTES = "ingest/stream/state/bytes"
INGEST_STREAM_BATCH_TIME = "ingest/stream/batch/time"

# ---- stream lag (the supervisor, per data source and stream) ----
INGEST_KAFKA_LAG = "ingest/kafka/lag"
INGEST_KAFKA_MAX_LAG = "ingest/kafka/maxLag"
INGEST_KAFKA_AVG_LAG = "ingest/kafka/avgLag"
INGEST_KAFKA_PARTITION_LAG = "ingest/kafka/partitionLag"

# ---- tasks (the overlord) ----
TASK_RUN_TIME = "task/run/time"
TASK_SUCCESS_COUNT = "task/success/count"
TASK_FAILED_COUNT = "task/failed/count"
SEGMENT_ADDED_BYTES = "segment/added/bytes"

# ---- queries (the broker) ----
QUERY_TIME = "query/time"
QUERY_BYTES = "query/bytes"
SQL_QUERY_TIME = "sqlQuery/time"
SQL_QUERY_BYTES = "sqlQuery/bytes"

# ---- dimensions (Druid's DruidMetrics) ----
DATASOURCE = "dataSource"
TASK_ID = "taskId"
TASK_TYPE = "taskType"
GROUP_ID = "groupId"
TASK_STATUS = "taskStatus"
STREAM = "stream"
PARTITION = "partition"
#: a native query's type (timeseries, groupBy, ...)
TYPE = "type"
#: a supervisor spec's context "tags", passed on to its metrics
TAGS = "tags"
#: a query's id (queryId, or sqlQueryId for SQL), the client's address, and "true"/"false"
ID = "id"
REMOTE_ADDRESS = "remoteAddress"
SUCCESS = "success"
#: the ids of the native queries a SQL query was planned into, printed as a list
NATIVE_QUERY_IDS = "nativeQueryIds"
