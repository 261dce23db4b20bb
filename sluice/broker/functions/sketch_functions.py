"""Druid's DataSketches SQL functions (HLL, Theta, Quantiles and Tuple sketches), as calls of the DuckDB functions of
`sketches.py`, which carry the Druid function's name.

A sketch aggregate (`DS_HLL(expr)`) becomes that function over the group's values gathered by ARRAY_AGG, its
defaults written out; a FILTER on the aggregate moves onto the ARRAY_AGG. The scalar functions that take any number
of sketches get them as one list. Literal arguments (lgK, sizes, fractions, split points) are checked here, as
Druid's planner checks them, so that a wrong one fails naming the function. Over a column of sketches that ingestion
wrote, APPROX_COUNT_DISTINCT… and APPROX_QUANTILE_DS merge the sketches with these same functions.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sluice.broker.functions import bloom, tdigest
from sluice.broker.functions.calls import Call, DruidFunction, template
from sluice.broker.sql.complex_types import COMPLEX_KINDS
from sluice.broker.errors import SqlError
from sluice.broker.functions.sketches import HISTOGRAM_BINS, HLL, QUANTILES, QUANTILES_COUNT
from sluice.tdigest import DEFAULT_COMPRESSION, TDIGEST

_HLL_TYPES = ("HLL_4", "HLL_6", "HLL_8")
_AGGREGATE = "sketch_aggregate"  # meta flag of a rewritten aggregate, whose ARRAY_AGG takes its FILTER


def _udf(name: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _aggregate(name: str, values: exp.Expr, *args: exp.Expr) -> exp.Expr:
    call = _udf(name, exp.ArrayAgg(this=values), *args)
    call.meta[_AGGREGATE] = True
    return call


def _power_of_two(call: Call, i: int, what: str, low: int, high: int, default: int) -> exp.Expr:
    """A size argument: an integer literal, a power of 2 within [low, high], as Druid's sketch factories require."""
    value = call.integer(i, what, low, high)
    if value is not None and value & (value - 1):
        raise SqlError(f"{call.name} needs {what} as a power of 2, got {value}")
    return exp.Literal.number(default if value is None else value)


def _doubles(call: Call, start: int, what: str) -> exp.Expr:
    values = [exp.Literal.number(call.number(i, what)) for i in range(start, len(call.args))]
    return exp.cast(exp.Array(expressions=values), exp.DataType.build("DOUBLE[]", dialect="duckdb"))


def _hll_parameters(call: Call, at: int) -> list[exp.Expr]:
    """lgK (4 to 21, default 12) and tgtHllType (HLL_4, HLL_6 or HLL_8, default HLL_4) at `at` and `at + 1`."""
    lg_k = call.integer(at, "lgK", 4, 21)
    target = (call.literal(at + 1, "tgtHllType") or "HLL_4").upper()
    if target not in _HLL_TYPES:
        raise SqlError(f"{call.name} needs tgtHllType as one of {', '.join(_HLL_TYPES)}, got '{target}'")
    return [exp.Literal.number(12 if lg_k is None else lg_k), exp.Literal.string(target)]


# ------------------------------------------------------------------------------------------------------ aggregates


def _ds_hll(call: Call) -> exp.Expr:
    return _aggregate("DS_HLL", call.args[0].copy(), *_hll_parameters(call, 1))


def _theta_size(call: Call, i: int) -> exp.Expr:
    return _power_of_two(call, i, "the size", 16, 1 << 26, 16384)


def _tuple_entries(call: Call, i: int) -> exp.Expr:
    return _power_of_two(call, i, "nominalEntries", 16, 1 << 26, 16384)


def _is_literal_number(value: exp.Expr) -> bool:
    return isinstance(value, exp.Literal) and value.is_number


def _ds_tuple_doubles(call: Call) -> exp.Expr:
    """DS_TUPLE_DOUBLES(key, value…[, nominalEntries]) builds a sketch whose summaries are the values of a key summed;
    DS_TUPLE_DOUBLES(sketch[, nominalEntries]) merges a column of sketches. A numeric literal last is nominalEntries."""
    has_entries = len(call.args) > 1 and _is_literal_number(call.args[-1])
    entries = _tuple_entries(call, len(call.args) - 1) if has_entries else exp.Literal.number(16384)
    columns = call.args[:-1] if has_entries else call.args
    if len(columns) == 1:
        merged = template("COALESCE(sketches, [])", sketches=exp.ArrayAgg(this=columns[0].copy()))
        result = _udf("DS_TUPLE_DOUBLES_UNION", merged, entries)
        result.meta[_AGGREGATE] = True
        return result
    values = exp.Array(expressions=[exp.cast(value.copy(), exp.DType.DOUBLE) for value in columns[1:]])
    row = template("{'k': CAST(key AS VARCHAR), 'v': vals}", key=columns[0], vals=values)
    return _aggregate("DS_TUPLE_DOUBLES", row, entries)


