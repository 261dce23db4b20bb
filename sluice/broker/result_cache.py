"""Druid's result-level cache on the broker: whole results of Druid SQL queries, answered again without running them
while the segments they read stay the same.

A result is kept under its query (the text, its parameters and the context keys that can change rows) with the
segments each data source it read showed then (its ETag, as Druid's). It is served while every one of those data
sources shows the same segments and no running task's rows: a publish, a compaction, a drop or a row read by a task
changes the answer, so it makes a new entry. A result that read system tables, a task's rows, a lookup (reloaded on
its own) or the clock (CURRENT_TIMESTAMP) is not kept. The caller's READ on each data source is checked on every hit,
as on every run.

Runtime properties as Druid's broker: `druid.broker.cache.useResultLevelCache`,
`druid.broker.cache.populateResultLevelCache` (both false by default), `druid.broker.cache.resultLevelCacheLimit`
(the largest result kept, in bytes) and `druid.cache.sizeInBytes` (the whole cache; least recently used results go
first). A query's context `useResultLevelCache` / `populateResultLevelCache` false turns either off for it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.broker.engine import QueryResult
from sluice.segment.segment import SegmentId

__all__ = ["ResultCacheConfig", "ResultLevelCache"]

#: context keys that do not change a query's rows
_NOT_IN_KEY = frozenset({"sqlQueryId", "queryId", "timeout", "priority", "lane", "useCache", "populateCache",
                         "useResultLevelCache", "populateResultLevelCache"})


@dataclass(frozen=True)
class ResultCacheConfig:
    use: bool = False
    populate: bool = False
    #: the largest result kept, in bytes (Druid's default: Integer.MAX_VALUE)
    result_limit_bytes: int = 2**31 - 1
    #: every result kept, in bytes (Druid's caffeine cache takes 10% of the heap, at most 1 GiB)
    size_bytes: int = 256 << 20

    @property
    def enabled(self) -> bool:
        return self.use or self.populate


#: per data source read, the segments it showed when a result was computed: the same SegmentId objects while the
#: broker's timeline stands, so that comparing two is a pass of identity checks, not of strings
ETag = tuple[tuple[str, tuple[SegmentId, ...]], ...]


@dataclass(frozen=True)
class _Entry:
    etag: ETag
    result: QueryResult
    size_bytes: int


class ResultLevelCache:
    def __init__(self, config: ResultCacheConfig) -> None:
        self.config = config
        self._entries: OrderedDict[tuple[str, str, str], _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(sql: str, parameters: Sequence[Any], context: Mapping[str, Any] | None) -> tuple[str, str, str]:
        kept = {k: v for k, v in (context or {}).items() if k not in _NOT_IN_KEY}
        return sql, json.dumps(parameters, sort_keys=True, default=str), json.dumps(kept, sort_keys=True, default=str)

    def uses(self, context: Mapping[str, Any] | None) -> bool:
        return self.config.use and _flag(context, "useResultLevelCache")

    def populates(self, context: Mapping[str, Any] | None) -> bool:
        return self.config.populate and _flag(context, "populateResultLevelCache")

    def sources(self, key: tuple[str, str, str]) -> tuple[str, ...] | None:
        """The data sources a kept result read, to check the caller's READ before `get`; None when none is kept."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else tuple(source for source, _ in entry.etag)

    def get(self, key: tuple[str, str, str], etag: ETag) -> QueryResult | None:
        """The kept result, if it was computed over the segments `etag` names."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.etag != etag:
                return None
            self._entries.move_to_end(key)
            return entry.result

    def put(self, key: tuple[str, str, str], etag: ETag, result: QueryResult) -> None:
        size = len(json.dumps(result.rows, default=str)) + sum(map(len, result.columns))
        if size > min(self.config.result_limit_bytes, self.config.size_bytes):
            return
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes -= old.size_bytes if old else 0
            self._entries[key] = _Entry(etag, result, size)
            self._bytes += size
            while self._bytes > self.config.size_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.size_bytes


def _flag(context: Mapping[str, Any] | None, name: str) -> bool:
    value = (context or {}).get(name, True)
    return value is not False and str(value).lower() != "false"
