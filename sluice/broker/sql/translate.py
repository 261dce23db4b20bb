"""Druid SQL → DuckDB SQL, and the sandbox that decides which queries may run at all.

A query is parsed with sqlglot's Druid dialect, checked (one read-only statement whose tables are known data sources,
system tables or CTEs, no table functions, no functions outside Druid's), rewritten on the AST (Druid's functions and
time zone, Calcite's output names, the `druid` schema, system tables) and generated as DuckDB SQL. Before the rewrite,
the column references that read a complex column (a first/last pair, a sketch) are marked, from what the caller says
the data sources' files hold (`complex_types.py`): Druid's functions read such a column by its type; a query that
reads a multi-value string column is rewritten to read it as Druid does (`multi_value.py`). The query's text
is never rewritten as text; `EXPLAIN PLAN FOR` in front of it is only blanked out before parsing.

Alongside the SQL, a translation says what the query reads: which data sources, over which intervals of `__time`
(so that the broker reads only the segments that can hold its rows), and which system tables.

The generated SQL assumes the DuckDB session settings in `DUCKDB_SETTINGS`; the engine applies them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from sluice.broker.functions import bloom, python_functions, sketches, tdigest
from sluice.broker.sql.complex_types import mark_complex_columns
from sluice.broker.errors import SqlError
from sluice.broker.limits import DEFAULT_TIMEOUT_MS
from sluice.broker.functions.rewrite import TIME_COLUMN, DruidDialect, Session, Zone, is_druid_function, \
    rewrite_druid_functions
from sluice.broker.sql.intervals import table_intervals, unite
from sluice.broker.functions.lookups import LOOKUP_SCHEMA, from_lookup_schema, read_lookups
from sluice.broker.sql.multi_value import MULTI_VALUE, rewrite_multi_value
from sluice.broker.sql.nested_fields import NESTED_FIELD, read_field_columns
from sluice.broker.sql.lookup_groups import group_lookup_keys_first
from sluice.broker.sql.windows import rewrite_windows
from sluice.broker.functions.scalar_functions import constant_pi, unsupported_reason
from sluice.broker.system_tables import DRUID_SCHEMA, SystemTable, find_system_table, is_system_schema
from sluice.broker.sql.time_groups import group_time_buckets
from sluice.segment.segment import Interval
from sluice.spec.context import as_bool, as_int, context_value

__all__ = ["DUCKDB_SETTINGS", "TIME_COLUMN", "ComplexColumns", "QueryContext", "SqlError", "Translation", "translate",
           "translate_query"]

# Druid divides BIGINT by BIGINT as integers (5/2 = 2) and works in UTC; the DuckDB session must do the same.
DUCKDB_SETTINGS: dict[str, Any] = {"integer_division": True, "TimeZone": "UTC"}



@dataclass(frozen=True)
class QueryContext:
    """The query context keys the SQL layer honours, under Druid's names."""

    query_id: str | None = None  # sqlQueryId
    session: Session = field(default_factory=Session)  # sqlTimeZone, useApproximateCountDistinct
    timeout_ms: int = DEFAULT_TIMEOUT_MS  # timeout; 0 means none
    outer_limit: int | None = None  # sqlOuterLimit: at most this many rows come back
    stringify_arrays: bool = True  # sqlStringifyArrays: arrays are written as JSON text
    #: groupByEnableMultiValueUnnesting: grouping by a multi-value column groups each value (else it is an error)
    multi_value_unnesting: bool = True

    @classmethod
    def parse(cls, context: Mapping[str, Any] | None) -> QueryContext:
        """Druid's keys, read as its QueryContexts reads them (the JSON value or its text); SqlError (400) else."""
        context = context or {}
        zone = context.get("sqlTimeZone")
        query_id = context.get("sqlQueryId")
        try:
            return cls(
                query_id=None if query_id is None else str(query_id),
                session=Session(
                    time_zone=None if zone is None else Zone.parse(str(zone)),
                    approximate_count_distinct=context_value(context, "useApproximateCountDistinct", True, as_bool),
                ),
                timeout_ms=context_value(context, "timeout", DEFAULT_TIMEOUT_MS, as_int) or 0,
                outer_limit=context_value(context, "sqlOuterLimit", None, as_int),
                stringify_arrays=context_value(context, "sqlStringifyArrays", True, as_bool),
                multi_value_unnesting=context_value(context, "groupByEnableMultiValueUnnesting", True, as_bool),
            )
        except ValueError as e:
            raise SqlError(str(e)) from None


