"""Druid SQL's string, numeric and IP address functions with Druid's semantics, as DuckDB expressions.

sqlglot models most of Druid's scalar functions, and where DuckDB's function means the same (LOWER, REPLACE, ROUND,
TRUNCATE, SIN…) the call passes through unchanged. What is here is where the meaning differs — SUBSTRING past the end
is NULL, LPAD with an empty pad only truncates, REGEXP_EXTRACT returns NULL for no match and reads its third argument
as a capture group, REGEXP_REPLACE writes groups as `$1`, REPEAT of a negative count is NULL, the bit shifts wrap
around like Java's `long` — and Druid's own functions DuckDB lacks (PARSE_LONG, STRING_FORMAT, DIV, BITWISE_*, the
HUMAN_READABLE_* formats, IPV4_*). Nulls follow Druid's SQL-compatible mode (the default since Druid 28): a NULL
argument gives NULL unless the function says otherwise.

Lengths and positions count Unicode code points, Druid counts UTF-16 code units: they differ only for characters
outside the Basic Multilingual Plane (emoji).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from sqlglot import exp

from sluice.broker.functions.calls import Call, DruidFunction, template
from sluice.broker.errors import SqlError
from sluice.broker.functions.lookups import lookup_call

#: the longest string REPEAT, LPAD and RPAD may make: one query must not build gigabytes in a single value
MAX_STRING_LENGTH = 16 * 1024 * 1024
# ------------------------------------------------------------------------------------------------ typed functions


def rewrite_scalar(node: exp.Expr) -> exp.Expr:
    """A function sqlglot parsed into a typed node, with Druid's meaning where DuckDB's differs; else `node`."""
    if isinstance(node, exp.Substring):
        return _substring(node)
    if isinstance(node, exp.StrPosition) and node.args.get("position") is not None:
        return _position_from(node)
    if isinstance(node, exp.Pad):
        return _pad(node)
    return node


def constant_pi(statement: exp.Expr) -> None:
    """Calcite's niladic PI: an unquoted, unqualified `PI` is the constant, not a column."""
    for column in list(statement.find_all(exp.Column)):
        if not column.table and column.name.upper() == "PI" and not column.this.quoted:
            column.replace(exp.Pi())


def _substring(node: exp.Substring) -> exp.Expr:
    """SUBSTRING(expr, index[, length]): NULL when `index` is past the end of `expr` (Druid's substring())."""
    values = {"x": node.this, "i": node.args["start"]}
    length = node.args.get("length")
    if length is None:
        return template("CASE WHEN i - 1 < LENGTH(x) THEN SUBSTRING(x, i) END", **values)
    return template("CASE WHEN i - 1 < LENGTH(x) THEN SUBSTRING(x, i, n) END", **values, n=length)


def _position_from(node: exp.StrPosition) -> exp.Expr:
    """POSITION(needle IN haystack FROM start): 1-based, 0 when not found at or after `start` (Java's indexOf)."""
    return template(
        "CASE WHEN STRPOS(SUBSTRING(h, GREATEST(s, 1)), n) = 0 THEN 0"
        " ELSE STRPOS(SUBSTRING(h, GREATEST(s, 1)), n) + GREATEST(s, 1) - 1 END",
        h=node.this, n=node.args["substr"], s=node.args["position"])


def _pad(node: exp.Pad) -> exp.Expr:
    """LPAD/RPAD(expr, length[, chars]): an empty `chars` adds no padding but still truncates to `length`; a length
    past MAX_STRING_LENGTH is refused."""
    function = "LPAD" if node.args.get("is_left") else "RPAD"
    checked = f"CASE WHEN n > {MAX_STRING_LENGTH} THEN {_too_long(function)} ELSE n END"
    return template(f"CASE WHEN c = '' THEN LEFT(x, GREATEST(n, 0)) ELSE {function}(x, {checked}, c) END",
                    x=node.this, n=node.expression, c=node.args.get("fill_pattern") or exp.Literal.string(" "))


def _repeat(call: Call) -> exp.Expr:
    """REPEAT of a negative count is NULL, as in Druid; a result past MAX_STRING_LENGTH is refused before it is made.
    The check is inside the count, so that DuckDB, folding a constant REPEAT while it plans, never makes it."""
    checked = f"CASE WHEN n * 1.0 * LENGTH(x) > {MAX_STRING_LENGTH} THEN {_too_long('REPEAT')} ELSE n END"
    return template(f"CASE WHEN n < 0 THEN NULL ELSE REPEAT(x, {checked}) END", x=call.args[0], n=call.args[1])


def _too_long(function: str) -> str:
    return f"ERROR('{function} would return a string longer than {MAX_STRING_LENGTH} characters')"


# ------------------------------------------------------------------------------------------------ string functions


