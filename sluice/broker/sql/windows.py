"""Druid's window frames, which differ from the SQL standard's (DuckDB's) in the ways Druid documents as its known
issues (https://druid.apache.org/docs/latest/querying/sql-window-functions#known-issues):

- an aggregate over an ordered window without a frame runs over ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW,
  not the standard's RANGE (which takes in the current row's peers), and a RANGE frame is read as ROWS;
- LAG and LEAD ignore their default value: a row with no row at the offset gets null;
- LAST_VALUE is the last value of the whole window, ordered or not.

A user who brings a Druid query gets Druid's answer.
"""

from __future__ import annotations

from sqlglot import exp

_WHOLE_WINDOW = {"kind": "ROWS", "start": "UNBOUNDED", "start_side": "PRECEDING", "end": "UNBOUNDED",
                 "end_side": "FOLLOWING"}
_UP_TO_THE_ROW = {"kind": "ROWS", "start": "UNBOUNDED", "start_side": "PRECEDING", "end": "CURRENT ROW"}
#: window functions that sqlglot types as aggregates: ranks and offsets, which no frame changes
_WINDOW_ONLY = (exp.Lag, exp.Lead, exp.FirstValue, exp.NthValue, exp.Rank, exp.DenseRank, exp.PercentRank,
                exp.CumeDist, exp.Ntile)


def rewrite_windows(statement: exp.Expr) -> None:
    """Gives every window of `statement` Druid's frame, in place."""
    for window in list(statement.find_all(exp.Window)):
        spec = window.args.get("spec")
        if spec is not None and str(spec.args.get("kind", "")).upper() == "RANGE":
            spec.set("kind", "ROWS")
        function = window.this
        if isinstance(function, exp.Lag | exp.Lead):
            function.set("default", None)
        if window.arg_key == "windows" or spec is not None:  # a WINDOW clause's definition, or a frame of its own
            continue
        definition = _definition(window)
        if definition is not None and definition.args.get("spec") is not None:
            continue
        if isinstance(function, exp.LastValue):
            window.set("spec", exp.WindowSpec(**_WHOLE_WINDOW))
        elif isinstance(function, exp.AggFunc) and not isinstance(function, _WINDOW_ONLY) \
                and _ordered(window, definition):
            window.set("spec", exp.WindowSpec(**_UP_TO_THE_ROW))


def _ordered(window: exp.Window, definition: exp.Window | None) -> bool:
    return bool(window.args.get("order") or definition is not None and definition.args.get("order"))


def _definition(window: exp.Window) -> exp.Window | None:
    """The WINDOW clause's definition that `OVER w` names, if it names one."""
    name = window.args.get("alias")
    select = window.find_ancestor(exp.Select)
    if name is None or select is None:
        return None
    return next((d for d in select.args.get("windows") or [] if d.this.name == name.name), None)
