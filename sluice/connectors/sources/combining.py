"""Druid's `combining` input source: the rows of several input sources read as one. Each split is a delegate's
split tagged with the delegate's index (Druid's CombiningInputSource pairs each split with its source)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sluice.connectors.api import SourceSplit
from sluice.connectors.base import BoundedSource
from sluice.spec.errors import SpecError


@dataclass(frozen=True)
class DelegateSplit:
    """A split of delegate number `delegate`."""

    delegate: int
    split: SourceSplit

    @property
    def split_id(self) -> str:
        return f"{self.delegate}/{self.split.split_id}"

    @property
    def size_bytes(self) -> int:
        return int(getattr(self.split, "size_bytes", 0))


class CombiningSource(BoundedSource[DelegateSplit]):
    def __init__(self, delegates: Sequence[Any], spec_path: str = "ioConfig.inputSource") -> None:
        """Every delegate must be bounded and give batches of one schema: Spark reads one schema, so a JSON file
        (raw lines) cannot be combined with a CSV file or a SQL query (columns)."""
        if not delegates:
            raise SpecError(f"{spec_path}.delegates", "at least one delegate is required")
        for index, delegate in enumerate(delegates):
            if not isinstance(delegate, BoundedSource):
                raise SpecError(f"{spec_path}.delegates[{index}]",
                                f"a {delegate.name} cannot be combined: only bounded sources that list their splits can")
        schema = delegates[0].output_schema()
        for index, delegate in enumerate(delegates[1:], start=1):
            other = delegate.output_schema()
            if not other.equals(schema):
                raise SpecError(f"{spec_path}.delegates[{index}]",
                                f"this delegate's records have columns {other.names}, but delegates[0]'s have "
                                f"{schema.names}; every delegate must read records of the same shape (use the same "
                                "kind of input format)")
        self.delegates: list[BoundedSource[Any]] = list(delegates)
        self.spec_path = spec_path

    def output_schema(self) -> pa.Schema:
        return self.delegates[0].output_schema()

    def enumerate_splits(self) -> list[DelegateSplit]:
        return [DelegateSplit(index, split) for index, delegate in enumerate(self.delegates)
                for split in delegate.enumerate_splits()]

    def read_split(self, split: DelegateSplit) -> Iterator[pa.RecordBatch]:
        return iter(self.delegates[split.delegate].read_split(split.split))
