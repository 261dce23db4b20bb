"""Whether a persist rolls its rows up, or leaves that to the merge at publish.

Druid rolls rows up in memory before every persist, where combining costs little. A Spark persist rolls
up with a shuffle of every row it read: worth it when rows combine (smaller persists, cheaper realtime
queries), wasted when they do not (high-cardinality dimensions, fine queryGranularity). The merge at
publish rolls up whatever it is given, so either choice makes the same segments; this only decides
where the work is done. The ratio is measured on rolled-up persists, and measured again now and then,
because data changes.
"""

from __future__ import annotations

from dataclasses import dataclass

#: rows in per row out below which rolling up at persist is not worth a shuffle
MIN_RATIO = 1.5
#: while it is not worth it, every RECHECK-th persist rolls up again to measure the ratio afresh
RECHECK = 8
#: persists smaller than this say little about the ratio
MIN_SAMPLE_ROWS = 1_000


@dataclass
class PersistRollup:
    worthwhile: bool = True
    persists_since_check: int = 0

    def next_persist_rolls_up(self) -> bool:
        return self.worthwhile or self.persists_since_check + 1 >= RECHECK

    def measured(self, rolled_up: bool, rows_in: int, rows_out: int) -> None:
        """After a persist: `rows_in` rows were kept, `rows_out` written."""
        if not rolled_up:
            self.persists_since_check += 1
        elif rows_in >= MIN_SAMPLE_ROWS:
            self.worthwhile = rows_in >= MIN_RATIO * rows_out
            self.persists_since_check = 0
