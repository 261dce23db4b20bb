"""Tuning that Druid gives its own JVM, disks and task RPC, common to the Kafka supervisor and batch tasks.

Spark plans the work these fields tune in Druid (persist queues and threads, merge fan-in, on-heap indexes,
segment write-out), so any value is accepted and none has an effect; docs/spec-fields.md says so field by field.
A value that would change what is ingested is refused instead, naming the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from sluice.spec.model import SpecModel

__all__ = ["AppendableIndexSpec", "DruidRuntimeTuning", "only_default"]


def only_default(value: Any, default: Any, why: str) -> Any:
    """For a field whose other values Sluice cannot honour: Druid's default passes, anything else says `why`."""
    if value != default:
        raise ValueError(f"only {default!r} (Druid's default) is supported: {why}")
    return value


class AppendableIndexSpec(SpecModel):
    """Druid's in-memory index: on or off heap is Spark's business; preserving metrics changes what a re-index
    writes, and is not supported."""

    type: Literal["onheap", "offheap"] = "onheap"
    preserve_existing_metrics: bool = False

    @field_validator("preserve_existing_metrics")
    @classmethod
    def _no_preserved_metrics(cls, value: bool) -> bool:
        return only_default(value, False, "metrics are always aggregated from the input rows")


class DruidRuntimeTuning(SpecModel):
    max_pending_persists: int = 0
    max_columns_to_merge: int = -1
    num_persist_threads: int = 1
    skip_bytes_in_memory_overhead_check: bool = False
    index_spec: dict[str, Any] | None = None
    index_spec_for_intermediate_persists: dict[str, Any] | None = None
    segment_write_out_medium_factory: dict[str, Any] | None = None
    appendable_index_spec: AppendableIndexSpec | None = None
