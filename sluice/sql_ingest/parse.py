"""An INSERT or REPLACE statement split into its parts.

sqlglot does not know Druid's ingestion clauses (`OVERWRITE …`, `PARTITIONED BY`, `CLUSTERED BY`) nor the table
functions' `EXTEND (…)` column lists, so they are cut out on a token stream that knows string literals, quoted
identifiers, comments and parentheses (a literal or a nested query may contain the same words), and only the plain
SELECT that is left goes to sqlglot. The external table `TABLE(…) [EXTEND] (…)` is replaced by a placeholder table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.errors import SqlglotError

from sluice.broker.errors import SqlError
from sluice.broker.functions.rewrite import DruidDialect

#: the table name the external table is replaced by before sqlglot parses the SELECT
EXTERNAL = "__sluice_external"

_TOKEN = re.compile(r"""
    (?P<space>\s+) | (?P<comment>--[^\n]*|/\*.*?\*/) | (?P<string>'(?:[^']|'')*') | (?P<quoted>"(?:[^"]|"")*")
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*) | (?P<open>\() | (?P<close>\)) | (?P<param>\?) | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int
    end: int
    depth: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


@dataclass
class ExternalTable:
    """`TABLE(fn(args)) [EXTEND] (cols)`: the function's name and arguments, and the declared columns."""

    function: str
    call: exp.Expression
    columns: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class IngestStatement:
    kind: str  # INSERT or REPLACE
    data_source: str
    #: REPLACE's `OVERWRITE ALL` (True) or the `OVERWRITE WHERE` condition; None for INSERT
    overwrite_all: bool = False
    overwrite_where: exp.Expression | None = None
    select: exp.Select = field(default_factory=exp.Select)
    external: ExternalTable | None = None
    partitioned_by: str | None = None
    clustered_by: list[exp.Expression] = field(default_factory=list)


def invalid(message: str) -> SqlError:
    """Druid's 400: `druidException` / `invalidInput` / USER / INVALID_INPUT."""
    return SqlError(message)


def tokenize(sql: str) -> list[Token]:
    tokens, depth = [], 0
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup or "other"
        if kind in ("space", "comment"):
            continue
        if kind == "close":
            depth -= 1
        tokens.append(Token(kind, match.group(), match.start(), match.end(), depth))
        if kind == "open":
            depth += 1
    if depth != 0:
        raise invalid("Unbalanced parentheses in the statement")
    return tokens


def bind_parameters(sql: str, parameters: list[dict[str, Any]]) -> str:
    """Druid's `?` parameters (`[{"type": "VARCHAR", "value": "x"}]`) as literals, in order."""
    tokens = [t for t in tokenize(sql) if t.kind == "param"]
    if len(tokens) != len(parameters):
        raise invalid(f"The statement has {len(tokens)} parameters (?) but {len(parameters)} values were given")
    out, last = [], 0
    for token, parameter in zip(tokens, parameters):
        out += [sql[last:token.start], _literal(parameter)]
        last = token.end
    return "".join(out) + sql[last:]


def _literal(parameter: dict[str, Any]) -> str:
    value, kind = parameter.get("value"), str(parameter.get("type", "VARCHAR")).upper()
    if value is None:
        return "NULL"
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(_literal({"type": "VARCHAR", "value": v}) for v in value) + "]"
    if kind in ("BIGINT", "INTEGER", "DOUBLE", "FLOAT", "REAL", "DECIMAL", "BOOLEAN") or isinstance(value, (int, float)):
        return json.dumps(value)
    if kind == "TIMESTAMP":
        return f"TIMESTAMP '{value}'"
    return "'" + str(value).replace("'", "''") + "'"