@dataclass(frozen=True)
class Translation:
    """A sandbox-checked query in DuckDB SQL, and what it reads."""

    sql: str
    data_sources: frozenset[str]  # the engine makes views for exactly these
    intervals: Mapping[str, list[Interval]]  # per data source: the only times the query can read
    system_tables: frozenset[SystemTable]  # registered on the query's cursor
    parameter_count: int  # `?` placeholders, bound positionally
    context: QueryContext
    explain: bool = False  # EXPLAIN PLAN FOR: describe the query instead of running it
    lookups: frozenset[str] = frozenset()  # registered on the query's cursor (LOOKUP calls, `lookup.` tables)
    python_functions: bool = False  # calls functions run in Python (sketches…), which the engine registers
    reads_clock: bool = False  # CURRENT_TIMESTAMP and the like: its answer changes with the time it runs


#: The Druid complex type (serializablePairLongLong, HLLSketch…) of each complex column of a data source, and
#: MULTI_VALUE for each multi-value string column, NESTED_FIELD for each field column of a json dimension in its
#: view (nested_fields.py), by column name, as the files a query reads of it hold them: the files over the given
#: intervals of `__time`.
ComplexColumns = Callable[[str, list[Interval]], Mapping[str, str]]
_PYTHON_FUNCTIONS = sketches.FUNCTIONS | bloom.FUNCTIONS | tdigest.FUNCTIONS | python_functions.FUNCTIONS


def translate(sql: str, tables: Collection[str]) -> str:
    """Druid SQL text → DuckDB SQL text; `tables` are the data sources that exist. Raises SqlError (400)."""
    return translate_query(sql, tables).sql


_EXPLAIN = re.compile(r"\s*EXPLAIN\s+PLAN\s+FOR\s", re.IGNORECASE)


def translate_query(sql: str, tables: Collection[str], context: Mapping[str, Any] | QueryContext | None = None,
                    now: datetime | None = None, complex_columns: ComplexColumns | None = None) -> Translation:
    """Like `translate`, also saying what the query reads; `now` (default: the clock) is when the query is planned.

    `complex_columns` is asked once for each data source the query reads, in name order, once the query is checked
    and before it is rewritten; without it, no column is taken for a complex or multi-value one.
    """
    query_context = context if isinstance(context, QueryContext) else QueryContext.parse(context)
    explain = _EXPLAIN.match(sql)
    if explain:  # blanked rather than cut, so that error positions still point into the user's text
        sql = re.sub(r"[^\n]", " ", sql[: explain.end()]) + sql[explain.end():]
    statement = _parse(sql)
    _check_statement(statement, sql)
    data_source_tables, system_tables = _check_tables(statement, sql, set(tables))
    _check_functions(statement)
    reads_clock = next(statement.find_all(*_CLOCK_FUNCTIONS), None) is not None
    zone = query_context.session.time_zone
    planned = now or datetime.now(UTC)
    intervals: dict[str, list[Interval]] = {}
    for table in data_source_tables:
        intervals.setdefault(table.name, []).extend(table_intervals(table, zone, planned))
    united = {source: unite(found) for source, found in sorted(intervals.items())}
    fields: dict[str, list[str]] = {}  # the view's field columns of json dimensions, by data source
    if complex_columns is not None:
        kinds = {source: complex_columns(source, found) for source, found in united.items()}
        fields = {source: [name for name, kind in columns.items() if kind == NESTED_FIELD]
                  for source, columns in kinds.items()}
        mark_complex_columns(statement, {source: {name: kind for name, kind in columns.items()
                                                  if kind not in (MULTI_VALUE, NESTED_FIELD)}
                                         for source, columns in kinds.items()})
        rewrite_multi_value(statement, {source: [name for name, kind in columns.items() if kind == MULTI_VALUE]
                                        for source, columns in kinds.items()}, query_context.multi_value_unnesting)
    constant_pi(statement)
    _name_projections(statement)
    read_field_columns(statement, fields)  # after naming: a JSON_VALUE read from its field column is still EXPR$n
    rewrite_windows(statement)
    statement = group_lookup_keys_first(statement)
    rewrite_druid_functions(statement, query_context.session)
    group_time_buckets(statement)
    lookups = read_lookups(statement)
    if query_context.outer_limit is not None:
        statement = _limit(statement, query_context.outer_limit)
    return Translation(
        sql=statement.sql(dialect="duckdb"),
        data_sources=frozenset(united),
        intervals=united,
        system_tables=frozenset(system_tables),
        parameter_count=sum(1 for _ in statement.find_all(exp.Placeholder)),
        context=query_context,
        explain=bool(explain),
        lookups=lookups,
        python_functions=any(isinstance(node, exp.Anonymous) and node.name.upper() in _PYTHON_FUNCTIONS
                             for node in statement.walk()),
        reads_clock=reads_clock,
    )


