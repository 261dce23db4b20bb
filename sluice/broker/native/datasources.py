"""Druid's data sources for native queries (querying/datasource.md): table, union, inline, lookup, query and join.
`relations` makes each the relation a query's SQL statement reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, model_validator

from sluice.broker.sql.translate import TIME_COLUMN as TIME
from sluice.spec.model import SpecModel

if TYPE_CHECKING:
    from sluice.broker.native import query as q


def _named_table(value: Any) -> Any:
    """A plain string names a table."""
    return {"type": "table", "name": value} if isinstance(value, str) else value


class TableDataSource(SpecModel):
    type: Literal["table"]
    name: str = Field(min_length=1)


def _table_only(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") != "table":
        raise ValueError(f"expected a table data source, got one of type {value.get('type')!r}")
    return _named_table(value)


#: a table as a data source names it: its name, or `{"type": "table", "name": …}`
Table = Annotated[TableDataSource, BeforeValidator(_table_only)]


class UnionDataSource(SpecModel):
    """The rows of all its tables; a column one table lacks is null in that table's rows."""

    type: Literal["union"]
    data_sources: list[Table] = Field(min_length=1)


class InlineDataSource(SpecModel):
    """Rows given in the query. Without `columnTypes` (or with a null type), a column's type is read from its values:
    LONG when all are whole numbers, DOUBLE when all are numbers, else STRING. `__time` holds epoch millis."""

    type: Literal["inline"]
    column_names: list[str] = Field(min_length=1)
    column_types: list[Literal["STRING", "LONG", "FLOAT", "DOUBLE"] | None] | None = None
    rows: list[list[str | int | float | None]]

    @model_validator(mode="after")
    def _rectangular(self) -> InlineDataSource:
        width = len(self.column_names)
        if len(set(self.column_names)) != width:
            raise ValueError("columnNames must be unique")
        if self.column_types is not None and len(self.column_types) != width:
            raise ValueError(f"columnTypes has {len(self.column_types)} types for {width} columnNames")
        for i, row in enumerate(self.rows):
            if len(row) != width:
                raise ValueError(f"rows[{i}] has {len(row)} values for {width} columnNames")
        return self


class LookupDataSource(SpecModel):
    """A registered lookup's key/value pairs as rows of columns `k` and `v`."""

    type: Literal["lookup"]
    lookup: str = Field(min_length=1)


class QueryDataSource(SpecModel):
    """A subquery's results as rows: `__time` (the row's bucket, or the query's time for granularity all) and its
    outputs. A timeseries subquery gives only the buckets that have rows (Druid also fills empty ones)."""

    type: Literal["query"]
    query: q.SubQuery


class JoinDataSource(SpecModel):
    """Druid's join: every left column, then every right column renamed `rightPrefix` + its name; a left column that
    starts with `rightPrefix` is shadowed. `condition` is a Druid expression of equalities between left expressions
    and right columns (named with the prefix), joined by `&&`."""

    type: Literal["join"]
    left: DataSource
    right: DataSource
    right_prefix: str = Field(min_length=1)
    condition: str = Field(min_length=1)
    join_type: Literal["INNER", "LEFT", "RIGHT", "FULL"]

    @model_validator(mode="after")
    def _prefix_keeps_time(self) -> JoinDataSource:
        if TIME.startswith(self.right_prefix):
            raise ValueError(f"rightPrefix '{self.right_prefix}' would shadow {TIME}")
        return self


def _data_source_type(value: Any) -> str:
    """The tag, written as a label so that an error names the user's field (a tag `query` would read as the query
    data source's field `query`)."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"type({kind})"


DataSource = Annotated[
    Union[Annotated[TableDataSource, Tag("type(table)")], Annotated[UnionDataSource, Tag("type(union)")],
          Annotated[InlineDataSource, Tag("type(inline)")], Annotated[LookupDataSource, Tag("type(lookup)")],
          Annotated[QueryDataSource, Tag("type(query)")], Annotated[JoinDataSource, Tag("type(join)")]],
    Discriminator(_data_source_type, custom_error_type="data_source_type",
                  custom_error_message="expected a table name or a data source of type table, union, inline, lookup, "
                                       "query or join"),
    BeforeValidator(_named_table),
]


def tables(source: DataSource) -> list[str]:
    """Every table the data source reads, each once: what a caller needs READ on."""
    if isinstance(source, TableDataSource):
        return [source.name]
    if isinstance(source, UnionDataSource):
        return list(dict.fromkeys(t.name for t in source.data_sources))
    if isinstance(source, QueryDataSource):
        return tables(source.query.data_source)
    if isinstance(source, JoinDataSource):
        return list(dict.fromkeys([*tables(source.left), *tables(source.right)]))
    return []
