"""Druid native JSON queries on the broker: validate the query, translate it to one Druid SQL statement, run that
through `Broker.sql` (so a native query and its SQL twin give the same answer), and shape Druid's result JSON.

    NativeQueryRunner(broker).run({"queryType": "timeBoundary", "dataSource": "wikipedia"})
    → [{"timestamp": "2015-09-12T00:46:58.771Z", "result": {"minTime": "…", "maxTime": "…"}}]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlglot import exp

from sluice.broker.native import query as q
from sluice.broker.broker import Broker
from sluice.broker.engine import QueryResult
from sluice.broker.sql.multi_value import UNNESTING
from sluice.broker.native.datasources import tables
from sluice.broker.native.metadata import metadata_chunks, segment_metadata_result, segment_metadata_sql
from sluice.broker.native.relations import Catalog, view
from sluice.broker.native.results import shape
from sluice.broker.native.sql import DataSourceView, translate
from sluice.broker.errors import SqlError
from sluice.spec.errors import SpecError, join_path, path_in_payload
from sluice.security.access import ALLOW_ALL_PERMISSIONS, Permissions, require
from sluice.security.resources import Action, Resource

QUERY_TYPES: dict[str, type[BaseModel]] = {
    "timeseries": q.TimeseriesQuery,
    "topN": q.TopNQuery,
    "groupBy": q.GroupByQuery,
    "scan": q.ScanQuery,
    "timeBoundary": q.TimeBoundaryQuery,
    "segmentMetadata": q.SegmentMetadataQuery,
    "dataSourceMetadata": q.DataSourceMetadataQuery,
    "search": q.SearchQuery,
}
# A data source's columns as Druid SQL sees them, including the rows of running tasks.
_COLUMNS_SQL = ("SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS "
                "WHERE TABLE_SCHEMA = 'druid' AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION")
# Druid reports a query it cannot read as a JSON mapping failure (BadJsonQueryException, HTTP 400).
_BAD_QUERY = {"error": "Json parse failed", "error_code": "jsonParseError",
              "error_class": "com.fasterxml.jackson.databind.JsonMappingException"}


def invalid_query(message: str) -> SqlError:
    """A query that cannot be read or run as written: 400, Druid's error JSON, the field's path in the message."""
    return SqlError(f"Invalid native query: {message}", **_BAD_QUERY)


def parse_query(payload: Any) -> q.NativeQuery:
    """The query JSON as a validated model; errors name the offending field (`aggregations[0].fieldName: …`)."""
    if not isinstance(payload, dict):
        raise invalid_query("the request body must be a JSON object")
    query_type = payload.get("queryType")
    model = QUERY_TYPES.get(query_type) if isinstance(query_type, str) else None
    if model is None:
        raise invalid_query(f"queryType: unknown query type {query_type!r}, expected one of {', '.join(QUERY_TYPES)}")
    try:
        return model.model_validate(payload)  # type: ignore[return-value]
    except ValidationError as error:
        first = error.errors()[0]
        path = join_path(path_in_payload(payload, first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "Sluice does not support this field"
        raise invalid_query(f"{path}: {message}" if path else message) from None


class NativeQueryRunner:
    """Runs native queries against the broker's visible segments."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def run(self, payload: Any, query_id: str | None = None,
            permissions: Permissions = ALLOW_ALL_PERMISSIONS) -> list[dict[str, Any]]:
        """Druid's result JSON for the query; raises SqlError (400 invalid, 504 timeout, 500 internal), Forbidden
        when the caller may not read its data source. With a `query_id`, `Broker.cancel(query_id)` stops the query
        while it runs."""
        query = parse_query(payload)
        for table in tables(query.data_source):
            require(permissions, Resource.datasource(table), Action.READ)
        context = sql_context(query.context, query_id)
        try:
            source = view(query.data_source, Catalog(self._view, self._describe))
            if isinstance(query, q.SegmentMetadataQuery):
                chunks = metadata_chunks(query, source)
                # the columns the chunks' files hold as multi-value strings (elsewhere they may have several values)
                intervals = [segment.interval for chunk in chunks for segment in chunk.segments]
                multi_value = self._broker.multi_value_columns(source.name, intervals)
                return segment_metadata_result(query, chunks,
                                               self._sql(segment_metadata_sql(chunks, source, multi_value), context))
            return shape(query, source, self._sql(translate(query, source), context))
        except SpecError as error:
            raise invalid_query(str(error)) from None

    def _view(self, data_source: str) -> DataSourceView:
        segments = tuple(self._broker.visible_segments().get(data_source, ()))
        schema = self._broker.sql(_COLUMNS_SQL, [{"type": "VARCHAR", "value": data_source}]).rows
        return DataSourceView(data_source, segments, [(name, kind) for name, kind in schema])

    def _describe(self, statement: exp.Query) -> list[tuple[str, str]]:
        result = self._broker.sql(exp.select(exp.Star()).from_(statement.subquery()).limit(0).sql(dialect="druid"))
        return list(zip(result.columns, result.sql_types))

    def _sql(self, sql: str | None, context: Mapping[str, Any]) -> QueryResult | None:
        return None if sql is None else self._broker.sql(sql, (), context)


def sql_context(context: Mapping[str, Any], query_id: str | None) -> dict[str, Any]:
    """The parts of a native query's context that its SQL statement honours: the timeout, groupBy's multi-value
    unnesting, and the id to cancel by."""
    honoured = {key: context[key] for key in ("timeout", UNNESTING) if key in context}
    return honoured | ({"sqlQueryId": query_id} if query_id else {})
