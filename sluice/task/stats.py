"""Druid's row counters for a task (rowStats.buildSegments), and the parse-exception budget."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class RowStats:
    processed: int = 0
    processed_with_error: int = 0
    thrown_away: int = 0
    unparseable: int = 0
    processed_bytes: int = 0

    def __add__(self, other: "RowStats") -> "RowStats":
        return RowStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def parse_exceptions(self) -> int:
        """What maxParseExceptions counts: rows that failed to parse wholly or in part."""
        return self.unparseable + self.processed_with_error

    def to_json(self) -> dict[str, int]:
        return {_JSON_NAMES.get(k, k): v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, payload: dict[str, int]) -> "RowStats":
        names = {json_name: name for name, json_name in _JSON_NAMES.items()}
        return cls(**{names.get(k, k): int(v) for k, v in payload.items()})

_JSON_NAMES = {"processed_with_error": "processedWithError", "thrown_away": "thrownAway",
               "processed_bytes": "processedBytes"}