def _contains(case_sensitive: bool) -> Callable[[Call], exp.Expr]:
    def rewrite(call: Call) -> exp.Expr:
        text, part = call.args[0].copy(), call.args[1].copy()
        if not case_sensitive:
            text, part = exp.Lower(this=text), exp.Lower(this=part)
        return exp.Anonymous(this="CONTAINS", expressions=[text, part])

    return rewrite


# Java's Formatter specifiers that C's printf writes the same way.
_JAVA_SPECIFIER = re.compile(r"%(?P<flags>[-#+ 0]*)(?P<width>\d*)(?P<precision>\.\d+)?(?P<conversion>[a-zA-Z%])")
_PRINTF_CONVERSIONS = set("sSdxXofeEg")


def _string_format(call: Call) -> exp.Expr:
    """STRING_FORMAT(pattern, args…) as Java's String.format: a NULL argument is written as `null`."""
    pattern = call.literal(0, "the format")
    if pattern is None:
        return exp.null()
    pieces: list[exp.Expr] = []
    arguments = iter(call.args[1:])
    end = 0
    for specifier in _JAVA_SPECIFIER.finditer(pattern):
        pieces.append(exp.Literal.string(pattern[end:specifier.start()]))
        end = specifier.end()
        conversion = specifier["conversion"]
        if conversion in "%n":
            pieces.append(exp.Literal.string("%" if conversion == "%" else "\n"))
            continue
        if conversion not in _PRINTF_CONVERSIONS:
            raise SqlError(f"STRING_FORMAT does not support the conversion '{specifier[0]}' in '{pattern}'")
        argument = next(arguments, None)
        if argument is None:
            raise SqlError(f"STRING_FORMAT's format '{pattern}' needs more than the {len(call.args) - 1} "
                           "arguments given")
        value: exp.Expr = exp.Anonymous(this="PRINTF", expressions=[
            exp.Literal.string(specifier[0][:-1] + conversion.replace("S", "s")), argument.copy()])
        if conversion == "S":
            value = exp.Upper(this=value)
        # Java writes a NULL as "null" (upper case for %S, %X…), justified to the width and cut to the precision.
        null = f"%{'-' if '-' in specifier['flags'] else ''}{specifier['width']}{specifier['precision'] or ''}s" % (
            "NULL" if conversion.isupper() else "null")
        pieces.append(exp.Coalesce(this=value, expressions=[exp.Literal.string(null)]))
    pieces.append(exp.Literal.string(pattern[end:]))
    kept = [piece for piece in pieces if not (isinstance(piece, exp.Literal) and piece.name == "")]
    result = kept[0] if kept else exp.Literal.string("")
    for piece in kept[1:]:
        result = exp.DPipe(this=result, expression=piece)
    return result


def _parse_long(call: Call) -> exp.Expr:
    """PARSE_LONG(text[, radix]): Java's Long.parseLong (an optional sign, then digits of the radix, `0x` allowed in
    radix 16); NULL when the text is not such a number or does not fit a BIGINT."""
    radix = call.integer(1, "the radix", 2, 36) or 10
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"[:radix]
    # Significant digits beyond those of 2^63 cannot fit; checking that first keeps the HUGEINT sum from overflowing.
    most = next(length for length in range(1, 65) if radix**length > 2**63)
    text = exp.Lower(this=call.args[0].copy())
    if radix == 16:
        text = template("CASE WHEN STARTS_WITH(t, '0x') THEN SUBSTRING(t, 3) ELSE t END", t=text)
    return template(
        f"CASE WHEN REGEXP_FULL_MATCH(t, '[+-]?[{digits}]+') AND LENGTH(LTRIM(LTRIM(t, '+-'), '0')) <= {most}"
        f" THEN TRY_CAST((CASE WHEN STARTS_WITH(t, '-') THEN -1 ELSE 1 END) * LIST_REDUCE(LIST_TRANSFORM("
        f"STRING_SPLIT(LTRIM(t, '+-'), ''), lambda digit: STRPOS('{digits}', digit) - 1),"
        f" lambda total, digit: total * {radix} + digit, CAST(0 AS HUGEINT)) AS BIGINT) END",
        t=text)


def _regexp_extract(call: Call) -> exp.Expr:
    """REGEXP_EXTRACT(expr, pattern[, index]): capture group `index` (0, the default: the whole match) of the first
    match, NULL when the pattern does not match."""
    pattern = call.literal(1, "the pattern")
    if pattern is None:
        return exp.null()
    group = exp.Literal.number(call.integer(2, "the capture group index", 0, 99) or 0)
    return template("CASE WHEN REGEXP_MATCHES(x, p) THEN REGEXP_EXTRACT(x, p, g) END",
                    x=call.args[0], p=exp.Literal.string(pattern), g=group)