def _limit(statement: exp.Query, limit: int) -> exp.Query:
    """sqlOuterLimit: the outer query returns at most `limit` rows, whatever LIMIT it has itself."""
    return exp.select(exp.Star()).from_(statement.subquery("outer_limit")).limit(limit)


# ---------------------------------------------------------------------------------------------------------- sandbox


# Statements that are not queries, refused by their first keyword: sqlglot does not parse some of them (ATTACH,
# EXPORT DATABASE…), and the user should hear that the statement is not allowed rather than that it is misspelt.
_STATEMENTS = frozenset({
    "ALTER", "ANALYZE", "ATTACH", "BEGIN", "CALL", "CHECKPOINT", "COMMIT", "COPY", "CREATE", "DEALLOCATE", "DELETE",
    "DESCRIBE", "DETACH", "DROP", "EXECUTE", "EXPORT", "GRANT", "IMPORT", "INSERT", "INSTALL", "LOAD", "MERGE",
    "PRAGMA", "PREPARE", "RESET", "REVOKE", "ROLLBACK", "SET", "SHOW", "SUMMARIZE", "TRUNCATE", "UPDATE", "USE",
    "VACUUM",
})
#: UNION ALL and subqueries beyond this are refused before they are planned
MAX_SELECTS = 1000
_ONLY_QUERIES = "Only SELECT queries are allowed, not {}: a query may read data sources and system tables, " \
                "nothing else"


def _parse(sql: str) -> exp.Query:
    dialect = DruidDialect()
    try:
        tokens = dialect.tokenize(sql)
    except TokenError as e:
        raise SqlError(str(e)) from e
    if tokens and tokens[0].text.upper() in _STATEMENTS:
        raise SqlError(_ONLY_QUERIES.format(tokens[0].text.upper()))
    selects = sum(1 for token in tokens if token.token_type is TokenType.SELECT)
    if selects > MAX_SELECTS:  # planning grows faster than the query: 10,000 UNION ALLs take DuckDB 3 GB
        raise SqlError(f"The query is too large: {selects} SELECTs, at most {MAX_SELECTS} are allowed in one query")
    try:
        statements = [s for s in dialect.parser().parse(tokens, sql) if s is not None]
    except ParseError as e:
        detail = e.errors[0] if e.errors else {}
        line, column = detail.get("line"), detail.get("col")
        raise SqlError(
            f"Incorrect syntax: {detail.get('description', e)} (line [{line}], column [{column}])",
            context={"sourceType": "sql", "line": str(line), "column": str(column)},
        ) from e
    if not statements:
        raise SqlError("The query is empty")
    if len(statements) > 1:
        raise SqlError(f"Only one statement per query is allowed, got {len(statements)}")
    return statements[0]


