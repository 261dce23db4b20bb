"""Druid's LookupReferencesManager on a broker: the lookups of its tier, loaded, for queries to read.

Druid's coordinator pushes lookups to each node; in Sluice a broker reads the coordinator's document from the
metadata store itself, at most once per `poll_s` (a lookup posted is answered by every broker within that), and
loads a lookup again only when its spec changed (a new version). A `jdbc` lookup is read from its database when
first asked for, then again once its `pollPeriod` has passed; a read that fails keeps the map already loaded, as
Druid's cache keeps serving its last snapshot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from sluice.lookups.coordinator import Lookups
from sluice.lookups.jdbc import load_jdbc
from sluice.lookups.specs import (
    DEFAULT_TIER,
    CachedNamespaceLookupExtractorFactory,
    JdbcExtractionNamespace,
    parse_lookup,
)
from sluice.spec.errors import SpecError

log = logging.getLogger(__name__)

#: a lookup's columns as a table (Druid's `lookup.<name>` has `k` and `v`)
KEY, VALUE = "k", "v"


class LookupLoadError(RuntimeError):
    """A lookup configured for the tier that cannot be loaded (its database unreachable, its spec unreadable)."""


@dataclass(frozen=True)
class LookupExtractor:
    """A loaded lookup: key → value, both text."""

    map: Mapping[str, str | None]

    def apply(self, key: str | None, retain_missing_value: bool = False,
              replace_missing_value_with: str | None = None) -> str | None:
        """Druid's lookup extraction: the value of `key`; for a null or missing key, the key itself when
        `retain_missing_value`, else `replace_missing_value_with` (null by default)."""
        value = None if key is None else self.map.get(key)
        if value is not None:
            return value
        return key if retain_missing_value else replace_missing_value_with

    @cached_property
    def table(self) -> pa.Table:
        """The map as a table of `k` and `v` (strings), built once per loaded version."""
        return pa.table({KEY: pa.array(list(self.map), pa.string()),
                         VALUE: pa.array(list(self.map.values()), pa.string())})


@dataclass
class _Loaded:
    spec: dict[str, Any]  # as stored: a change of it means a new version
    extractor: LookupExtractor
    next_poll: float | None  # when a jdbc lookup is read again; None: never


class LookupReferences:
    """The loaded lookups of one tier, refreshed from the coordinator's document (`read`)."""

    def __init__(self, read: Callable[[], Lookups | None], tier: str = DEFAULT_TIER, poll_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._tier = tier
        self._poll_s = poll_s
        self._clock = clock
        self._lock = threading.Lock()
        self._specs: dict[str, dict[str, Any]] = {}
        self._read_at: float | None = None
        self._loaded: dict[str, _Loaded] = {}

    def get(self, name: str) -> LookupExtractor | None:
        """The lookup loaded, or None when the tier has none of that name; LookupLoadError when it cannot be
        loaded at all."""
        with self._lock:
            spec = self._configured().get(name)
            if spec is None:
                self._loaded.pop(name, None)
                return None
            loaded = self._loaded.get(name)
            now = self._clock()
            if loaded is None or loaded.spec != spec:
                loaded = self._loaded[name] = self._load(name, spec, now)
            elif loaded.next_poll is not None and now >= loaded.next_poll:
                self._poll(name, loaded, now)
            return loaded.extractor

    def map(self, name: str) -> Mapping[str, str | None]:
        """The loaded lookup's map; KeyError when the tier has none of that name (what `lookup()` at ingestion
        reads)."""
        extractor = self.get(name)
        if extractor is None:
            raise KeyError(name)
        return extractor.map

    def _configured(self) -> dict[str, dict[str, Any]]:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._poll_s:
            self._specs = (self._read() or {}).get(self._tier, {})
            self._read_at = now
        return self._specs

    def _load(self, name: str, spec: dict[str, Any], now: float) -> _Loaded:
        try:
            factory = parse_lookup(spec).lookup_extractor_factory
        except SpecError as error:
            raise LookupLoadError(f"Lookup [{name}] cannot be loaded: {error}") from None
        if not isinstance(factory, CachedNamespaceLookupExtractorFactory):
            return _Loaded(spec, LookupExtractor(factory.map), None)
        namespace = factory.extraction_namespace
        try:
            extractor = LookupExtractor(load_jdbc(namespace))
        except Exception as error:
            raise LookupLoadError(f"Lookup [{name}] cannot be loaded from its database: {error}") from error
        return _Loaded(spec, extractor, _next_poll(namespace, now))

    def _poll(self, name: str, loaded: _Loaded, now: float) -> None:
        namespace = parse_lookup(loaded.spec).lookup_extractor_factory.extraction_namespace  # type: ignore[union-attr]
        loaded.next_poll = _next_poll(namespace, now)
        try:
            loaded.extractor = LookupExtractor(load_jdbc(namespace))
        except Exception:
            log.warning("lookup [%s] could not be read again; the last map read is served", name, exc_info=True)


def _next_poll(namespace: JdbcExtractionNamespace, now: float) -> float | None:
    period = namespace.poll_period.total_seconds()
    return now + period if period > 0 else None
