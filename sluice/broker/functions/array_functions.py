"""Druid SQL's array and multi-value string functions, as DuckDB list expressions.

A multi-value string is a VARCHAR list at query time, so each MV_ function is its ARRAY_ twin ("All array references
in the multi-value string function documentation can refer to multi-value string columns or ARRAY types"), except
where Druid's docs show a multi-value difference: MV_CONTAINS and MV_OVERLAP of a NULL are false, and a filter that
keeps no value gives NULL (an empty multi-value string).

Druid compares elements with Java's `equals`, so a NULL element is a known value: ARRAY_OVERLAP([NULL, 'b'],
[NULL]) is true, and `*_OF` finds a NULL. A NULL array gives NULL unless the function says otherwise. Offsets are
0-based, ordinals 1-based; out of range is NULL. Delimiters of STRING_TO_ARRAY are regular expressions, run by
DuckDB's RE2 rather than java.util.regex, as for the REGEXP_ functions.

The translator knows no column types, so ARRAY_CONTAINS tells an array second argument ("contains all of it") from a
scalar one by its form: an ARRAY literal, an array function or a cast to an array type.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sluice.broker.functions.calls import Call, DruidFunction, template

#: the most NULLs ARRAY_SLICE may add past an array's end (Druid pads up to `end`): one call must not build a huge list
MAX_SLICE_PADDING = 1_000_000

# DuckDB expressions whose value is a list, whatever their arguments: the typed nodes, and the plain calls the
# rewrites here and ARRAY_AGG(DISTINCT) make.
_LIST_NODES = (exp.Array, exp.ArrayAgg, exp.ArrayConcatAgg, exp.ArrayAppend, exp.ArrayPrepend, exp.ArrayConcat,
               exp.ArrayFilter, exp.ArraySort, exp.Flatten, exp.Transform)
_LIST_CALLS = {"LIST_RESIZE", "LIST_SLICE", "LIST_SORT", "REGEXP_SPLIT_TO_ARRAY"}


def rewrite_array(node: exp.Expr) -> exp.Expr:
    """A typed array function with Druid's meaning where DuckDB's differs; else `node`."""
    if isinstance(node, exp.ArrayContains) and _is_array(node.expression):
        return _contains_all(node.this, node.expression)
    if isinstance(node, exp.ArrayPrepend):  # the Druid dialect reads ARRAY_PREPEND(expr, arr) with `this` the expr
        return _prepend(node.this, node.expression)
    if isinstance(node, exp.ArrayAppend | exp.ArrayConcat):
        node.set("null_propagation", True)  # Druid: appending to or concatenating a NULL array gives NULL
        return node
    if isinstance(node, exp.ArraySlice):
        return _slice(node.this, node.args["start"], node.args.get("end"))
    if isinstance(node, exp.StringToArray):
        return _split(node.this, node.expression)
    if isinstance(node, exp.ArrayToString):
        return _to_string(node.this, node.expression)
    return node


def _is_array(node: exp.Expr) -> bool:
    """Whether `node` is a list by its form (a column's type is unknown here: a column counts as a scalar)."""
    node = node.unnest()
    if isinstance(node, exp.Case):
        branches = [case.args["true"] for case in node.args["ifs"]] + [node.args.get("default")]
        return any(_is_array(branch) for branch in branches if branch is not None)
    if isinstance(node, exp.Cast):
        return node.to.is_type(exp.DType.ARRAY)
    return isinstance(node, _LIST_NODES) or isinstance(node, exp.Anonymous) and node.name.upper() in _LIST_CALLS


# ------------------------------------------------------------------------------------------------ building


def _prepend(value: exp.Expr, array: exp.Expr) -> exp.Expr:
    """ARRAY_PREPEND(expr, arr): NULL for a NULL array, as appending and concatenating are."""
    return exp.ArrayPrepend(this=array.copy(), expression=value.copy(), null_propagation=True)


def _append(call: Call) -> exp.Expr:
    return exp.ArrayAppend(this=call.args[0].copy(), expression=call.args[1].copy(), null_propagation=True)


def _concat(call: Call) -> exp.Expr:
    return exp.ArrayConcat(this=call.args[0].copy(), expressions=[call.args[1].copy()], null_propagation=True)


# ------------------------------------------------------------------------------------------------ elements


def _element(base: int) -> Callable[[Call], exp.Expr]:
    """ARRAY_OFFSET (base 0) / ARRAY_ORDINAL (base 1): NULL out of range, also below it (DuckDB counts a negative
    index from the end)."""
    index = "i + 1" if base == 0 else "i"
    return lambda call: template(f"CASE WHEN i >= {base} THEN LIST_EXTRACT(a, {index}) END",
                                 a=call.args[0], i=call.args[1])


def _position(base: int) -> Callable[[Call], exp.Expr]:
    """ARRAY_OFFSET_OF (base 0) / ARRAY_ORDINAL_OF (base 1): the first occurrence, NULL when there is none."""
    position = "LIST_POSITION(a, x) - 1" if base == 0 else "LIST_POSITION(a, x)"
    return lambda call: template(position, a=call.args[0], x=call.args[1])


def _slice(array: exp.Expr, start: exp.Expr, end: exp.Expr | None) -> exp.Expr:
    """ARRAY_SLICE(arr, start[, end]): 0-based, `end` exclusive (the length when left out); NULL when `start` is
    negative, past the length or past `end`. An `end` past the length pads with NULLs, as Java's copyOfRange does
    (Druid's docs: ARRAY_SLICE([], 0, 2) is [null, null])."""
    end = end if end is not None else exp.Length(this=array.copy())
    too_long = f"ERROR('ARRAY_SLICE would add more than {MAX_SLICE_PADDING} nulls past the end of the array')"
    return template(
        "CASE WHEN s < 0 OR s > LEN(a) OR s > e THEN NULL ELSE LIST_RESIZE(LIST_SLICE(a, s + 1, e),"
        f" CASE WHEN e - LEN(a) > {MAX_SLICE_PADDING} THEN {too_long} ELSE e - s END) END",
        a=array, s=start, e=end)


# ------------------------------------------------------------------------------------------------ membership


def _contains_all(array: exp.Expr, values: exp.Expr) -> exp.Expr:
    """ARRAY_CONTAINS(arr, values): every one of `values` is in `arr`, a NULL included."""
    return template(
        "CASE WHEN a IS NULL OR v IS NULL THEN NULL"
        " ELSE LIST_HAS_ALL(a, v) AND (LIST_POSITION(v, NULL) IS NULL OR LIST_POSITION(a, NULL) IS NOT NULL) END",
        a=array, v=values)


def _contains(call: Call) -> exp.Expr:
    array, value = call.args
    return _contains_all(array, value) if _is_array(value) else exp.ArrayContains(this=array.copy(),
                                                                                  expression=value.copy())


def _overlap(call: Call) -> exp.Expr:
    """ARRAY_OVERLAP(arr1, arr2): an element in common, NULL counting as one."""
    return template(
        "CASE WHEN a IS NULL OR b IS NULL THEN NULL"
        " ELSE LIST_HAS_ANY(a, b) OR (LIST_POSITION(a, NULL) IS NOT NULL AND LIST_POSITION(b, NULL) IS NOT NULL) END",
        a=call.args[0], b=call.args[1])


def _false_when_null(rewrite: Callable[[Call], exp.Expr]) -> Callable[[Call], exp.Expr]:
    """MV_CONTAINS / MV_OVERLAP: a NULL (empty) multi-value string contains nothing (Druid's docs: false)."""
    return lambda call: exp.Coalesce(this=rewrite(call), expressions=[exp.false()])


def _scalar_in_array(call: Call) -> exp.Expr:
    """SCALAR_IN_ARRAY(expr, arr): NULL when `expr` or `arr` is NULL (SQL's `expr IN (…)`), else whether `arr` holds
    `expr`."""
    return template("CASE WHEN x IS NOT NULL THEN LIST_CONTAINS(a, x) END", x=call.args[0], a=call.args[1])


def _filter(keep: bool) -> Callable[[Call], exp.Expr]:
    """MV_FILTER_ONLY (keep) / MV_FILTER_NONE: the values in / not in `arr`, in order; none left is NULL."""
    test = "IS NOT NULL" if keep else "IS NULL"

    def rewrite(call: Call) -> exp.Expr:
        # The lambda's parameter has a name no column has, since `arr` is written inside it.
        kept = template(f"LIST_FILTER(x, lambda __mv_value: LIST_POSITION(arr, __mv_value) {test})",
                        x=call.args[0], arr=call.args[1])
        return template("CASE WHEN LEN(f) > 0 THEN f END", f=kept)

    return rewrite


# ------------------------------------------------------------------------------------------------ conversions


def _split(text: exp.Expr, delimiter: exp.Expr) -> exp.Expr:
    """STRING_TO_ARRAY(str, regex) as Java's String.split: trailing empty strings are dropped, unless nothing matched
    ('' gives [''], ',' gives [])."""
    parts = exp.Anonymous(this="REGEXP_SPLIT_TO_ARRAY", expressions=[text.copy(), delimiter.copy()])
    return template(
        "CASE WHEN LEN(p) = 1 THEN p ELSE LIST_SLICE(p, 1, COALESCE("
        "LIST_MAX(LIST_TRANSFORM(p, lambda part, i: CASE WHEN part <> '' THEN i END)), 0)) END",
        p=parts)


def _to_string(array: exp.Expr, delimiter: exp.Expr) -> exp.Expr:
    """ARRAY_TO_STRING(arr, str): a NULL element is written `null`, as Druid does (DuckDB would skip it)."""
    return template("ARRAY_TO_STRING(LIST_TRANSFORM(a, lambda e: COALESCE(CAST(e AS VARCHAR), 'null')), d)",
                    a=array, d=delimiter)


def _as_strings(call: Call) -> exp.Expr:
    """ARRAY_TO_MV / MV_TO_ARRAY: both are a VARCHAR list here; ARRAY_TO_MV writes numbers as text (999.0)."""
    return exp.cast(call.args[0].copy(), exp.DataType.build("VARCHAR[]", dialect="duckdb"))


def _concat_agg(call: Call) -> exp.Expr:
    """ARRAY_CONCAT_AGG([DISTINCT] arr[, size]): the size is Druid's memory hint (after DISTINCT, the parser keeps it
    inside the DISTINCT); DISTINCT elements come sorted, NULL first as in ARRAY_AGG(DISTINCT) (DuckDB's LIST_DISTINCT
    drops the NULL, so it is put back)."""
    value = call.args[0]
    if not isinstance(value, exp.Distinct):
        return exp.ArrayConcatAgg(this=value.copy())
    elements = exp.ArrayConcatAgg(this=value.expressions[0].copy())
    return template(
        "CASE WHEN LIST_POSITION(f, NULL) IS NULL THEN LIST_SORT(LIST_DISTINCT(f))"
        " ELSE LIST_PREPEND(NULL, LIST_SORT(LIST_DISTINCT(f))) END",
        f=elements)


ARRAY_FUNCTIONS: dict[str, DruidFunction] = {
    "ARRAY_CONCAT_AGG": DruidFunction(1, 2, _concat_agg),
    "ARRAY_OFFSET": DruidFunction(2, 2, _element(0)),
    "ARRAY_ORDINAL": DruidFunction(2, 2, _element(1)),
    "ARRAY_OFFSET_OF": DruidFunction(2, 2, _position(0)),
    "ARRAY_ORDINAL_OF": DruidFunction(2, 2, _position(1)),
    "ARRAY_OVERLAP": DruidFunction(2, 2, _overlap),
    "ARRAY_TO_MV": DruidFunction(1, 1, _as_strings),
    "SCALAR_IN_ARRAY": DruidFunction(2, 2, _scalar_in_array),
    "MV_APPEND": DruidFunction(2, 2, _append),
    "MV_PREPEND": DruidFunction(2, 2, lambda call: _prepend(*call.args)),
    "MV_CONCAT": DruidFunction(2, 2, _concat),
    "MV_CONTAINS": DruidFunction(2, 2, _false_when_null(_contains)),
    "MV_OVERLAP": DruidFunction(2, 2, _false_when_null(_overlap)),
    "MV_FILTER_ONLY": DruidFunction(2, 2, _filter(keep=True)),
    "MV_FILTER_NONE": DruidFunction(2, 2, _filter(keep=False)),
    "MV_LENGTH": DruidFunction(1, 1, lambda call: exp.ArraySize(this=call.args[0].copy())),
    "MV_OFFSET": DruidFunction(2, 2, _element(0)),
    "MV_ORDINAL": DruidFunction(2, 2, _element(1)),
    "MV_OFFSET_OF": DruidFunction(2, 2, _position(0)),
    "MV_ORDINAL_OF": DruidFunction(2, 2, _position(1)),
    "MV_SLICE": DruidFunction(2, 3, lambda call: _slice(call.args[0], call.args[1], call.arg(2))),
    "MV_TO_ARRAY": DruidFunction(1, 1, _as_strings),
    "MV_TO_STRING": DruidFunction(2, 2, lambda call: _to_string(call.args[0], call.args[1])),
    "STRING_TO_MV": DruidFunction(2, 2, lambda call: _split(call.args[0], call.args[1])),
}