def _check_statement(statement: exp.Expr, sql: str) -> None:
    """Only reads: SELECT, WITH … SELECT and set operations, and nothing that writes or configures inside them."""
    if not isinstance(statement, exp.Query):
        # sqlglot parses some statements it does not know oddly (CHECKPOINT as a column); the first keyword is exact.
        raise SqlError(_ONLY_QUERIES.format(DruidDialect().tokenize(sql)[0].text.upper()))
    for node in statement.walk():
        if isinstance(node, (exp.DML, exp.DDL, exp.Command)):
            raise SqlError(_ONLY_QUERIES.format(node.key.upper()))
        if isinstance(node, exp.Into):  # SELECT … INTO t creates a table
            raise SqlError(_ONLY_QUERIES.format("SELECT … INTO"))


def _check_tables(statement: exp.Expr, sql: str, data_sources: set[str]) -> tuple[list[exp.Table], set[SystemTable]]:
    """Every table is a known data source (optionally `druid.`), a lookup (`lookup.`; the engine says whether it
    exists), a system table or a CTE in scope.

    Returns the references to data sources and the system tables read; system tables are renamed to the relations
    the engine registers for them.
    """
    sources, system = [], set()
    for table in list(statement.find_all(exp.Table)):
        name = table.this
        if not isinstance(name, exp.Identifier):
            raise SqlError(f"Table functions are not allowed, only data sources: {name.sql(dialect='druid')}")
        where = _Span.of(name, sql)
        if where.text.startswith("'"):
            raise SqlError(f"A string literal is not a table, use a data source name instead of {where.text}")
        schema, catalog = table.args.get("db"), table.args.get("catalog")
        if catalog:
            raise SqlError(f"Object '{catalog.name}' not found{_Span.of(catalog, sql).suffix}")
        if schema and schema.name == LOOKUP_SCHEMA:
            from_lookup_schema(table)
            continue
        if schema and schema.name != DRUID_SCHEMA:
            system.add(_system_table(table, schema, sql))
            continue
        if not schema and table.name in _ctes_in_scope(table):
            continue
        if table.name not in data_sources:
            within = f" within '{DRUID_SCHEMA}'" if schema else ""
            raise SqlError(f"Object '{table.name}' not found{within}{where.suffix}", context=where.context)
        table.set("db", None)
        sources.append(table)
    return sources, system


def _system_table(table: exp.Table, schema: exp.Identifier, sql: str) -> SystemTable:
    """Resolves `INFORMATION_SCHEMA.X` / `sys.x`, keeping the table's name usable as a qualifier in the query."""
    found = find_system_table(schema.name, table.name)
    if found is None:
        where = _Span.of(table.this if is_system_schema(schema.name) else schema, sql)
        missing = f"'{table.name}' not found within '{schema.name}'" if is_system_schema(schema.name) \
            else f"'{schema.name}' not found"
        raise SqlError(f"Object {missing}{where.suffix}", context=where.context)
    if not table.alias:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name, quoted=True)))
    table.set("db", None)
    table.set("this", exp.to_identifier(found.relation, quoted=True))
    return found


def _ctes_in_scope(table: exp.Table) -> set[str]:
    """CTE names visible at `table`: those of enclosing WITHs, and in a CTE body only the CTEs defined before it."""
    names: set[str] = set()
    child, node = table, table.parent
    while node is not None:
        if isinstance(node, exp.With) and isinstance(child, exp.CTE):
            visible = child.index + (1 if node.args.get("recursive") else 0)
            names.update(cte.alias for cte in node.expressions[:visible])
        elif isinstance(node, exp.Query) and isinstance(with_ := node.args.get("with_"), exp.With):
            if child is not with_:
                names.update(cte.alias for cte in with_.expressions)
        child, node = node, node.parent
    return names


