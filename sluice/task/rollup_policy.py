"""Whether a persist rolls its rows up, or leaves that to the merge at publish.

Druid rolls rows up in memory before every persist, where combining costs little. A Spark persist rolls
up with a shuffle of every row it read: worth it when rows combine (smaller persists, cheaper realtime
queries), wasted when they do not (high-cardinality dimensions, fine queryGranularity). The merge at
publish rolls up whatever it is given, so either choice makes the same segments; this only decides
where the work is done.

The ratio of rows in per row out is known exactly after a persist that rolled up. One that did not can
estimate it, by counting its distinct rollup keys (a HyperLogLog sketch, far cheaper than a shuffle):
the first persists of a task do, to decide, and so does every RECHECK-th persist while rolling up is
not worth it, because data changes.
"""

from __future__ import annotations

from dataclasses import dataclass

#: rows in per row out below which rolling up at persist is not worth a shuffle
MIN_RATIO = 1.5
#: while it is not worth it, every RECHECK-th persist counts its rollup keys to measure the ratio afresh
RECHECK = 8
#: persists smaller than this say little about the ratio
MIN_SAMPLE_ROWS = 1_000


@dataclass(frozen=True)
class PersistMode:
    rollup: bool
    #: estimate the distinct rollup keys of the rows kept (only for a persist that does not roll up)
    count_keys: bool


@dataclass
class PersistRollup:
    #: None until a persist of at least MIN_SAMPLE_ROWS rows has measured the ratio
    worthwhile: bool | None = None
    persists_since_check: int = 0

    def next_persist(self) -> PersistMode:
        if self.worthwhile:
            return PersistMode(rollup=True, count_keys=False)
        return PersistMode(rollup=False,
                           count_keys=self.worthwhile is None or self.persists_since_check + 1 >= RECHECK)

    def measured(self, rows_in: int, rows_out: int | None) -> None:
        """After a persist: `rows_in` rows were kept, and rolled up into `rows_out` rows (counted, or estimated
        from their keys); None when the persist measured nothing."""
        if rows_out is None:
            self.persists_since_check += 1
        elif rows_in >= MIN_SAMPLE_ROWS:
            self.worthwhile = rows_in >= MIN_RATIO * rows_out
            self.persists_since_check = 0