def _regexp_replace(call: Call) -> exp.Expr:
    """REGEXP_REPLACE(expr, pattern, replacement): every match replaced; the replacement is Java's (`$1` a group,
    `\\` escaping the next character)."""
    replacement = call.literal(2, "the replacement")
    if replacement is None:
        return exp.null()
    return exp.Anonymous(this="REGEXP_REPLACE", expressions=[
        call.args[0].copy(), call.args[1].copy(), exp.Literal.string(_re2_replacement(replacement)),
        exp.Literal.string("g")])


def _re2_replacement(java: str) -> str:
    """A java.util.regex replacement as an RE2 rewrite string (groups `\\1`, a literal backslash `\\\\`)."""
    out, i = [], 0
    while i < len(java):
        char, following = java[i], java[i + 1] if i + 1 < len(java) else None
        if char == "\\":
            if following is None:
                raise SqlError(f"REGEXP_REPLACE's replacement '{java}' ends with a lone backslash")
            out.append("\\\\" if following == "\\" else following)
            i += 2
        elif char == "$":
            if following is None or not following.isdigit():
                raise SqlError(f"REGEXP_REPLACE's replacement '{java}' has a group reference other than $0 … $9")
            out.append("\\" + following)
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _human_readable(base: int, units: tuple[str, ...]) -> Callable[[Call], exp.Expr]:
    """HUMAN_READABLE_*_FORMAT(value[, precision]): below one `base`, the whole number with the first unit; above,
    `precision` decimals (half up) of the largest unit that fits."""

    def rewrite(call: Call) -> exp.Expr:
        precision = call.integer(1, "the precision", 0, 3)
        precision = 2 if precision is None else precision
        value = as_long(call.args[0])
        first = f" || ' {units[0]}'" if units[0] else ""
        whens = " ".join(
            f"WHEN v >= {base**k} OR v <= -{base**k} THEN PRINTF('%.{precision}f', ROUND(v / {float(base**k)!r},"
            f" {precision})) || ' {unit}'" for k, unit in reversed(list(enumerate(units))) if k)
        return template(f"CASE {whens} ELSE CAST(v AS VARCHAR){first} END", v=value)

    return rewrite


# ----------------------------------------------------------------------------------------------- numeric functions


def as_long(value: exp.Expr) -> exp.Expr:
    """A number as Druid reads a LONG argument: a DOUBLE loses its fraction (Java's (long) cast)."""
    return template("CAST(TRUNC(x) AS BIGINT)", x=value)


def _bitwise(sql: str) -> Callable[[Call], exp.Expr]:
    def rewrite(call: Call) -> exp.Expr:
        return template(sql, **{name: as_long(arg) for name, arg in zip("ab", call.args)})

    return rewrite


# Java shifts a long by the distance's low 6 bits, and a left shift drops the bits that leave the 64; DuckDB refuses
# both an overflowing and a negative left shift, so the product is taken modulo 2^64 in HUGEINT.
_SHIFT_LEFT = "CAST(CASE WHEN u >= 9223372036854775808 THEN u - 18446744073709551616 ELSE u END AS BIGINT)"
_SHIFT_PRODUCT = ("((CAST(a AS HUGEINT) * (CAST(1 AS HUGEINT) << (b & 63))) % 18446744073709551616"
                  " + 18446744073709551616) % 18446744073709551616")


def _shift_left(call: Call) -> exp.Expr:
    product = template(_SHIFT_PRODUCT, a=as_long(call.args[0]), b=as_long(call.args[1]))
    return template(_SHIFT_LEFT, u=product)


# ------------------------------------------------------------------------------------------------------ IPv4

_INTEGER_TYPES = "'TINYINT', 'SMALLINT', 'INTEGER', 'BIGINT', 'HUGEINT', 'UTINYINT', 'USMALLINT', 'UINTEGER', " \
                 "'UBIGINT', 'UHUGEINT'"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED = rf"{_OCTET}(\.{_OCTET}){{3}}"
_DOTTED_NUMBER = " + ".join(f"CAST(SPLIT_PART(CAST(x AS VARCHAR), '.', {i + 1}) AS BIGINT) * {256 ** (3 - i)}"
                            for i in range(4))


def _ipv4_number(address: exp.Expr) -> exp.Expr:
    """An IPv4 address as its number: an integer within 0 … 2^32-1 as it is, dotted-decimal text parsed; else NULL."""
    return template(
        f"CASE WHEN TYPEOF(x) IN ({_INTEGER_TYPES}) THEN"
        " (CASE WHEN TRY_CAST(x AS BIGINT) BETWEEN 0 AND 4294967295 THEN TRY_CAST(x AS BIGINT) END)"
        f" WHEN REGEXP_FULL_MATCH(CAST(x AS VARCHAR), '{_DOTTED}') THEN {_DOTTED_NUMBER} END",
        x=address)


