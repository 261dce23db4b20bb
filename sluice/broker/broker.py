"""The broker: Druid SQL over the visible segments of every data source, plus the rows running tasks hold.

A query is translated first, which tells the broker which data sources it reads and over which intervals of
`__time`; only the segments (and realtime pieces) overlapping those intervals are handed to the engine, as Druid's
broker only asks the segments a query's intervals cover. A segment a higher version overshadows in part is read only
where the timeline shows it, as Druid's broker asks a historical for the visible interval of a segment (its
SegmentDescriptor), not for the whole segment.

**The hand-off never counts a row twice or drops it.** A query reads one snapshot: the running tasks' views (what each
has persisted, from where it started reading), fetched first, then the committed state (used segments and committed
stream offsets) read in one metadata transaction, and the realtime rule (`realtime.visible_pieces`) applied to the
views against that state's offsets. A task's publish makes its segments used and moves the offsets past its start in
one transaction, and the task deletes its persists only after that commit and leaves the running list only after
that. So, for a task that has rows:
- it committed before the state was read: its segments are in the state and its offsets moved, so its pieces are
  skipped, however stale its view;
- it commits after: its segments are not in the state and its pieces answer (what it had persisted when its view was
  fetched; later rows are not visible yet). Its files may vanish before the engine reads them: the query then runs
  once more on a fresh snapshot;
- it is not among the views: it left the running list, so committed, before the views were fetched, hence before the
  state was read (or it failed and committed nothing, and its rows will be read again).
Views fetched after the state would lose a task that published and left in between, and offsets read apart from the
segments would hide or double a publish landing between the two reads. The snapshot is kept whole (views, segments
and offsets together) for `snapshot_ttl_s` rather than taken again for every query, for the same reasons.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sluice.broker import system_tables as sys_tables
from sluice.broker.engine import ClippedFile, QueryResult, RealtimeFile, SegmentFile, SegmentFileGone, SqlEngine, \
    complex_columns, multi_value_columns, table_columns
from sluice.broker.errors import SqlError
from sluice.broker.sql.intervals import overlaps_any
from sluice.broker.loaded import LoadedDataSources
from sluice.broker.realtime import RealtimePiece, piece_footer, visible_pieces
from sluice.broker.result_cache import ETag, ResultLevelCache
from sluice.broker.sql.translate import Translation, translate_query
from sluice.broker.system_tables import RealtimeSegment, Server, SystemTable
from sluice.discovery import BROKER, OVERLORD, WORKER, live_nodes
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage
from sluice.segment.segment import ETERNITY, DataSegment, Interval, SegmentId
from sluice.segment.timeline import VersionedIntervalTimeline
from sluice.security.access import ALLOW_ALL_PERMISSIONS, Permissions, readable, require
from sluice.security.resources import STATE, Action, Resource, ResourceType

if TYPE_CHECKING:
    from sluice.realtime import RealtimeView

#: How often a query may find a file of its snapshot gone before it fails (each time, a publish moved on).
_READS_PER_QUERY = 5

#: What the running streaming tasks have persisted, one view per task (replicas included).
RealtimeViews = Callable[[], Iterable["RealtimeView"]]
#: Live JSON for a sys table, or None when it cannot be had (the stored state is shown then).
LiveState = Callable[[], Sequence[Mapping[str, Any]] | None]


@dataclass(frozen=True)
class _Snapshot:
    """What the running tasks and the metadata store said at one moment (see the module's docstring)."""

    taken: float  # time.monotonic()
    used: list[DataSegment]
    # per data source, the running tasks' files whose rows the used segments do not hold
    realtime: dict[str, list[RealtimePiece]]
    visible: dict[str, list[DataSegment]]  # per data source, what the timeline shows, in segment id order
    # Where a visible segment shows only in part (a higher version overshadows the rest): those parts, in time order.
    # Every segment missing here shows over its whole interval.
    clipped: dict[SegmentId, tuple[Interval, ...]]
    overshadowed: set[SegmentId]


# Sluice's roles as Druid's node roles in sys.servers.
_SERVER_TYPES = {OVERLORD: "overlord", BROKER: "broker", WORKER: "middle_manager"}


class Broker:
    def __init__(
        self,
        metadata: MetadataStore,
        deep_storage: DeepStorage,
        cache_dir: Path,
        engine: SqlEngine | None = None,
        *,
        realtime: RealtimeViews | None = None,
        supervisors: LiveState | None = None,
        tasks: LiveState | None = None,
        servers: Callable[[], Sequence[Server]] | None = None,
        snapshot_ttl_s: float = 0.1,
        loaded: LoadedDataSources | None = None,
        result_cache: ResultLevelCache | None = None,
    ) -> None:
        """`realtime` gives the running tasks' views. `supervisors` (SupervisorStatus JSON), `tasks` (TaskStatusPlus
        JSON) and `servers` give live state for the sys tables; without them, or when they give None, what the
        metadata store holds is shown. With `loaded`, data sources are loaded into DuckDB's own storage when their
        segments stay the same, and queries over published data read them there. `result_cache`: Druid's
        result-level cache (`result_cache.py`). `snapshot_ttl_s`: how long one snapshot answers queries, which bounds
        how late a task's new persist is seen; each new one costs a metadata transaction (0.5 s made a persisted row
        wait 0.25 s more on average: freshness p50 1.95 s, against 1.77 s at 0.1 s)."""
        self._metadata = metadata
        self._deep_storage = deep_storage
        self._cache_dir = cache_dir
        self._engine = engine or SqlEngine()
        self._realtime = realtime or list
        self._supervisors = supervisors or (lambda: None)
        self._tasks = tasks or (lambda: None)
        self._servers = servers or self._announced_servers
        self._snapshot_ttl_s = snapshot_ttl_s
        self._snapshot_lock = threading.Lock()
        self._current: _Snapshot | None = None
        self._local_paths: dict[SegmentId, str] = {}
        self._loaded = loaded
        self._result_cache = result_cache if result_cache is not None and result_cache.config.enabled else None
        self._running: dict[str, frozenset[str]] = {}  # query id → the data sources it reads

    def visible_segments(self) -> dict[str, list[DataSegment]]:
        """Per data source, the segments the versioned timeline shows (overshadowed ones hidden)."""
        return self._snapshot().visible

    def sql(self, query: str, parameters: Sequence[dict[str, Any]] = (),
            context: Mapping[str, Any] | None = None,
            permissions: Permissions = ALLOW_ALL_PERMISSIONS) -> QueryResult:
        """Run Druid SQL as a caller with `permissions`: READ on every data source it reads (else Forbidden), and
        system tables that show only what the caller may read. A file that vanished since the snapshot was taken
        makes it run again on a fresh one: a publish that deletes its task's persists right after its commit can land
        between a snapshot and its read, and task groups that roll over together publish within milliseconds of each
        other, so one retry is not always enough."""
        fresh, started = False, time.monotonic()
        cache_key = None if self._result_cache is None else self._result_cache.key(query, parameters, context)
        if cache_key is not None and self._result_cache.uses(context):
            cached = self._cached_result(cache_key, permissions, self._snapshot)
            if cached is not None:
                return cached
        for _ in range(_READS_PER_QUERY - 1):
            try:
                return self._sql(query, parameters, _timeout_left(context, started), permissions, fresh, cache_key)
            except SegmentFileGone:
                self._local_paths.clear()
                fresh = True
        try:
            return self._sql(query, parameters, _timeout_left(context, started), permissions, True, cache_key)
        except SegmentFileGone as gone:
            raise SqlError.internal(
                f"Segment files could not be read, even on {_READS_PER_QUERY - 1} fresh snapshots: {gone}") from gone

    def cancel(self, query_id: str, permissions: Permissions = ALLOW_ALL_PERMISSIONS) -> bool:
        """Cancel the running query with this sqlQueryId (the caller needs READ on what it reads, as to run it);
        False when none runs."""
        for source in self._running.get(query_id, ()):
            require(permissions, Resource.datasource(source), Action.READ)
        return self._engine.cancel(query_id)

    def load_status(self) -> dict[str, float]:
        """Druid's loadstatus: per data source with published segments, the percentage of them loaded (100 when
        data sources are not loaded at all: they are read from their files, which is always possible)."""
        snapshot = self._snapshot()
        if self._loaded is None:
            return {source: 100.0 for source in snapshot.visible}
        for source in snapshot.visible:
            self._loaded_database(snapshot, source)
        return {source: percent for source, percent in self._loaded.load_status().items() if source in snapshot.visible}

    def cached(self, query: str, parameters: Sequence[dict[str, Any]] = (),
               context: Mapping[str, Any] | None = None,
               permissions: Permissions = ALLOW_ALL_PERMISSIONS) -> QueryResult | None:
        """`sql`'s answer when the result-level cache holds it and the current snapshot is recent, else None; reads
        neither the metadata store nor a file, so that the SQL API can answer a hit on its event loop without
        handing the query to a thread (on a broker answering repeated dashboards, that hop was a third of a hit)."""
        if self._result_cache is None or not self._result_cache.uses(context):
            return None
        current = self._current
        if current is None or time.monotonic() - current.taken > self._snapshot_ttl_s:
            return None
        return self._cached_result(self._result_cache.key(query, parameters, context), permissions, lambda: current)

    def _cached_result(self, key: tuple[str, str, str], permissions: Permissions,
                       snapshot_of: Callable[[], _Snapshot]) -> QueryResult | None:
        """A kept result of this query, if the data sources it read show the same segments and no task's rows."""
        assert self._result_cache is not None
        sources = self._result_cache.sources(key)
        if sources is None:
            return None
        for source in sources:
            require(permissions, Resource.datasource(source), Action.READ)
        snapshot = snapshot_of()
        if _reads_task_rows(snapshot, sources):
            return None
        return self._result_cache.get(key, _etag(snapshot, sources))

    def _sql(self, query: str, parameters: Sequence[dict[str, Any]], context: Mapping[str, Any] | None,
             permissions: Permissions, fresh: bool, cache_key: tuple[str, str, str] | None) -> QueryResult:
        snapshot = self._snapshot(fresh)
        files: dict[str, list[SegmentFile]] = {}

        def columns_of(source: str, intervals: list[Interval]) -> dict[str, str]:
            """Chooses the files the query reads of a data source (once the caller's READ on it is checked, before
            any is fetched); their schemas say its complex columns."""
            require(permissions, Resource.datasource(source), Action.READ)
            files[source] = self._files(snapshot, source, intervals)
            return complex_columns(files[source])

        translation = translate_query(query, set(snapshot.visible) | set(snapshot.realtime), context,
                                      complex_columns=columns_of)
        for table in translation.system_tables:  # asked only under druid.sql.planner.authorizeSystemTablesDirectly
            if table.schema == sys_tables.SYS_SCHEMA:
                require(permissions, Resource(table.name, ResourceType.SYSTEM_TABLE), Action.READ)
        system = {table: self._system_table(table, snapshot, permissions) for table in translation.system_tables}
        database = None
        if len(translation.data_sources) == 1:  # a loaded data source holds its published rows only
            [source] = translation.data_sources
            if not any(isinstance(file, RealtimeFile) for file in files[source]):
                database = self._loaded_database(snapshot, source)
        query_id = translation.context.query_id
        if query_id is not None:
            self._running[query_id] = translation.data_sources
        try:
            result = self._engine.run(translation, files, parameters, system, database)
        finally:
            if query_id is not None:
                self._running.pop(query_id, None)
        if cache_key is not None and self._result_cache is not None and self._result_cache.populates(context) \
                and _same_answer_while_segments_are(translation, snapshot):
            self._result_cache.put(cache_key, _etag(snapshot, translation.data_sources), result)
        return result

    def _loaded_database(self, snapshot: _Snapshot, source: str) -> Any:
        """The data source loaded with exactly its visible segments, if it is (a load is asked for otherwise)."""
        if self._loaded is None or not snapshot.visible.get(source):
            return None
        return self._loaded.database(source, [self._file(snapshot, s) for s in snapshot.visible[source]])

    def _files(self, snapshot: _Snapshot, source: str, intervals: list[Interval]) -> list[SegmentFile]:
        """The files of the segments and pieces visible within the query's intervals; when none is, one file all the
        same, which gives the data source its columns (the query's own filter then finds no rows in it)."""
        segments = snapshot.visible.get(source, [])
        pieces = snapshot.realtime.get(source, [])
        files = [self._file(snapshot, s) for s in segments
                 if any(overlaps_any(part, intervals) for part in snapshot.clipped.get(s.id, (s.interval,)))]
        files += [_realtime_file(piece) for piece in pieces
                  if overlaps_any(piece_footer(piece.path).interval, intervals)]
        return files or ([self._file(snapshot, segments[0])] if segments else [_realtime_file(pieces[0])])

    def _file(self, snapshot: _Snapshot, segment: DataSegment) -> SegmentFile:
        path = self._local_path(segment)
        parts = snapshot.clipped.get(segment.id)
        return path if parts is None else ClippedFile(path, parts)

    def _local_path(self, segment: DataSegment) -> str:
        path = self._local_paths.get(segment.id)
        if path is None:
            try:
                path = str(self._deep_storage.fetch(segment.load_spec, self._cache_dir))
            except ValueError as error:  # a loadSpec of another deep storage, or outside this one
                raise SqlError.internal(f"Segment {segment.id} cannot be read: {error}") from None
            self._local_paths[segment.id] = path
        return path

    def _snapshot(self, fresh: bool = False) -> _Snapshot:
        with self._snapshot_lock:
            current = self._current
            if fresh or current is None or time.monotonic() - current.taken > self._snapshot_ttl_s:
                views = list(self._realtime())  # first: see the module's docstring
                committed = self._metadata.committed_state()
                realtime = visible_pieces(views, {source: offsets.offsets
                                                  for source, offsets in committed.stream_offsets.items()})
                used = committed.used_segments
                if current is not None and [s.id for s in used] == [s.id for s in current.used]:
                    # same segments: same timeline
                    current = replace(current, taken=time.monotonic(), realtime=realtime)
                else:
                    current = _take_snapshot(used, realtime)
                    if self._current is not None:
                        self._drop_copies(self._current, current)
                self._current = current
            return current

    def _drop_copies(self, before: _Snapshot, now: _Snapshot) -> None:
        """Drop the local copies of segments the timeline no longer shows (overshadowed, or unused), as Druid's
        historicals drop them: a query still reading one on the earlier snapshot runs again on this one."""
        shown = {segment.id for segments in now.visible.values() for segment in segments}
        for segments in before.visible.values():
            for segment in segments:
                if segment.id not in shown and self._local_paths.pop(segment.id, None) is not None:
                    self._deep_storage.drop_copy(segment.load_spec, self._cache_dir)

    # ----------------------------------------------------------------------------------------------- system tables

    def _system_table(self, table: SystemTable, snapshot: _Snapshot, permissions: Permissions) -> pa.Table:
        """Rows of data sources the caller may not read are left out, as Druid does; the servers need STATE READ."""
        sources = set(readable(permissions, set(snapshot.visible) | set(snapshot.realtime)))
        available = {segment.id for source, segments in snapshot.visible.items() if source in sources
                     for segment in segments}
        if table is sys_tables.SCHEMATA:
            return sys_tables.schemata()
        if table is sys_tables.TABLES:
            return sys_tables.tables(sources)
        if table is sys_tables.COLUMNS:
            return sys_tables.columns({
                source: [(name, sys_tables.sql_type(kind))
                         for name, kind in table_columns(self._all_files(snapshot, source))]
                for source in sources
            })
        if table is sys_tables.SEGMENTS:
            return sys_tables.segments([s for s in snapshot.used if s.data_source in sources], available,
                                       snapshot.overshadowed,
                                       [s for s in _realtime_segments(snapshot) if s.data_source in sources])
        if table in (sys_tables.SERVERS, sys_tables.SERVER_SEGMENTS):
            require(permissions, STATE, Action.READ, "Insufficient permission to view servers")
            if table is sys_tables.SERVERS:
                return sys_tables.servers([*self._servers(), *self._peons()])
            return sys_tables.server_segments(self._servers(), sorted(available), [
                segment for segment in _realtime_segments(snapshot) if segment.data_source in sources])
        if table is sys_tables.TASKS:
            live = self._tasks()
            return sys_tables.tasks(t for t in (live if live is not None else self._stored_tasks())
                                    if permissions.allows(Resource.datasource(t.get("dataSource") or ""), Action.READ))
        live = self._supervisors()  # a supervisor is named after the data source it writes
        return sys_tables.supervisors(s for s in (live if live is not None else self._stored_supervisors())
                                      if permissions.allows(Resource.datasource(s["id"]), Action.READ))

    def multi_value_columns(self, data_source: str, intervals: list[Interval]) -> set[str]:
        """The columns some of the data source's files that a query within `intervals` reads hold as multi-value
        strings (what a query's translation finds of the data source's columns)."""
        snapshot = self._snapshot()
        return multi_value_columns(self._files(snapshot, data_source, intervals)) if data_source in snapshot.visible \
            or data_source in snapshot.realtime else set()

    def _all_files(self, snapshot: _Snapshot, source: str) -> list[SegmentFile]:
        """The files of all the data source's visible segments and realtime pieces."""
        return [self._local_path(s) for s in snapshot.visible.get(source, [])] + \
            [_realtime_file(piece) for piece in snapshot.realtime.get(source, [])]

    def _stored_tasks(self) -> list[dict[str, Any]]:
        return [sys_tables.task_status(record) for record in self._metadata.list_tasks()]

    def _stored_supervisors(self) -> list[dict[str, Any]]:
        return [sys_tables.supervisor_status(spec_id, spec)
                for spec_id, spec in self._metadata.active_supervisors().items()]

    def _peons(self) -> list[Server]:
        """The peons of the running tasks, where they serve their realtime rows (a task running in a node's own
        process has no location of its own: its node serves it)."""
        located = {(location["host"], location["port"]) for task in self._tasks() or ()
                   if task.get("statusCode") == "RUNNING"
                   and ((location := task.get("location") or {}).get("port") or -1) > 0}
        return [Server(host, port, "peon") for host, port in sorted(located)]

    def _announced_servers(self) -> list[Server]:
        return [Server(node.host, node.port, server_type)
                for role, server_type in _SERVER_TYPES.items() for node in live_nodes(self._metadata, role)]


def _timeout_left(context: Mapping[str, Any] | None, started: float) -> Mapping[str, Any] | None:
    """The context with what is left of its `timeout` since `started`: a retry runs under the query's one timeout."""
    timeout = context.get("timeout") if isinstance(context, Mapping) else None
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
        return context
    left = timeout - int((time.monotonic() - started) * 1000)
    if left <= 0:
        raise SqlError.timeout()
    return {**context, "timeout": left}


def _same_answer_while_segments_are(translation: Translation, snapshot: _Snapshot) -> bool:
    """Whether the query's answer stays the same while the segments of its data sources do: not over system tables,
    a task's rows, lookups (reloaded on their own) or the clock."""
    return not (translation.system_tables or translation.lookups or translation.reads_clock
                or _reads_task_rows(snapshot, translation.data_sources))


def _reads_task_rows(snapshot: _Snapshot, sources: Iterable[str]) -> bool:
    """Whether running tasks hold unpublished rows of any of these data sources."""
    return any(snapshot.realtime.get(source) for source in sources)


def _etag(snapshot: _Snapshot, sources: Iterable[str]) -> ETag:
    """What a result over these data sources was computed from: the segments each showed."""
    return tuple((source, tuple(s.id for s in snapshot.visible.get(source, ()))) for source in sorted(sources))


def _realtime_file(piece: RealtimePiece) -> RealtimeFile:
    return RealtimeFile(piece.path, piece.multi_values)


def _realtime_segments(snapshot: _Snapshot) -> list[RealtimeSegment]:
    """One realtime segment per task group that answers, over all its files."""
    groups: dict[tuple[str, str], list[RealtimePiece]] = {}
    for source, pieces in snapshot.realtime.items():
        for piece in pieces:
            groups.setdefault((source, piece.sequence_name), []).append(piece)
    segments = []
    for (source, sequence), pieces in sorted(groups.items()):
        footers = [piece_footer(piece.path) for piece in pieces]
        interval = Interval(min(f.interval.start for f in footers), max(f.interval.end for f in footers))
        segments.append(RealtimeSegment(sequence, source, interval, sum(f.num_rows for f in footers),
                                        sum(f.size for f in footers), pieces[0].server))
    return segments


def _take_snapshot(used: list[DataSegment], realtime: dict[str, list[RealtimePiece]]) -> _Snapshot:
    by_source: dict[str, list[DataSegment]] = {}
    for segment in used:
        by_source.setdefault(segment.data_source, []).append(segment)
    visible, clipped, overshadowed = {}, {}, set()
    for source, segments in by_source.items():
        timeline = VersionedIntervalTimeline.from_segments(segments)
        parts = timeline.visible_parts(ETERNITY)
        visible[source] = sorted((s for s in segments if s.id in parts), key=lambda s: s.id)
        clipped |= {s.id: tuple(parts[s.id]) for s in visible[source] if parts[s.id] != [s.interval]}
        overshadowed |= timeline.find_fully_overshadowed()
    return _Snapshot(time.monotonic(), used, realtime, visible, clipped, overshadowed)