def parse_statement(sql: str) -> IngestStatement:
    """Raises SqlError naming what is wrong or unsupported."""
    text = sql.strip().rstrip(";").strip()
    tokens = tokenize(text)
    if not tokens or not tokens[0].is_word("INSERT", "REPLACE"):
        first = tokens[0].text.upper() if tokens else ""
        if first in ("SELECT", "WITH", "EXPLAIN"):
            raise invalid("Sluice runs only INSERT and REPLACE statements as tasks; "
                          "send a SELECT to /druid/v2/sql")
        raise invalid("Expected an INSERT INTO or REPLACE INTO statement")
    kind = tokens[0].text.upper()
    if len(tokens) < 3 or not tokens[1].is_word("INTO"):
        raise invalid(f"Expected INTO after {kind}")
    data_source, i = _table_name(tokens, 2)
    statement = IngestStatement(kind, data_source)
    if i < len(tokens) and tokens[i].kind == "open":
        raise invalid(f"{kind} with a column list is not supported: columns bind by name; use AS in the SELECT")
    select_at = _next_top_level(tokens, i, "SELECT", "WITH")
    if select_at is None:
        raise invalid(f"Expected a SELECT query after {kind} INTO {data_source}")
    _overwrite(statement, text, tokens, i, select_at)
    if tokens[select_at].is_word("WITH"):
        raise invalid("WITH (common table expressions) is not supported in INSERT or REPLACE yet")
    partitioned_at = _last_top_level_pair(tokens, select_at, "PARTITIONED", "BY")
    clustered_at = _last_top_level_pair(tokens, select_at, "CLUSTERED", "BY")
    ends = [at for at in (partitioned_at, clustered_at) if at is not None]
    body_end = tokens[min(ends)].start if ends else len(text)
    if partitioned_at is None:
        raise invalid(f"Operation [{kind}] requires a PARTITIONED BY to be explicitly defined, but none was found.")
    if clustered_at is not None and clustered_at < partitioned_at:
        raise invalid("CLUSTERED BY found before PARTITIONED BY, CLUSTERED BY must come after the PARTITIONED BY clause")
    clause_end = tokens[clustered_at].start if clustered_at is not None else len(text)
    statement.partitioned_by = text[tokens[partitioned_at + 1].end:clause_end].strip()
    if clustered_at is not None:
        statement.clustered_by = _parse_list(text[tokens[clustered_at + 1].end:].strip(), "CLUSTERED BY")
    body = text[tokens[select_at].start:body_end]
    body, statement.external = _external_table(body)
    statement.select = _parse_select(body)
    return statement


def _table_name(tokens: list[Token], i: int) -> tuple[str, int]:
    parts = []
    while i < len(tokens):
        token = tokens[i]
        if token.kind == "quoted":
            parts.append(token.text[1:-1].replace('""', '"'))
        elif token.kind == "word" and not token.is_word("OVERWRITE", "SELECT", "WITH"):
            parts.append(token.text)
        else:
            raise invalid(f"Expected a table name, found [{token.text}]")
        i += 1
        if i < len(tokens) and tokens[i].text == ".":
            i += 1
            continue
        break
    if len(parts) == 2 and parts[0].lower() == "druid":
        parts = parts[1:]
    if len(parts) != 1:
        raise invalid(f"Cannot {tokens[0].text.upper()} into [{'.'.join(parts)}] because it is not a Druid datasource")
    return parts[0], i


def _next_top_level(tokens: list[Token], start: int, *words: str) -> int | None:
    return next((i for i in range(start, len(tokens)) if tokens[i].depth == 0 and tokens[i].is_word(*words)), None)


def _last_top_level_pair(tokens: list[Token], start: int, first: str, second: str) -> int | None:
    found = None
    for i in range(start, len(tokens) - 1):
        if tokens[i].depth == 0 and tokens[i].is_word(first) and tokens[i + 1].is_word(second):
            found = i
    return found


def _overwrite(statement: IngestStatement, text: str, tokens: list[Token], i: int, select_at: int) -> None:
    clause = tokens[i:select_at]
    if statement.kind == "INSERT":
        if clause:
            raise invalid("An INSERT statement cannot have an OVERWRITE clause; use REPLACE")
        return
    if not clause or not clause[0].is_word("OVERWRITE") or len(clause) < 2:
        raise invalid("Missing time chunk information in OVERWRITE clause for REPLACE. Use OVERWRITE WHERE "
                      "<__time based condition> or OVERWRITE ALL to overwrite the entire table.")
    if clause[1].is_word("ALL") and len(clause) == 2:
        statement.overwrite_all = True
    elif clause[1].is_word("WHERE"):
        condition = text[clause[1].end:tokens[select_at].start]
        try:
            statement.overwrite_where = DruidDialect().parse(f"SELECT 1 WHERE {condition}")[0].args["where"].this
        except (SqlglotError, KeyError, AttributeError) as error:
            raise invalid(f"Cannot parse the OVERWRITE WHERE condition: {error}") from None
    else:
        raise invalid("Expected OVERWRITE ALL or OVERWRITE WHERE <__time based condition>")


