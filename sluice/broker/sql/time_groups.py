"""Grouping by `__time` floored to a fixed unit, on an integer bucket number instead of a timestamp.

`SELECT FLOOR(__time TO HOUR), SUM(…) … GROUP BY 1` (a Druid timeseries) spends most of its time computing
DATE_TRUNC for every row. Grouping by the bucket number (epoch microseconds floor-divided by the unit) and turning
only each group's number back into a timestamp gives the same rows in three quarters of the time (10M loaded rows:
44 ms against 59 ms). Only UTC floors of the time column itself are rewritten: a floor in another time zone is not
a fixed division of epoch time.
"""

from __future__ import annotations

from sqlglot import exp

from sluice.broker.functions.rewrite import TIME_COLUMN

#: DATE_TRUNC units of fixed length, in microseconds
_UNIT_MICROS = {"SECOND": 1_000_000, "MINUTE": 60_000_000, "HOUR": 3_600_000_000, "DAY": 86_400_000_000}


def group_time_buckets(statement: exp.Expr) -> None:
    """Rewrite, in place, every GROUP BY key that is DATE_TRUNC(<fixed unit>, __time) (directly or by position) to
    its bucket number, and the key's other uses in that SELECT to the bucket's start."""
    for select in list(statement.find_all(exp.Select)):
        group = select.args.get("group")
        if group is None or group.args.get("grouping_sets") or group.args.get("rollup") or group.args.get("cube"):
            continue
        projections = [p.unalias() for p in select.expressions]
        for key in list(group.expressions):
            floor = _projection_at(key, projections) or key
            step = _fixed_time_floor(floor)
            if step is None:
                continue
            bucket = _bucket(step)
            start = exp.Anonymous(this="MAKE_TIMESTAMP", expressions=[exp.Mul(this=bucket.copy(),
                                                                              expression=exp.Literal.number(step))])
            key.replace(bucket)
            for node in list(select.find_all(type(floor))):
                if node == floor and node.find_ancestor(exp.Select) is select:
                    node.replace(start.copy())


def _projection_at(key: exp.Expr, projections: list[exp.Expr]) -> exp.Expr | None:
    """The projection `GROUP BY <n>` refers to."""
    if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.this) <= len(projections):
        return projections[int(key.this) - 1]
    return None


def _fixed_time_floor(node: exp.Expr) -> int | None:
    if not isinstance(node, exp.TimestampTrunc):
        return None
    column, unit = node.this, node.args.get("unit")
    if not (isinstance(column, exp.Column) and column.name == TIME_COLUMN and not column.table and unit is not None):
        return None
    return _UNIT_MICROS.get(unit.name.upper())


def _bucket(step: int) -> exp.Expr:
    """__time's bucket number: a floor division (DuckDB's `//` truncates, so times before the epoch step back one)."""
    micros = exp.Anonymous(this="EPOCH_US", expressions=[exp.column(TIME_COLUMN)])
    before_epoch = exp.case().when(exp.LT(this=micros.copy(), expression=exp.Literal.number(0)),
                                   exp.Literal.number(step - 1)).else_(exp.Literal.number(0))
    return exp.IntDiv(this=exp.paren(exp.Sub(this=micros, expression=before_epoch)),
                      expression=exp.Literal.number(step))
