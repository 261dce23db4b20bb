"""Druid's Bloom filter (the druid-bloom-filter extension's BloomKFilter, a copy of Hive's) at query time: the
BLOOM_FILTER aggregate and BLOOM_FILTER_TEST, as DuckDB Python functions over Arrow columns.

A filter is built, hashed and serialized exactly as Druid's, so that a filter either side builds tests the same on the
other: Hive's Murmur3 64-bit hash (seed 104729) of a string's UTF-8 bytes, of a long (`hash64(long)`), of a double's
bits as a long, of a float's bits as a little-endian int; a null is Murmur3's NULL_HASHCODE. The bits are spread over
blocks of 8 longs: the first hash picks a block, each of the k hashes a bit within it. Serialized, a filter is one
byte of k, a big-endian int of the number of longs, then the longs big-endian.

Inside a query a filter is the one-field STRUCT {'bloom': bytes} named after Druid's complex type COMPLEX<bloom>,
written as Base64 in a result, as the sketches of `sketches.py` are. DuckDB's Python API has no aggregate functions:
BLOOM_FILTER gets the group's values gathered by ARRAY_AGG as a list of a UNION (text, long, double or float), whose
member tells how Druid would add the value.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import math
import struct
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

BLOOM = "bloom"
#: Druid's BloomKFilter.DEFAULT_FPP (a Java float, 0.05f, widened to a double)
DEFAULT_FPP = float(np.float32(0.05))
_BLOCK_SIZE = 8  # longs per block
_HEADER = 5  # the number of hash functions (1 byte) and of longs (4 bytes)
_MAX_ENTRIES = 2**31 - 1

_MASK64 = (1 << 64) - 1
_C1, _C2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
_R1, _R2, _M, _N1 = 31, 27, 5, 0x52DCE729
_SEED = 104729
#: Murmur3.NULL_HASHCODE, the hash of a null value
NULL_HASHCODE = 2862933555777941757


# -------------------------------------------------------------------------------------------------------- hashing


def _rotl64(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK64


def _fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK64
    return h ^ (h >> 33)


def _mix_block(h: int, k: int) -> int:
    k = (_rotl64((k * _C1) & _MASK64, _R1) * _C2) & _MASK64
    h ^= k
    return (_rotl64(h, _R2) * _M + _N1) & _MASK64


def hash_bytes(data: bytes) -> int:
    """Hive's Murmur3.hash64(byte[]) as an unsigned 64-bit value."""
    h, length = _SEED, len(data)
    blocks = length >> 3
    for (k,) in struct.iter_unpack("<Q", data[: blocks << 3]):
        h = _mix_block(h, k)
    tail = data[blocks << 3:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= (_rotl64((k * _C1) & _MASK64, _R1) * _C2) & _MASK64
    return _fmix64(h ^ length)


def hash_long(value: int) -> int:
    """Hive's Murmur3.hash64(long): the long's bytes reversed, mixed as one block."""
    k = int.from_bytes((value & _MASK64).to_bytes(8, "little"), "big")
    return _fmix64(_mix_block(_SEED, k) ^ 8)


def _double_bits(value: float) -> int:
    """Java's Double.doubleToLongBits (every NaN the canonical one)."""
    return struct.unpack(">q", struct.pack(">d", math.nan if math.isnan(value) else value))[0]


def _float_bits(value: float) -> bytes:
    """Java's Float.floatToIntBits, as the little-endian bytes BloomKFilter.addInt hashes."""
    return struct.pack("<f", math.nan if math.isnan(value) else value)


def hash_value(value: Any, kind: str) -> int:
    """The hash Druid's BloomKFilter gives a value added as `kind`: 's' (addString), 'l' (addLong), 'd' (addDouble)
    or 'f' (addFloat); a null is added as addBytes(null)."""
    if value is None:
        return NULL_HASHCODE
    if kind == "s":
        return hash_bytes(value.encode("utf-8"))
    if kind == "l":
        return hash_long(int(value))
    if kind == "d":
        return hash_long(_double_bits(float(value)))
    if kind == "f":
        return hash_bytes(_float_bits(float(value)))
    raise ValueError(f"no Bloom filter hash for kind {kind}")


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


# --------------------------------------------------------------------------------------------------------- filter


class BloomKFilter:
    """Druid's org.apache.druid.query.filter.BloomKFilter: k hashes set bits within one block of 8 longs."""

    def __init__(self, words: np.ndarray, num_hash_functions: int) -> None:
        if len(words) == 0 or len(words) % _BLOCK_SIZE:
            raise ValueError("bitSet has to be block aligned")
        self.words = words.astype(np.uint64, copy=False)
        self.k = num_hash_functions

    @classmethod
    def create(cls, max_num_entries: int) -> BloomKFilter:
        if max_num_entries <= 0:
            raise ValueError("expectedEntries should be > 0")
        num_bits = optimal_num_of_bits(max_num_entries, DEFAULT_FPP)
        k = optimal_num_of_hash_functions(max_num_entries, num_bits)
        n_longs = math.ceil(num_bits / 64)
        pad_longs = _BLOCK_SIZE - n_longs % _BLOCK_SIZE  # Druid pads a whole block when already aligned
        return cls(np.zeros(n_longs + pad_longs, dtype=np.uint64), k)

    # ---------------------------------------------------------------------------------------- adding and testing

    def _positions(self, hash64: int) -> Iterable[tuple[int, int]]:
        """(word, bit) of each of the k bits a hash sets, as BloomKFilter.addHash / testHash compute them."""
        hash1, hash2 = _int32(hash64), _int32(hash64 >> 32)
        first = _int32(hash1 + hash2)
        if first < 0:
            first = ~first
        base = (first % (len(self.words) // _BLOCK_SIZE)) * _BLOCK_SIZE
        for i in range(1, self.k + 1):
            combined = _int32(hash1 + (i + 1) * hash2)
            if combined < 0:
                combined = ~combined
            yield base + (combined & (_BLOCK_SIZE - 1)), (combined >> 3) & 63

    def add_hash(self, hash64: int) -> None:
        for word, bit in self._positions(hash64):
            self.words[word] |= np.uint64(1 << bit)

    def test_hash(self, hash64: int) -> bool:
        return all(int(self.words[word]) >> bit & 1 for word, bit in self._positions(hash64))

    def add(self, value: Any, kind: str = "s") -> None:
        self.add_hash(hash_value(value, kind))

    def test(self, value: Any, kind: str = "s") -> bool:
        return self.test_hash(hash_value(value, kind))

    def merge(self, other: BloomKFilter) -> None:
        if len(other.words) != len(self.words) or other.k != self.k:
            raise ValueError(f"BloomKFilters are not compatible for merging. this - {self} that - {other}")
        self.words |= other.words

    def __str__(self) -> str:
        return f"m: {len(self.words) * 64} k: {self.k}"

    # --------------------------------------------------------------------------------------------- serialization

    def serialize(self) -> bytes:
        return struct.pack(">bi", self.k, len(self.words)) + self.words.astype(">u8").tobytes()

    @classmethod
    def deserialize(cls, data: bytes) -> BloomKFilter:
        try:
            k, count = struct.unpack_from(">bi", data)
            if count <= 0 or len(data) < _HEADER + 8 * count:
                raise ValueError("too short")
            return cls(np.frombuffer(data, dtype=">u8", count=count, offset=_HEADER).astype(np.uint64), k)
        except (struct.error, ValueError) as e:
            raise ValueError("Unable to deserialize BloomKFilter") from e


def optimal_num_of_bits(n: int, p: float) -> int:
    return int(-n * math.log(p) / (math.log(2) * math.log(2)))


def optimal_num_of_hash_functions(n: int, m: int) -> int:
    return max(1, _java_round(m / n * math.log(2)))


def _java_round(value: float) -> int:
    return math.floor(value + 0.5)


def from_base64(text: str) -> BloomKFilter:
    """A filter from the Base64 text Druid takes and returns; ValueError when it is none."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("not Base64") from e
    return BloomKFilter.deserialize(data)


@lru_cache(maxsize=64)
def _cached(data: bytes) -> BloomKFilter:
    """A query tests every row against one filter: deserialized once."""
    return BloomKFilter.deserialize(data)


# ------------------------------------------------------------------------------------------------- Arrow functions

#: the members of the UNION a value arrives as, named after how it is added: string, long, double, float
_VALUE_MEMBERS = {"s": "VARCHAR", "l": "BIGINT", "d": "DOUBLE", "f": "FLOAT"}


def _tagged(union: pa.Array) -> list[tuple[str, Any]]:
    """The (member name, value) of each element of an Arrow union array."""
    union_type = union.type
    names = {code: union_type.field(i).name for i, code in enumerate(union_type.type_codes)}
    codes = union.type_codes.to_numpy(zero_copy_only=False)
    values: list[Any] = [None] * len(union)
    for i, code in enumerate(union_type.type_codes):
        mask = codes == code
        if not mask.any():
            continue
        member = union.field(i)
        if union_type.mode == "dense":
            offsets = union.offsets.to_numpy(zero_copy_only=False)
            picked = member.take(pa.array(offsets[mask])).to_pylist()
        else:
            picked = member.filter(pa.array(mask)).to_pylist()
        for position, value in zip(np.flatnonzero(mask), picked):
            values[position] = value
    return [(names[int(code)], value) for code, value in zip(codes, values)]


def _build(lists: pa.Array, entries: pa.Array) -> pa.Array:
    """BLOOM_FILTER's groups: each list of values built into a filter of its numEntries (an empty filter for a group
    without values, as Druid's aggregator gives)."""
    offsets = lists.offsets.to_numpy(zero_copy_only=False)
    nulls = lists.is_null().to_numpy(zero_copy_only=False)
    tagged = _tagged(lists.values) if len(lists.values) else []
    out = []
    for i, size in enumerate(entries.to_pylist()):
        bloom = BloomKFilter.create(size)
        if not nulls[i]:
            for kind, value in tagged[int(offsets[i]):int(offsets[i + 1])]:
                bloom.add(value, kind)
        out.append({BLOOM: bloom.serialize()})
    return pa.array(out, pa.struct([(BLOOM, pa.binary())]))


def _test(values: pa.Array, filters: pa.Array) -> pa.Array:
    """BLOOM_FILTER_TEST row by row: a null value tests as Druid's testBytes(null); a null filter is a null result."""
    tagged = _tagged(values)
    out = []
    for (kind, value), data in zip(tagged, filters.field(BLOOM).to_pylist()):
        out.append(None if data is None else _cached(data).test(value, kind if value is not None else "s"))
    return pa.array(out, pa.bool_())


def arrow_udf(body: Callable[..., pa.Array], arity: int) -> Callable[..., pa.Array]:
    """`body` over whole Arrow arrays, as a DuckDB Arrow function of `arity` parameters."""
    def udf(*columns: pa.ChunkedArray) -> pa.Array:
        return body(*(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
                      for column in columns))

    # DuckDB counts the parameters of the Python function against the declared ones.
    udf.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(f"argument{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(arity)])
    return udf


def bloom_type() -> duckdb.sqltypes.DuckDBPyType:
    return duckdb.struct_type({BLOOM: "BLOB"})


#: the names of the functions, which a query needs registered on its connection (see `register`)
FUNCTIONS = frozenset({"BLOOM_FILTER", "BLOOM_FILTER_TEST"})


def register(conn: duckdb.DuckDBPyConnection) -> None:
    """BLOOM_FILTER(values, numEntries) and BLOOM_FILTER_TEST(value, filter) on a connection."""
    value = duckdb.union_type(_VALUE_MEMBERS)
    conn.create_function("BLOOM_FILTER", arrow_udf(_build, 2), [duckdb.list_type(value), "INTEGER"], bloom_type(),
                         type="arrow", null_handling="special")
    conn.create_function("BLOOM_FILTER_TEST", arrow_udf(_test, 2), [value, bloom_type()], "BOOLEAN",
                         type="arrow", null_handling="special")