def _parse_list(text: str, clause: str) -> list[exp.Expression]:
    """The columns of CLUSTERED BY, read as an ORDER BY list (so that ASC / DESC are seen)."""
    try:
        select = DruidDialect().parse(f"SELECT 1 ORDER BY {text}")[0]
    except SqlglotError as error:
        raise invalid(f"Cannot parse {clause} [{text}]: {error}") from None
    order = select.args.get("order") if isinstance(select, exp.Select) else None
    if order is None or any(v for k, v in select.args.items() if k not in ("expressions", "order")):
        raise invalid(f"Cannot parse {clause} [{text}]")
    return list(order.expressions)


def _external_table(body: str) -> tuple[str, ExternalTable | None]:
    """Cut `TABLE(fn(…)) [EXTEND] [(columns)]` out of the SELECT; there may be one."""
    tokens = tokenize(body)
    at = [i for i in range(len(tokens) - 1) if tokens[i].is_word("TABLE") and tokens[i + 1].kind == "open"]
    if not at:
        return body, None
    if len(at) > 1:
        raise invalid("Only one external table (TABLE(…)) per statement is supported")
    i = at[0]
    close = _matching(tokens, i + 1)
    inner = body[tokens[i + 1].end:tokens[close].start].strip()
    end, columns = tokens[close].end, []
    j = close + 1
    if j < len(tokens) and tokens[j].is_word("EXTEND"):
        j += 1
        if j >= len(tokens) or tokens[j].kind != "open":
            raise invalid("Expected a column list after EXTEND")
    if j < len(tokens) and tokens[j].kind == "open":
        last = _matching(tokens, j)
        columns = _column_list(body[tokens[j].end:tokens[last].start])
        end = tokens[last].end
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", inner)
    if not match or not inner.endswith(")"):
        raise invalid(f"Expected a table function call inside TABLE(…), found [{inner}]")
    name = match.group(1)
    try:
        call = DruidDialect().parse(f"SELECT __sluice_fn{inner[len(name):]}")[0].expressions[0]
    except (SqlglotError, IndexError) as error:
        raise invalid(f"Cannot parse the arguments of table function [{name}]: {error}") from None
    return body[:tokens[i].start] + EXTERNAL + body[end:], ExternalTable(name.upper(), call, columns)


def _matching(tokens: list[Token], open_at: int) -> int:
    depth = tokens[open_at].depth
    return next(i for i in range(open_at + 1, len(tokens)) if tokens[i].kind == "close" and tokens[i].depth == depth)


def _column_list(text: str) -> list[tuple[str, str]]:
    """`x VARCHAR, "y z" BIGINT` -> [(name, SQL type)]."""
    columns = []
    for part in _split_top_level(text):
        match = re.fullmatch(r'\s*("(?:[^"]|"")*"|[A-Za-z_][A-Za-z0-9_$]*)\s+(.+?)\s*', part, re.DOTALL)
        if not match:
            raise invalid(f"Expected a column and its type in EXTEND, found [{part.strip()}]")
        name = match.group(1)
        name = name[1:-1].replace('""', '"') if name.startswith('"') else name
        columns.append((name, " ".join(match.group(2).upper().split())))
    return columns


def _split_top_level(text: str) -> list[str]:
    parts, last = [], 0
    for token in tokenize(text):
        if token.text == "," and token.depth == 0:
            parts.append(text[last:token.start])
            last = token.end
    return [*parts, text[last:]] if text.strip() else []


def _parse_select(body: str) -> exp.Select:
    try:
        parsed = DruidDialect().parse(body)
    except SqlglotError as error:
        raise invalid(f"Cannot parse the SELECT of the statement: {error}") from None
    if len(parsed) != 1 or parsed[0] is None:
        raise invalid("Expected exactly one SELECT query")
    select = parsed[0]
    if not isinstance(select, exp.Select):
        construct = type(select).__name__.upper()
        raise invalid(f"{construct} is not supported in INSERT or REPLACE; use a single SELECT")
    return select
