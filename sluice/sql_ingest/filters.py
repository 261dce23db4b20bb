"""A SELECT's WHERE as a transformSpec `filter` (Druid's dimension filters in `sluice.spec.filters`).

Druid's filters compare values as strings unless a bound orders numerically, so comparisons on numbers become
numeric bounds (an equality on a DOUBLE too: "1.0" is not "1"); comparisons on `__time` are taken out first, as
the time range of a `druid` input source.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlglot import exp

from sluice.sql_ingest.expressions import literal_value
from sluice.sql_ingest.parse import invalid
from sluice.timestamps import parse_timestamp

TIME = "__time"
_FLIPPED = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def mentions_time(node: exp.Expression) -> bool:
    return any(c.name == TIME for c in node.find_all(exp.Column))


def time_bounds(terms: list[exp.Expression], clause: str) -> tuple[datetime | None, datetime | None]:
    """`__time >= TIMESTAMP '…' AND __time < TIMESTAMP '…'` (also `>`/`<=`, BETWEEN) as [start, end)."""
    start: datetime | None = None
    end: datetime | None = None
    for term in terms:
        if isinstance(term, exp.Between) and _is_time(term.this):
            low, high = _timestamp(term.args["low"], clause), _timestamp(term.args["high"], clause)
            start, end = _later(start, low), _earlier(end, _plus_one_milli(high))
            continue
        kind, column, value = _comparison(term)
        if kind is None or not _is_time(column):
            raise invalid(f"{clause} supports only comparisons of __time with TIMESTAMP literals joined by AND; "
                          f"found [{term.sql(dialect='druid')}]")
        instant = _timestamp(value, clause)
        if kind in (exp.GTE, exp.GT):
            start = _later(start, _plus_one_milli(instant) if kind is exp.GT else instant)
        elif kind in (exp.LT, exp.LTE):
            end = _earlier(end, _plus_one_milli(instant) if kind is exp.LTE else instant)
        elif kind is exp.EQ:
            start, end = _later(start, instant), _earlier(end, _plus_one_milli(instant))
        else:
            raise invalid(f"{clause}: [{term.sql(dialect='druid')}] does not bound __time")
    return start, end


def _comparison(term: exp.Expression) -> tuple[Any, exp.Expression, exp.Expression]:
    kind = type(term)
    if kind not in _FLIPPED:
        return None, term, term
    left, right = term.this, term.expression
    if isinstance(left, exp.Column):
        return kind, left, right
    if isinstance(right, exp.Column):
        return _FLIPPED[kind], right, left
    return None, term, term


def _is_time(node: exp.Expression) -> bool:
    return isinstance(node, exp.Column) and node.name == TIME


def _timestamp(node: exp.Expression, clause: str) -> datetime:
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        text = node.this.this
    elif isinstance(node, exp.Literal) and node.is_string:
        text = node.this
    else:
        raise invalid(f"{clause}: expected a TIMESTAMP '…' literal, found [{node.sql(dialect='druid')}]")
    try:
        value = parse_timestamp(text.strip().replace(" ", "T", 1) if len(text.strip()) > 10 else text.strip())
    except ValueError:
        raise invalid(f"{clause}: cannot read [{text}] as a timestamp") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _plus_one_milli(value: datetime) -> datetime:
    return value + timedelta(milliseconds=1)


def _later(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a


def _earlier(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b < a else a


def to_dim_filter(node: exp.Expression, types: Callable[[str], str | None]) -> dict[str, Any]:
    """A WHERE condition (without __time) as a Druid filter JSON."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.And, exp.Or)):
        kind = "and" if isinstance(node, exp.And) else "or"
        fields = []
        for side in (node.this, node.expression):
            child = to_dim_filter(side, types)
            fields += child["fields"] if child["type"] == kind else [child]
        return {"type": kind, "fields": fields}
    if isinstance(node, exp.Not):
        return {"type": "not", "field": to_dim_filter(node.this, types)}
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return {"type": "selector", "dimension": _column(node.this, types)[0], "value": None}
    if isinstance(node, exp.In) and not node.args.get("query"):
        name, type_ = _column(node.this, types)
        values = [literal_value(v) for v in node.expressions]
        if type_ in ("double", "float") and all(isinstance(v, (int, float)) for v in values):
            return {"type": "or", "fields": [_numeric_equal(name, v) for v in values]}
        return {"type": "in", "dimension": name, "values": [None if v is None else str(v) for v in values]}
    if isinstance(node, exp.Between):
        name, _ = _column(node.this, types)
        low, high = literal_value(node.args["low"]), literal_value(node.args["high"])
        return _bound(name, low, high, False, False)
    kind, column, value_node = _comparison(node)
    if kind is None:
        raise invalid(f"WHERE condition [{node.sql(dialect='druid')}] is not supported in INSERT or REPLACE yet; "
                      "use comparisons of a column with a literal, IN, BETWEEN, IS NULL, AND, OR, NOT")
    name, type_ = _column(column, types)
    value = literal_value(value_node)
    if value is None:  # a comparison with NULL is never true in SQL
        return {"type": "in", "dimension": name, "values": []}
    numeric = isinstance(value, (int, float)) or type_ != "string"
    if kind in (exp.EQ, exp.NEQ):
        equal = _numeric_equal(name, value) if numeric and type_ in ("double", "float") else \
            {"type": "selector", "dimension": name, "value": str(value)}
        # SQL's `<>` drops nulls; so does a negated filter (a null comparison is unknown, and the row is dropped)
        return {"type": "not", "field": equal} if kind is exp.NEQ else equal
    lower = value if kind in (exp.GT, exp.GTE) else None
    upper = value if kind in (exp.LT, exp.LTE) else None
    return _bound(name, lower, upper, kind is exp.GT, kind is exp.LT, numeric)


def _numeric_equal(name: str, value: Any) -> dict[str, Any]:
    return _bound(name, value, value, False, False, True)


def _bound(name: str, lower: Any, upper: Any, lower_strict: bool, upper_strict: bool,
           numeric: bool | None = None) -> dict[str, Any]:
    if numeric is None:
        numeric = any(isinstance(v, (int, float)) for v in (lower, upper))
    bound: dict[str, Any] = {"type": "bound", "dimension": name, "ordering": "numeric" if numeric else "lexicographic"}
    if lower is not None:
        bound.update(lower=str(lower), lowerStrict=lower_strict)
    if upper is not None:
        bound.update(upper=str(upper), upperStrict=upper_strict)
    return bound


def _column(node: exp.Expression, types: Callable[[str], str | None]) -> tuple[str, str]:
    if not isinstance(node, exp.Column):
        raise invalid(f"WHERE on the expression [{node.sql(dialect='druid')}] is not supported in INSERT or REPLACE "
                      "yet; filter on source columns")
    type_ = types(node.name)
    if type_ is None:
        raise invalid(f"Column '{node.name}' not found in any table")
    return node.name, type_
