"""Data sources loaded into DuckDB's own columnar storage, the way a Druid historical loads its segments.

Parquet files are decoded again by every query that reads them. A data source whose visible segments have not
changed for a while is loaded once into an in-memory DuckDB table instead: `__time` as a plain TIMESTAMP, rows in
time order (a query's `__time` bounds skip whole row groups), and every string column dictionary-encoded, as Druid
encodes its dimensions: an ENUM of the column's values in sorted order. GROUP BY a dimension then hashes small
integers instead of strings. A sorted ENUM compares, sorts and casts as its strings do, so a query answers the same
from either; a column with more than `max_dictionary` distinct values stays VARCHAR.

Only published segments are loaded. The broker reads a data source's files instead when realtime rows fall in the
query's intervals, or when its visible segments changed since they were loaded; the new set is loaded in the
background once it has stayed the same for `settle_s` (a data source handing off every few seconds is not reloaded
every few seconds). Loaded data sources are evicted least recently used beyond `max_rows` rows in all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
from sqlglot import exp

from sluice.broker.engine import SegmentFile, lock_down, register_python_functions
from sluice.broker.sql.translate import TIME_COLUMN

log = logging.getLogger(__name__)

#: the files a load holds: (path, visible intervals) per segment file, in order
LoadKey = tuple[SegmentFile, ...]
#: the attached, compressed in-memory database a loaded table is kept in
_STORE = "loaded"


@dataclass(frozen=True)
class _Loaded:
    key: LoadKey
    database: duckdb.DuckDBPyConnection
    rows: int


class LoadedDataSources:
    def __init__(self, duckdb_config: Mapping[str, Any], max_rows: int = 50_000_000, settle_s: float = 5.0,
                 max_dictionary: int = 1_000_000) -> None:
        self._config = dict(duckdb_config)
        self._max_rows = max_rows
        self._settle_s = settle_s
        self._max_dictionary = max_dictionary
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()  # least recently used first
        self._wanted: dict[str, tuple[LoadKey, float]] = {}  # what each data source's files are, since when
        #: files a load was refused for (too many rows) or failed on: not tried again until they change
        self._not_loadable: dict[str, LoadKey] = {}
        self._lock = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._load_settled, name="data-source-loader", daemon=True)
        self._thread.start()

    def database(self, source: str, files: Sequence[SegmentFile]) -> duckdb.DuckDBPyConnection | None:
        """The data source loaded, when it holds exactly `files` (all of its visible segment files); else None, and
        `files` become what is loaded next for it."""
        key = tuple(files)
        with self._lock:
            loaded = self._loaded.get(source)
            if loaded is not None and loaded.key == key:
                self._loaded.move_to_end(source)
                return loaded.database
            if self._wanted.get(source, (None,))[0] != key:
                self._wanted[source] = (key, time.monotonic())
                self._lock.notify_all()
            return None

    def load_status(self) -> dict[str, float]:
        """Druid's loadstatus: per data source asked for, the percentage of its current files that is loaded."""
        with self._lock:
            status = {}
            for source, (key, _) in self._wanted.items():
                loaded = self._loaded.get(source)
                held = set(loaded.key) if loaded is not None else set()
                status[source] = 100.0 * sum(f in held for f in key) / len(key) if key else 100.0
            return status

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
        self._thread.join(10)

    def _load_settled(self) -> None:
        while True:
            with self._lock:
                due, wait = self._next_due()
                while not self._stopped and due is None:
                    self._lock.wait(wait)
                    due, wait = self._next_due()
                if self._stopped:
                    return
                source, key = due
            try:
                loaded = self._load(source, key)
            except Exception:  # a load that fails leaves the data source read from its files
                log.exception("loading data source %s failed", source)
                with self._lock:
                    self._not_loadable[source] = key
                continue
            with self._lock:
                if loaded is None:
                    self._not_loadable[source] = key
                    continue
                self._loaded[source] = loaded
                self._loaded.move_to_end(source)
                while sum(entry.rows for entry in self._loaded.values()) > self._max_rows:
                    evicted, _ = self._loaded.popitem(last=False)
                    log.info("data source %s unloaded to make room", evicted)

    def _next_due(self) -> tuple[tuple[str, LoadKey] | None, float | None]:
        """A data source whose files have stayed the same for settle_s and are not what is loaded, or else how long
        until one may be (None: until a new set of files is asked for). Called holding the lock."""
        now = time.monotonic()
        waits = []
        for source, (key, since) in self._wanted.items():
            loaded = self._loaded.get(source)
            if (loaded is not None and loaded.key == key) or self._not_loadable.get(source) == key:
                continue
            if now - since >= self._settle_s:
                return (source, key), None
            waits.append(since + self._settle_s - now)
        return None, min(waits, default=None)

    def _load(self, source: str, key: LoadKey) -> _Loaded | None:
        """The data source in a database of its own, locked down like the engine's; None when it is too big.

        The table lives in an attached in-memory database with DuckDB's compression (RLE, bit-packing, constants),
        a sixth of the memory of an uncompressed one at the same query speed; the view under the data source's name
        is what queries read.
        """
        started = time.monotonic()
        database = duckdb.connect(":memory:", config=self._config)
        database.execute(f"ATTACH ':memory:' AS {_STORE} (COMPRESS)")
        staging = "__files"
        register_python_functions(database)  # kept long and queried often: registered up front
        lock_down(database, {staging: list(key)})  # it reads only these files, and builds its table from them
        rows = database.execute(f"SELECT COUNT(*) FROM {staging}").fetchone()[0]
        if rows > self._max_rows:
            log.info("data source %s has %d rows, more than the %d that may be loaded", source, rows, self._max_rows)
            database.close()
            return None
        columns = database.execute(f"DESCRIBE {staging}").fetchall()
        selected = []
        for position, (name, kind, *_) in enumerate(columns):
            column = exp.column(name, quoted=True).sql(dialect="duckdb")
            if kind == "VARCHAR" and self._dictionary(database, staging, column, position):
                selected.append(f'CAST({column} AS {_STORE}."__dictionary_{position}") AS {column}')
            else:
                selected.append(column)
        table = exp.to_identifier(source, quoted=True).sql(dialect="duckdb")
        time_order = exp.column(TIME_COLUMN, quoted=True).sql(dialect="duckdb")
        order = f" ORDER BY {time_order}" if any(name == TIME_COLUMN for name, *_ in columns) else ""
        database.execute(f"CREATE TABLE {_STORE}.{table} AS SELECT {', '.join(selected)} FROM {staging}{order}")
        database.execute(f"DROP VIEW {staging}")
        database.execute(f"CHECKPOINT {_STORE}")  # compresses
        database.execute(f"CREATE VIEW {table} AS SELECT * FROM {_STORE}.{table}")
        log.info("data source %s loaded: %d rows from %d files in %.1f s", source, rows, len(key),
                 time.monotonic() - started)
        return _Loaded(key, database, rows)

    def _dictionary(self, database: duckdb.DuckDBPyConnection, staging: str, column: str, position: int) -> bool:
        """Create the column's dictionary (an ENUM of its sorted values) unless it has too many values."""
        distinct = database.execute(f"SELECT COUNT(DISTINCT {column}) FROM {staging}").fetchone()[0]
        if distinct > self._max_dictionary:
            return False
        database.execute(f'CREATE TYPE {_STORE}."__dictionary_{position}" AS ENUM '
                         f"(SELECT DISTINCT {column} FROM {staging} WHERE {column} IS NOT NULL ORDER BY {column})")
        return True