def rewrite_sketch(node: exp.Expr) -> exp.Expr:
    """`DS_HLL(x) FILTER(WHERE …)` (or a function of one sketch aggregate, as APPROX_COUNT_DISTINCT over a sketch
    column becomes), rewritten: the filter goes onto the ARRAY_AGG inside, as DuckDB's Python functions cannot be
    aggregates; else `node`."""
    if isinstance(node, exp.Filter):
        call = next((inner for inner in node.this.walk() if inner.meta.get(_AGGREGATE)), None)
        if call is not None:
            gathered = next(call.find_all(exp.ArrayAgg))
            gathered.replace(exp.Filter(this=gathered.copy(), expression=node.expression.copy()))
            return node.this
    return node


# ----------------------------------------------------------------------------------------- columns of sketches


def count_distinct_sketches(call: Call, readable: tuple[str, ...]) -> exp.Expr:
    """An APPROX_COUNT_DISTINCT… call over a column of sketches, of the kinds in `readable`: the sketches merged
    and estimated, a LONG as Druid's distinct counts are. The call's other arguments are the merge's (lgK and
    tgtHllType, or the size)."""
    kind = call.complex_type(0)
    if kind not in readable:
        raise _unreadable(call, kind)
    merge, estimate = ("DS_HLL", "HLL_SKETCH_ESTIMATE") if kind == HLL else ("DS_THETA", "THETA_SKETCH_ESTIMATE")
    sketch = SKETCH_FUNCTIONS[merge].build(Call(merge, call.args, call.session_zone))
    return exp.cast(exp.Round(this=_udf(estimate, sketch)), exp.DType.BIGINT)


def quantile_of_sketches(call: Call) -> exp.Expr:
    """APPROX_QUANTILE_DS(column of quantiles sketches, fraction[, k]): the quantile of the sketches merged."""
    if call.complex_type(0) != QUANTILES:
        raise _unreadable(call, call.complex_type(0))
    zone = call.session_zone
    sketch = SKETCH_FUNCTIONS["DS_QUANTILES_SKETCH"].build(
        Call("DS_QUANTILES_SKETCH", [call.args[0], *call.args[2:]], zone))
    return SKETCH_FUNCTIONS["DS_GET_QUANTILE"].build(Call("DS_GET_QUANTILE", [sketch, call.args[1]], zone))


def _unreadable(call: Call, kind: str | None) -> SqlError:
    return SqlError(f"{call.name} cannot read column {call.args[0].sql(dialect='druid')} of type COMPLEX<{kind}>")


# --------------------------------------------------------------------------------------------- sketch set operations


def _hll_union(call: Call) -> exp.Expr:
    """HLL_SKETCH_UNION([lgK, tgtHllType,] sketch…): both parameters or neither."""
    parameters = _is_literal_number(call.args[0])
    sketches = call.args[2:] if parameters else call.args
    if not sketches:
        raise SqlError(f"{call.name} needs at least one sketch")
    return _udf("HLL_SKETCH_UNION", exp.Array(expressions=[s.copy() for s in sketches]),
                *_hll_parameters(call, 0 if parameters else len(call.args)))


def _theta_set(operation: str) -> Callable[[Call], exp.Expr]:
    """THETA_SKETCH_UNION / INTERSECT / NOT([size,] sketch…)."""

    def rewrite(call: Call) -> exp.Expr:
        sized = _is_literal_number(call.args[0])
        sketches = call.args[1:] if sized else call.args
        if not sketches:
            raise SqlError(f"{call.name} needs at least one sketch")
        return _udf(call.name, exp.Array(expressions=[s.copy() for s in sketches]),
                    _theta_size(call, 0 if sized else len(call.args)))

    return rewrite


def _tuple_set(call: Call) -> exp.Expr:
    """DS_TUPLE_DOUBLES_UNION / INTERSECT / NOT(sketch…[, nominalEntries])."""
    sized = len(call.args) > 1 and _is_literal_number(call.args[-1])
    sketches = call.args[:-1] if sized else call.args
    return _udf(call.name, exp.Array(expressions=[s.copy() for s in sketches]),
                _tuple_entries(call, len(call.args) - 1 if sized else len(call.args)))