# File readers DuckDB knows under the same names as other dialects; sqlglot parses them into typed nodes.
_FILE_FUNCTIONS = (exp.ReadCSV, exp.ReadParquet)
# DuckDB's functions that reach files, URLs, the environment or the engine's state. Only Druid's functions pass the
# check at all; these names just get a message that says why they are refused.
_ENGINE_FUNCTION = re.compile(
    r"(READ_|DUCKDB_|PRAGMA_|PARQUET_|SNIFF_|ICEBERG_|DELTA_|SQLITE_|POSTGRES_|MYSQL_|HTTP_).*"
    r"|GLOB|GETENV|CURRENT_SETTING|WHICH_SECRET|QUERY|QUERY_TABLE",
    re.IGNORECASE)


# sqlglot's typed functions of the session (CURRENT_DATABASE, CURRENT_USER, VERSION…): of these Druid has only the clock
_SESSION_FUNCTIONS = tuple(getattr(exp, name) for name in dir(exp)
                           if name.startswith("Current") or name in ("SessionUser", "Version"))
_CLOCK_FUNCTIONS = (exp.CurrentDate, exp.CurrentTimestamp, exp.CurrentTime)


def _check_functions(statement: exp.Expr) -> None:
    """Functions are Druid's: sqlglot's typed functions or Druid's own, never DuckDB's extras. A Druid function Sluice
    cannot answer is named with the reason."""
    for func in statement.find_all(exp.Func):
        if isinstance(func, _SESSION_FUNCTIONS) and not isinstance(func, _CLOCK_FUNCTIONS):
            raise SqlError(f"Function {func.sql_name()} is not allowed: a query may read data sources and system "
                           "tables, not the engine's session or version")
        if isinstance(func, _FILE_FUNCTIONS) or (isinstance(func, exp.Anonymous) and not is_druid_function(func.name)):
            name = func.name if isinstance(func, exp.Anonymous) else func.sql_name()
            reason = unsupported_reason(name)
            if reason is not None:
                raise SqlError(f"Function {name.upper()} is not supported: {reason}")
            if _ENGINE_FUNCTION.fullmatch(name):
                raise SqlError(f"Function {name.upper()} is not allowed: a query may read data sources and system "
                               "tables, not files, URLs, the environment or engine settings")
            raise SqlError(f"No match found for function signature {name}(...)")


@dataclass(frozen=True)
class _Span:
    """Where a node sits in the query text, as Druid reports it: 1-based line and column."""

    text: str
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def of(cls, node: exp.Expr, sql: str) -> _Span:
        start, end = node.meta.get("start", 0), node.meta.get("end", 0)
        line, column = _line_column(sql, start)
        end_line, end_column = _line_column(sql, end)
        return cls(sql[start : end + 1], line, column, end_line, end_column)

    @property
    def suffix(self) -> str:
        return f" (line [{self.line}], column [{self.column}])"

    @property
    def context(self) -> dict[str, str]:
        return {
            "sourceType": "sql",
            "line": str(self.line),
            "column": str(self.column),
            "endLine": str(self.end_line),
            "endColumn": str(self.end_column),
        }


def _line_column(sql: str, offset: int) -> tuple[int, int]:
    line_start = sql.rfind("\n", 0, offset) + 1
    return sql.count("\n", 0, offset) + 1, offset - line_start + 1


# ------------------------------------------------------------------------------------------------------ rewriting


def _name_projections(statement: exp.Expr) -> None:
    """Calcite's output names: an unaliased expression is `EXPR$<position>`, a plain column keeps its name."""
    for select in statement.find_all(exp.Select):
        for position, projection in enumerate(select.expressions):
            if not isinstance(projection, (exp.Alias, exp.Column, exp.Star)):
                projection.replace(exp.alias_(projection.copy(), f"EXPR${position}", quoted=True))