def _ipv4_stringify(call: Call) -> exp.Expr:
    """IPV4_STRINGIFY(address): a number as dotted-decimal text; valid dotted text comes back as it is; else NULL."""
    number = _ipv4_number(call.args[0])
    return template(
        "CASE WHEN n IS NOT NULL THEN CONCAT_WS('.', n >> 24, (n >> 16) & 255, (n >> 8) & 255, n & 255) END", n=number)


def _ipv4_match(call: Call) -> exp.Expr:
    """IPV4_MATCH(address, subnet): whether the address is in the CIDR subnet literal; false for no address."""
    subnet = call.literal(1, "the subnet") or ""
    try:
        network = ipaddress.IPv4Network(subnet, strict=False)
    except ValueError as e:
        raise SqlError(f"IPV4_MATCH needs an IPv4 subnet in CIDR notation such as '192.168.0.0/16', got '{subnet}'") \
            from e
    return template(f"COALESCE((n & {int(network.netmask)}) = {int(network.network_address)}, FALSE)",
                    n=_ipv4_number(call.args[0]))


SCALAR_FUNCTIONS: dict[str, DruidFunction] = {
    "STRLEN": DruidFunction(1, 1, lambda call: exp.Length(this=call.args[0].copy())),
    "TEXTCAT": DruidFunction(2, 2, lambda call: exp.DPipe(this=call.args[0].copy(), expression=call.args[1].copy())),
    "STRING_FORMAT": DruidFunction(1, None, _string_format),
    "BTRIM": DruidFunction(1, 2, lambda call: exp.Trim(this=call.args[0].copy(), expression=call.arg(1))),
    "PARSE_LONG": DruidFunction(1, 2, _parse_long),
    "REGEXP_EXTRACT": DruidFunction(2, 3, _regexp_extract),
    "REGEXP_REPLACE": DruidFunction(3, 3, _regexp_replace),
    "REPEAT": DruidFunction(2, 2, _repeat),
    "CONTAINS_STRING": DruidFunction(2, 2, _contains(case_sensitive=True)),
    "ICONTAINS_STRING": DruidFunction(2, 2, _contains(case_sensitive=False)),
    "DECODE_BASE64_UTF8": DruidFunction(1, 1, lambda call: exp.Anonymous(this="DECODE", expressions=[
        exp.Anonymous(this="FROM_BASE64", expressions=[call.args[0].copy()])])),
    "HUMAN_READABLE_BINARY_BYTE_FORMAT": DruidFunction(
        1, 2, _human_readable(1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"))),
    "HUMAN_READABLE_DECIMAL_BYTE_FORMAT": DruidFunction(
        1, 2, _human_readable(1000, ("B", "KB", "MB", "GB", "TB", "PB", "EB"))),
    "HUMAN_READABLE_DECIMAL_FORMAT": DruidFunction(1, 2, _human_readable(1000, ("", "K", "M", "G", "T", "P", "E"))),
    "DIV": DruidFunction(2, 2, lambda call: template("CAST(TRUNC(x / y) AS BIGINT)", x=call.args[0], y=call.args[1])),
    "BITWISE_AND": DruidFunction(2, 2, _bitwise("a & b")),
    "BITWISE_OR": DruidFunction(2, 2, _bitwise("a | b")),
    "BITWISE_XOR": DruidFunction(2, 2, _bitwise("XOR(a, b)")),
    "BITWISE_COMPLEMENT": DruidFunction(1, 1, _bitwise("~a")),
    "BITWISE_SHIFT_LEFT": DruidFunction(2, 2, _shift_left),
    "BITWISE_SHIFT_RIGHT": DruidFunction(2, 2, _bitwise("a >> (b & 63)")),
    "IPV4_PARSE": DruidFunction(1, 1, lambda call: _ipv4_number(call.args[0])),
    "IPV4_STRINGIFY": DruidFunction(1, 1, _ipv4_stringify),
    "IPV4_MATCH": DruidFunction(2, 2, _ipv4_match),
    "LOOKUP": DruidFunction(2, 3, lookup_call),
}

# Druid functions Sluice refuses, and why; the reason ends the user's error message.
_UNSUPPORTED: dict[str, str] = {}
# Names of DataSketches functions; those Sluice has (`sketch_functions.py`) are known before this is asked.
_SKETCH_PREFIXES = ("HLL_SKETCH_", "THETA_SKETCH_", "DS_")


def unsupported_reason(name: str) -> str | None:
    """Why Sluice refuses this Druid function, or None when it is not one Sluice knows to refuse."""
    name = name.upper()
    if name.startswith(_SKETCH_PREFIXES):
        return "Sluice has the HLL, Theta, Quantiles and Tuple sketch functions only"
    return _UNSUPPORTED.get(name)
