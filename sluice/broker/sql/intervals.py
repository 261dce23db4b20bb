"""Which time a query reads from each data source: the `__time` bounds of the WHERE clauses over it.

Druid's broker asks only the segments whose interval overlaps the query's intervals; so does Sluice's. The bounds are
read from the Druid SQL AST, and only where that is provably safe: every condition not understood here (a function of
`__time`, NOT, a parameter, a subquery…) stands for "any time", so the intervals found always cover every row the
query can see. AND intersects, OR unites; a comparison, BETWEEN, IN or TIME_IN_INTERVAL on `__time` with a constant
bounds it. A condition on `__time` rejects rows whose `__time` is NULL (there are none), which is what makes the same
reading valid for joined tables as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlglot import exp

from sluice.broker.functions.rewrite import TIME_COLUMN, Zone
from sluice.segment.segment import ETERNITY, Interval
from sluice.spec.intervals import parse_interval

_MILLI = timedelta(milliseconds=1)


def table_intervals(table: exp.Table, zone: Zone | None, now: datetime) -> list[Interval]:
    """The intervals of `__time` that the query can read from `table` (a data source reference), sorted, disjoint.

    `now` is when the query is planned; it only ever lowers a lower bound (`__time >= CURRENT_TIMESTAMP - …`), which
    stays safe as the clock moves on.
    """
    select = _selecting(table)
    where = select.args.get("where") if select is not None else None
    if where is None:
        return [ETERNITY]
    names = {table.alias_or_name}
    single_source = len(_sources(select)) == 1
    return _Bounds(names, single_source, zone, now).of(where.this)


def _selecting(table: exp.Table) -> exp.Select | None:
    """The SELECT whose FROM or JOIN names `table` directly."""
    parent = table.parent
    if isinstance(parent, exp.From | exp.Join) and isinstance(parent.parent, exp.Select):
        return parent.parent
    return None


def _sources(select: exp.Select) -> list[exp.Expr]:
    from_ = select.args.get("from_")
    return ([from_.this] if from_ is not None else []) + [join.this for join in select.args.get("joins") or []]


class _Bounds:
    def __init__(self, names: set[str], single_source: bool, zone: Zone | None, now: datetime) -> None:
        self._names = names
        self._single_source = single_source
        self._zone = zone
        self._now = now

    def of(self, condition: exp.Expr) -> list[Interval]:
        if isinstance(condition, exp.Paren):
            return self.of(condition.this)
        if isinstance(condition, exp.And):
            return intersect(self.of(condition.this), self.of(condition.expression))
        if isinstance(condition, exp.Or):
            return unite([*self.of(condition.this), *self.of(condition.expression)])
        if isinstance(condition, exp.Between) and self._is_time(condition.this):
            low, high = self._instant(condition.args["low"]), self._instant(condition.args["high"], upper=True)
            return [_between(low, high + _MILLI if high else None)]
        if isinstance(condition, exp.In) and self._is_time(condition.this) and not condition.args.get("query"):
            points = [self._instant(value, upper=True) for value in condition.expressions]
            if all(points):
                return unite([Interval(p, p + _MILLI) for p in points])
        if isinstance(condition, exp.Anonymous) and condition.name.upper() == "TIME_IN_INTERVAL" \
                and len(condition.expressions) == 2 and self._is_time(condition.expressions[0]):
            literal = condition.expressions[1]
            if isinstance(literal, exp.Literal) and literal.is_string:
                try:
                    return [Interval(*parse_interval(literal.name))]
                except ValueError:
                    pass
        if isinstance(condition, exp.EQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
            return self._comparison(condition)
        return [ETERNITY]

    def _comparison(self, condition: exp.Expr) -> list[Interval]:
        left, right, kind = condition.this, condition.expression, type(condition)
        if self._is_time(right) and not self._is_time(left):
            left, right, kind = right, left, _FLIPPED.get(kind, kind)
        if not self._is_time(left):
            return [ETERNITY]
        if kind in (exp.GT, exp.GTE):
            return [_between(self._instant(right), None)]
        instant = self._instant(right, upper=True)
        if instant is None:
            return [ETERNITY]
        if kind is exp.LT:
            return [_between(None, instant)]
        if kind is exp.LTE:
            return [_between(None, instant + _MILLI)]
        return [Interval(instant, instant + _MILLI)]  # EQ

    def _is_time(self, node: exp.Expr) -> bool:
        if not isinstance(node, exp.Column) or node.name != TIME_COLUMN:
            return False
        return node.table in self._names if node.table else self._single_source

    def _instant(self, node: exp.Expr, upper: bool = False) -> datetime | None:
        """The constant instant `node` stands for, floored to a millisecond; None when not a known constant.

        CURRENT_TIMESTAMP only serves lower bounds: by the time the query runs, now is later than when it was planned.
        """
        if isinstance(node, exp.Paren):
            return self._instant(node.this, upper)
        if isinstance(node, exp.Cast) and node.to.is_type(exp.DType.TIMESTAMP) or \
                isinstance(node, exp.Anonymous) and node.name.upper() == "TIME_PARSE" and len(node.expressions) == 1:
            node = node.this if isinstance(node, exp.Cast) else node.expressions[0]
        if isinstance(node, exp.Literal) and node.is_string:
            return _parse(node.name, self._zone)
        if isinstance(node, exp.Anonymous) and node.name.upper() == "MILLIS_TO_TIMESTAMP" \
                and len(node.expressions) == 1 and isinstance(node.expressions[0], exp.Literal) \
                and not node.expressions[0].is_string:
            return datetime.fromtimestamp(int(node.expressions[0].name) / 1000, UTC)
        if isinstance(node, exp.CurrentTimestamp) and not upper:
            return self._now
        if isinstance(node, exp.Sub | exp.Add) and not upper:
            base, step = self._instant(node.this), _interval(node.expression)
            if base is not None and step is not None:
                return base - step if isinstance(node, exp.Sub) else base + step
        return None


_FLIPPED: dict[type, type] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}

_UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 604800}


def _interval(node: exp.Expr) -> timedelta | None:
    """`INTERVAL '1' DAY` and the like as a duration; calendar units (months, years) are not constant: None."""
    if not isinstance(node, exp.Interval) or node.unit is None:
        return None
    unit = node.unit.name.upper().rstrip("S")
    try:
        amount = float(node.this.name)
    except (AttributeError, ValueError):
        return None
    seconds = _UNIT_SECONDS.get(unit)
    return None if seconds is None else timedelta(seconds=amount * seconds)


def _parse(text: str, zone: Zone | None) -> datetime | None:
    """Timestamp text as Druid reads it: local time in the session's zone unless it names an offset."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone.tzinfo if zone else UTC)
    utc = parsed.astimezone(UTC)
    return utc.replace(microsecond=utc.microsecond - utc.microsecond % 1000)


def _between(start: datetime | None, end: datetime | None) -> Interval:
    start = ETERNITY.start if start is None else max(start, ETERNITY.start)
    end = ETERNITY.end if end is None else min(end, ETERNITY.end)
    return Interval(start, max(start, end))


def unite(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same instants; empty intervals vanish."""
    merged: list[Interval] = []
    for interval in sorted(i for i in intervals if i.start < i.end):
        if merged and interval.start <= merged[-1].end:
            merged[-1] = Interval(merged[-1].start, max(merged[-1].end, interval.end))
        else:
            merged.append(interval)
    return merged


def intersect(left: list[Interval], right: list[Interval]) -> list[Interval]:
    return unite(common for a in left for b in right if (common := a.intersection(b)) is not None)


def overlaps_any(interval: Interval, intervals: list[Interval]) -> bool:
    return any(interval.overlaps(other) for other in intervals)
