"""Tuning that Druid gives its own JVM, disks and task RPC, common to the Kafka supervisor and batch tasks.

Spark plans the work these fields tune in Druid (persist queues and threads, merge fan-in, on-heap indexes,
segment write-out), so any value is accepted and none has an effect; docs/spec-fields.md says so field by field.
A value that would change what is ingested is refused instead, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import ValidationInfo, field_validator

from sluice.spec.model import SpecModel, power_of_two

__all__ = ["AppendableIndexSpec", "DruidRuntimeTuning", "IndexSpec", "defaults_only"]


def defaults_only(reasons: Mapping[str, tuple[Any, str]]) -> Any:
    """A validator of the fields named in `reasons` (field -> (Druid's default, why no other value)), whose other
    values Sluice cannot honour: the default passes, anything else is refused saying why; text compares without
    case, as Druid reads its enums. Assign it in a model."""
    def check(cls: type, value: Any, info: ValidationInfo) -> Any:
        default, why = reasons[info.field_name]
        if (value.upper() if isinstance(value, str) and isinstance(default, str) else value) != default:
            raise ValueError(f"only {default!r} (Druid's default) is supported: {why}")
        return value
    return field_validator(*reasons)(check)


class AppendableIndexSpec(SpecModel):
    """Druid's in-memory index: on or off heap is Spark's business; preserving metrics changes what a re-index
    writes, and is not supported."""

    type: Literal["onheap", "offheap"] = "onheap"
    preserve_existing_metrics: bool = False

    _defaults = defaults_only({"preserve_existing_metrics": (False, "metrics are aggregated from the input rows")})


#: Druid's CompressionStrategy names
Compression = Literal["lz4", "lzf", "zstd", "uncompressed", "none"]


class BitmapSpec(SpecModel):
    type: Literal["roaring", "concise"] = "roaring"
    compress_run_on_serialization: bool = True


class StringDictionaryEncoding(SpecModel):
    type: Literal["utf8", "frontCoded"] = "utf8"
    #: values per front-coded bucket: a power of 2 up to 128
    bucket_size: Annotated[int, power_of_two(1, 128)] = 4
    format_version: Literal[0, 1] = 0


class IndexSpec(SpecModel):
    """Druid's segment file format: checked as Druid checks it (a misspelt compression is an error there too), and
    of no effect here, since segments are Parquet files whose encoding pyarrow and Spark choose."""

    bitmap: BitmapSpec = BitmapSpec()
    dimension_compression: Compression = "lz4"
    string_dictionary_encoding: StringDictionaryEncoding = StringDictionaryEncoding()
    metric_compression: Compression = "lz4"
    long_encoding: Literal["longs", "auto"] = "longs"
    complex_metric_compression: Compression = "uncompressed"
    json_compression: Compression = "lz4"
    segment_loader: dict[str, Any] | None = None
    auto_column_format_spec: dict[str, Any] | None = None

    @field_validator("dimension_compression", "metric_compression", "long_encoding", "complex_metric_compression",
                     "json_compression", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        """Druid reads these enums in any case (`LZ4`, `lz4`)."""
        return value.lower() if isinstance(value, str) else value


class DruidRuntimeTuning(SpecModel):
    """The tuningConfig fields of Druid's own JVM that the Kafka supervisor and batch tasks share."""

    max_pending_persists: int = 0
    max_columns_to_merge: int = -1
    num_persist_threads: int = 1
    skip_bytes_in_memory_overhead_check: bool = False
    index_spec: IndexSpec | None = None
    index_spec_for_intermediate_persists: IndexSpec | None = None
    segment_write_out_medium_factory: dict[str, Any] | None = None
    appendable_index_spec: AppendableIndexSpec | None = None
