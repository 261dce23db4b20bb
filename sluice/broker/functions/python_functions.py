"""Druid functions DuckDB has no equivalent of, run as Python functions on the query's connection: reinterpreting
the bits of a DOUBLE as a BIGINT and back (Java's Double.doubleToLongBits / longBitsToDouble), and IPv6 subnet
matching. A NULL argument gives NULL, as Druid's do."""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable

import duckdb
from sqlglot import exp

from sluice.broker.functions.calls import Call, DruidFunction
from sluice.broker.errors import SqlError


def _double_to_long_bits(value: float) -> int:
    """Java's Double.doubleToLongBits: every NaN is the one canonical NaN."""
    return struct.unpack(">q", struct.pack(">d", float("nan") if value != value else value))[0]


def _long_bits_to_double(value: int) -> float:
    return struct.unpack(">d", struct.pack(">q", value))[0]


def _ipv6_match(address: str, subnet: str) -> bool:
    """Whether the address is in the subnet; an address that is not IPv6 is not."""
    try:
        return ipaddress.IPv6Address(address) in ipaddress.IPv6Network(subnet, strict=False)
    except ValueError:
        return False


_FUNCTIONS: list[tuple[str, Callable[..., object], list[str], str]] = [
    ("BITWISE_CONVERT_DOUBLE_TO_LONG_BITS", _double_to_long_bits, ["DOUBLE"], "BIGINT"),
    ("BITWISE_CONVERT_LONG_BITS_TO_DOUBLE", _long_bits_to_double, ["BIGINT"], "DOUBLE"),
    ("IPV6_MATCH", _ipv6_match, ["VARCHAR", "VARCHAR"], "BOOLEAN"),
]
#: the names of the functions, which a query needs registered on its connection (see `register`)
FUNCTIONS = frozenset(name for name, *_ in _FUNCTIONS)


def register(conn: duckdb.DuckDBPyConnection) -> None:
    """The functions on a connection, under the Druid names the translated calls keep."""
    for name, body, parameters, result in _FUNCTIONS:
        conn.create_function(name, body, parameters, result)


def _cast(to: str) -> DruidFunction:
    """The argument cast as Druid casts it before the conversion (a long to a double, a double to a long)."""
    return DruidFunction(1, 1, lambda call: exp.Anonymous(this=call.name, expressions=[
        exp.cast(call.args[0].copy(), to)]))


def _subnet(call: Call) -> exp.Expr:
    """IPV6_MATCH(address, subnet): the subnet a literal in CIDR notation, checked here."""
    subnet = call.literal(1, "the subnet") or ""
    try:
        ipaddress.IPv6Network(subnet, strict=False)
    except ValueError as e:
        raise SqlError(f"IPV6_MATCH needs an IPv6 subnet in CIDR notation such as '75e9:efa4:29c6:85f6::/64', got "
                       f"'{subnet}'") from e
    return exp.Anonymous(this="IPV6_MATCH", expressions=[exp.cast(call.args[0].copy(), "VARCHAR"),
                                                         exp.Literal.string(subnet)])


PYTHON_FUNCTIONS: dict[str, DruidFunction] = {
    "BITWISE_CONVERT_DOUBLE_TO_LONG_BITS": _cast("DOUBLE"),
    "BITWISE_CONVERT_LONG_BITS_TO_DOUBLE": _cast("BIGINT"),
    "IPV6_MATCH": DruidFunction(2, 2, _subnet),
}