# ------------------------------------------------------------------------------------------------------ estimates


def _hll_estimate(call: Call) -> exp.Expr:
    """HLL_SKETCH_ESTIMATE(sketch[, round]): `round` (a boolean literal) rounds to the nearest integer."""
    flag = call.arg(1)
    if flag is not None and not isinstance(flag, exp.Boolean):
        raise SqlError(f"{call.name} needs round as a boolean literal, got {flag.sql(dialect='druid')}")
    estimate = _udf(call.name, call.args[0].copy())
    return exp.Round(this=estimate) if flag is not None and flag.this else estimate


def _std_devs(call: Call) -> exp.Expr:
    std_devs = call.integer(1, "numStdDev", 1, 3)
    return exp.Literal.number(1 if std_devs is None else std_devs)


def _sketch_and(argument: Callable[[Call], exp.Expr]) -> Callable[[Call], exp.Expr]:
    """A function of one sketch and an argument checked (and defaulted) by `argument`."""
    return lambda call: _udf(call.name, call.args[0].copy(), argument(call))


def _sketch_only(call: Call) -> exp.Expr:
    return _udf(call.name, call.args[0].copy())


_BUILDS = {"DS_HLL", "DS_THETA", "DS_QUANTILES_SKETCH", "DS_TUPLE_DOUBLES", "DS_TUPLE_DOUBLES_UNION", "BLOOM_FILTER"}


def _is_sketch(value: exp.Expr) -> bool:
    """Whether `value` is visibly a sketch already: a sketch aggregate, or a scalar subquery selecting one."""
    value = value.unnest()
    if isinstance(value, exp.Select) and len(value.expressions) == 1:
        value = value.expressions[0].unalias()
    return isinstance(value, exp.Anonymous) and value.name.upper() in _BUILDS


def _decode_base64_complex(call: Call) -> exp.Expr:
    """DECODE_BASE64_COMPLEX(type, expr): a sketch from the Base64 text a result shows (or a sketch as it is, as the
    docs' example passes a subquery of one)."""
    kind = call.literal(0, "the complex type name")
    if kind not in COMPLEX_KINDS:
        raise SqlError(f"{call.name} knows the complex types {', '.join(COMPLEX_KINDS)}, not [{kind}]")
    if _is_sketch(call.args[1]):
        return call.args[1].copy()
    decoded = exp.Anonymous(this="FROM_BASE64", expressions=[call.args[1].copy()])
    return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier(kind, quoted=True), expression=decoded)])


def _tdigest_generate_sketch(call: Call) -> exp.Expr:
    """TDIGEST_GENERATE_SKETCH(expr[, compression]): the digest of the group's values as DOUBLEs, or of a column of
    digests (a tDigestSketch metric) the digests merged."""
    compression = call.integer(1, "compression", 1, 2**31 - 1)
    size = exp.Literal.number(DEFAULT_COMPRESSION if compression is None else compression)
    kind = call.complex_type(0)
    if kind == TDIGEST:
        return _aggregate(tdigest.MERGE, call.args[0].copy(), size)
    if kind is not None:
        raise _unreadable(call, kind)
    return _aggregate("TDIGEST_GENERATE_SKETCH", exp.cast(call.args[0].copy(), exp.DType.DOUBLE), size)


def quantile_of_digests(call: Call) -> exp.Expr:
    """TDIGEST_QUANTILE(column of digests, fraction[, compression]): the quantile of the digests merged."""
    if call.complex_type(0) != TDIGEST:
        raise _unreadable(call, call.complex_type(0))
    digest = _tdigest_generate_sketch(Call("TDIGEST_GENERATE_SKETCH", [call.args[0], *call.args[2:]],
                                           call.session_zone))
    return _digest_quantile(digest, call.args[1])


def _digest_quantile(digest: exp.Expr, fraction: exp.Expr) -> exp.Expr:
    return _udf(tdigest.QUANTILE, digest.copy(), exp.cast(fraction.copy(), exp.DType.DOUBLE))


# --------------------------------------------------------------------------------------------------- Bloom filters


def _bloom_filter(call: Call) -> exp.Expr:
    """BLOOM_FILTER(expr, numEntries): numEntries a positive integer literal, as Druid's planner requires."""
    if len(call.args) < 2:
        raise SqlError(f"{call.name} needs numEntries, the number of entries the filter is sized for")
    entries = call.integer(1, "numEntries", 1, 2**31 - 1)
    return _aggregate("BLOOM_FILTER", call.args[0].copy(), exp.Literal.number(entries))


