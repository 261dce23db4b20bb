"""flattenSpec over Arrow columns: which field is read from where, for the nested formats (Parquet, ORC, Avro).

A field named in the flattenSpec is read along its path (keys of structs and maps, indexes of lists) from the
root; any other field is the top-level column of its name when `useFieldDiscovery` is on (Druid's default),
and null otherwise, as it is when a path leads nowhere."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors.formats.base import column_batch
from sluice.connectors.formats.values import stringify
from sluice.spec.input_format import FlattenSpec

Path = list[str | int]


def field_paths(flatten_spec: FlattenSpec | None, fields: Sequence[str]) -> dict[str, Path]:
    """The path of each field that can be found; a field left out is null."""
    spec = flatten_spec or FlattenSpec()
    named = {f.name: f.path() for f in spec.fields}
    paths: dict[str, Path] = {}
    for field in fields:
        if field in named:
            paths[field] = named[field]
        elif spec.use_field_discovery:
            paths[field] = [field]
    return paths


def root_columns(paths: dict[str, Path], available: Sequence[str]) -> list[str]:
    """The top-level columns the paths start from that the file has: the only ones worth reading."""
    wanted = {p[0] for p in paths.values() if p and isinstance(p[0], str)}
    return [name for name in available if name in wanted]


def flattened_batch(schema: pa.Schema, batch: pa.RecordBatch, paths: dict[str, Path], locators: pa.Array,
                    binary_as_string: bool) -> pa.RecordBatch:
    """A batch of the file's columns as a batch of `schema`: each field found along its path, as text."""
    out: dict[str, pa.Array] = {}
    for field, path in paths.items():
        value = follow(batch, path)
        if value is not None:
            out[field] = stringify(value, binary_as_string)
    return column_batch(schema, locators, None, out)


def follow(batch: pa.RecordBatch, path: Path) -> pa.Array | None:
    """The values at `path` in each row, or None when no row can have one."""
    if not path or not isinstance(path[0], str) or path[0] not in batch.schema.names:
        return None
    array: pa.Array = batch.column(path[0])
    for step in path[1:]:
        array = _step(array, step)
        if array is None:
            return None
    return array


def _step(array: pa.Array, step: str | int) -> pa.Array | None:
    t = array.type
    if pa.types.is_dictionary(t):
        return _step(array.dictionary_decode(), step)
    if pa.types.is_struct(t) and isinstance(step, str):
        index = t.get_field_index(step)
        return pc.struct_field(array, [index]) if index >= 0 else None
    if pa.types.is_map(t):
        key = step if pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type) else None
        if key is None and pa.types.is_integer(t.key_type) and isinstance(step, int):
            key = step
        return None if key is None else pc.map_lookup(array, pa.scalar(key, t.key_type), "first")
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) \
            and isinstance(step, int):
        long_enough = pc.fill_null(pc.greater(pc.list_value_length(array), step), False)
        return pc.list_element(pc.if_else(long_enough, array, pa.scalar(None, t)), step)
    return None