def _bloom_filter_test(call: Call) -> exp.Expr:
    """BLOOM_FILTER_TEST(expr, filter): the filter the Base64 text of a serialized BloomKFilter (a string literal,
    checked here), or a filter already (a BLOOM_FILTER subquery)."""
    value, given = call.args[0].copy(), call.args[1]
    if isinstance(given, exp.Literal) and given.is_string:
        try:
            bloom.from_base64(given.name)
        except ValueError as e:
            raise SqlError(f"{call.name} needs the filter as the Base64 text of a serialized BloomKFilter, got "
                           f"'{given.name}'") from e
        decoded = exp.Anonymous(this="FROM_BASE64", expressions=[given.copy()])
        given = exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier(bloom.BLOOM, quoted=True),
                                                       expression=decoded)])
    elif isinstance(given, (exp.Literal, exp.Null)):
        raise SqlError(f"{call.name} needs the filter as a Base64 string literal, got {given.sql(dialect='druid')}")
    else:
        given = given.copy()
    return _udf(call.name, value, given)


SKETCH_FUNCTIONS: dict[str, DruidFunction] = {
    "BLOOM_FILTER": DruidFunction(2, 2, _bloom_filter),
    "BLOOM_FILTER_TEST": DruidFunction(2, 2, _bloom_filter_test),
    "DECODE_BASE64_COMPLEX": DruidFunction(2, 2, _decode_base64_complex),
    "DS_HLL": DruidFunction(1, 3, _ds_hll),
    "DS_THETA": DruidFunction(1, 2, lambda call: _aggregate("DS_THETA", call.args[0].copy(), _theta_size(call, 1))),
    "DS_QUANTILES_SKETCH": DruidFunction(1, 2, lambda call: _aggregate(
        "DS_QUANTILES_SKETCH", call.args[0].copy(), _power_of_two(call, 1, "k", 2, 32768, 128))),
    "DS_TUPLE_DOUBLES": DruidFunction(1, None, _ds_tuple_doubles),
    "TDIGEST_GENERATE_SKETCH": DruidFunction(1, 2, _tdigest_generate_sketch),
    "HLL_SKETCH_ESTIMATE": DruidFunction(1, 2, _hll_estimate),
    "HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS": DruidFunction(1, 2, _sketch_and(_std_devs)),
    "HLL_SKETCH_TO_STRING": DruidFunction(1, 1, _sketch_only),
    "HLL_SKETCH_UNION": DruidFunction(1, None, _hll_union),
    "THETA_SKETCH_ESTIMATE": DruidFunction(1, 1, _sketch_only),
    "THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS": DruidFunction(  # Druid's object of four numbers: COMPLEX<json>
        2, 2, lambda call: exp.cast(_sketch_and(_std_devs)(call), exp.DType.JSON)),
    **{f"THETA_SKETCH_{op}": DruidFunction(1, None, _theta_set(op)) for op in ("UNION", "INTERSECT", "NOT")},
    "DS_GET_QUANTILE": DruidFunction(2, 2, _sketch_and(
        lambda call: exp.Literal.number(call.number(1, "the fraction")))),
    "DS_GET_QUANTILES": DruidFunction(2, None, _sketch_and(lambda call: _doubles(call, 1, "the fractions"))),
    "DS_HISTOGRAM": DruidFunction(2, None, _sketch_and(lambda call: _doubles(call, 1, "the split points"))),
    "DS_CDF": DruidFunction(2, None, _sketch_and(lambda call: _doubles(call, 1, "the split points"))),
    "DS_RANK": DruidFunction(2, 2, _sketch_and(lambda call: exp.Literal.number(call.number(1, "the value")))),
    "DS_QUANTILE_SUMMARY": DruidFunction(1, 1, _sketch_only),
    QUANTILES_COUNT: DruidFunction(1, 1, _sketch_only),
    tdigest.QUANTILE: DruidFunction(2, 2, lambda call: _digest_quantile(call.args[0], call.args[1])),
    HISTOGRAM_BINS: DruidFunction(2, 2, _sketch_and(
        lambda call: exp.Literal.number(call.integer(1, "the number of bins", 2, 2**31 - 1) or 10))),
    "DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE": DruidFunction(1, 1, _sketch_only),
    **{f"DS_TUPLE_DOUBLES_{op}": DruidFunction(1, None, _tuple_set) for op in ("UNION", "INTERSECT", "NOT")},
}
