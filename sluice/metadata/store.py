"""The metadata store: segments, stream offsets, pending segments, supervisors and tasks.

Druid's ``IndexerSQLMetadataStorageCoordinator`` and metadata managers on SQLAlchemy Core, over
SQLite (the default, one machine) or PostgreSQL (production). The store is the only place where
the exactly-once invariant is enforced: a publish inserts its segments and moves the stream
offsets from ``start`` to ``end`` in ONE transaction, and only if the stored offsets still
match ``start``. A task killed at any point, a replica publishing the same range, or a restart
can therefore never lose or double a row.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from tenacity import Retrying, retry_if_exception, retry_if_exception_type, stop_after_attempt, stop_after_delay
from tenacity import wait_random_exponential

from sluice.metadata import tables
from sluice.metadata.schema import migrate
from sluice.metadata.offsets import StreamOffsets
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.timestamps import format_timestamp, parse_timestamp
from sluice.segment.timeline import VersionedIntervalTimeline

T = TypeVar("T")

#: Payload type of a terminated supervisor's tombstone row.
TOMBSTONE_TYPE = "NoopSupervisorSpec"

# Druid retries a metadata transaction that lost a race (CAS failure, duplicate key) up to 10 times.
log = logging.getLogger(__name__)
_MAX_TRIES = 10
_BACKOFF_SECONDS = 0.005
_SQLITE_BUSY_TIMEOUT_SECONDS = 30.0
# Execution option marking the engine used for reads (a deferred BEGIN on SQLite).
_READ_ONLY = "sluice_read_only"


@dataclass(frozen=True)
class PublishResult:
    """Outcome of a publish. ``success=False`` is returned only when nothing was written."""

    success: bool
    message: str | None = None


@dataclass(frozen=True)
class CommittedState:
    """What publishes have committed, as of one moment: the used segments and every data source's stream offsets.

    A publish changes both in one transaction, so a state read in one transaction holds either all of a publish
    or none of it; the broker relies on that to hand rows over from tasks to segments without a gap or a double.
    """

    used_segments: list[DataSegment]  # in segment id order
    stream_offsets: dict[str, StreamOffsets]  # per data source


@dataclass(frozen=True)
class TaskRecord:
    """One row of ``druid_tasks``."""

    id: str
    data_source: str
    task_type: str | None
    group_id: str | None
    created_date: str
    payload: dict[str, Any]
    status: dict[str, Any]
    active: bool


@dataclass(frozen=True)
class Announcement:
    """A node that said it serves: its role, where, and what it offers (e.g. a worker's capacity)."""

    role: str
    host: str
    port: int
    payload: dict[str, Any]
    heartbeat_millis: int


class SegmentAllocationError(Exception):
    """A segment id cannot be allocated; the message says which existing data is in the way."""


class EntryExistsError(Exception):
    """An entry with this id already exists (Druid's EntryExistsException)."""


class NotLeader(Exception):
    """A write of a leader whose lease another node holds now: refused (fencing), so that a leader paused past its
    lease cannot commit after its successor started."""


@dataclass(frozen=True)
class Lease:
    """A role's leader lease (sluice_leader_leases)."""

    leader: str  # the leader's base URL
    epoch: int  # rises with every new term
    expires: int  # epoch millis


class _TryAgain(Exception):
    """The transaction lost a race and must be retried from the start."""


class _Abort(Exception):
    """The transaction must roll back and the caller get a failure with this message."""


@dataclass(frozen=True)
class AuditInfo:
    """Druid's AuditInfo of a config change: from the X-Druid-Author and X-Druid-Comment headers and the caller's
    address."""

    author: str = ""
    comment: str = ""
    ip: str | None = None


class MetadataStore:
    """Druid's metadata tables behind one engine, safe to share between threads."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._engine = _create_engine(uri)
        self._reader = self._engine.execution_options(**{_READ_ONLY: True})
        #: (role, leader, epoch) of this process's leadership: its compare-and-swap writes need the lease still held
        self._fence: tuple[str, str, int] | None = None

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def create_tables(self) -> None:
        """Bring the schema up to this Sluice's: create a new store's tables, upgrade an older store's (idempotent;
        SchemaError for a store of a newer Sluice)."""
        before, now = migrate(self._engine)
        if before != now:
            log.info("metadata store %s: schema %s -> %s", self._engine.url.render_as_string(), before or "none", now)

    # -- stream offsets (druid_dataSource) ---------------------------------------------------

    def get_stream_offsets(self, data_source: str) -> StreamOffsets | None:
        with self._reader.connect() as conn:
            stored = _read_commit_metadata(conn, data_source)
        return None if stored is None else stored[0]

    def reset_stream_offsets(self, data_source: str, offsets: StreamOffsets) -> None:
        """Unconditionally set the given partitions' offsets, keeping the others (resetOffsets).

        Offsets of another stream replace the stored value entirely.
        """

        def work(conn: Connection) -> None:
            stored = _read_commit_metadata(conn, data_source)
            if stored is None:
                _insert_commit_metadata(conn, data_source, offsets)
            else:
                _swap_commit_metadata(conn, data_source, stored[1], stored[0].plus(offsets))

        self._transaction(work)

    def delete_stream_offsets(self, data_source: str) -> bool:
        """Forget the stored offsets (a hard reset); True if there were any."""
        table = tables.data_source
        with self._engine.begin() as conn:
            return conn.execute(table.delete().where(table.c.dataSource == data_source)).rowcount > 0

    # -- segments ----------------------------------------------------------------------------

    def allocate_segment(
        self,
        data_source: str,
        interval: Interval,
        sequence_name: str,
        previous_segment_id: str | None,
        lock_version: str,
    ) -> SegmentId:
        """Allocate the next segment id of a sequence, recording it in ``druid_pendingSegments``.

        Idempotent per (sequence_name, previous_segment_id): replicas reading the same offsets use
        the same sequence names and so get the same ids, and a retried allocation gets the id it
        already got. A new id joins the interval's existing time chunk, reusing its version (the
        committed or pending one), with the next partition number; an empty chunk starts at
        ``lock_version`` and partition 0. Shard specs are numbered with 0 core partitions.
        """
        previous = previous_segment_id or ""
        key = _sha1_hex(sequence_name.encode() + b"\xff" + previous.encode())
        pending = tables.pending_segments

        def work(conn: Connection) -> SegmentId:
            row = conn.execute(
                select(pending.c.dataSource, pending.c.payload).where(pending.c.sequence_name_prev_id_sha1 == key)
            ).first()
            if row is not None:
                existing = _pending_segment_id(row.payload)
                if row.dataSource != data_source or existing.interval != interval:
                    raise SegmentAllocationError(
                        f"Cannot use existing pending segment [{existing}] for sequence[{sequence_name}] "
                        f"(previous = [{previous}]): it was allocated for data source [{row.dataSource}] "
                        f"interval [{existing.interval}], not [{data_source}] interval [{interval}]"
                    )
                return existing
            segment_id = _next_segment_id(conn, data_source, interval, lock_version)
            conn.execute(
                insert(pending).values(
                    id=str(segment_id),
                    dataSource=data_source,
                    created_date=_now(),
                    start=format_timestamp(interval.start),
                    end=format_timestamp(interval.end),
                    sequence_name=sequence_name,
                    sequence_prev_id=previous,
                    sequence_name_prev_id_sha1=key,
                    payload=_dump(
                        {
                            "dataSource": data_source,
                            "interval": str(interval),
                            "version": segment_id.version,
                            "shardSpec": numbered_shard_spec(segment_id.partition_num),
                        }
                    ),
                )
            )
            return segment_id

        return self._transaction(work)

    def commit_segments_and_metadata(
        self,
        segments: Sequence[DataSegment],
        data_source: str,
        start: StreamOffsets | None,
        end: StreamOffsets | None,
    ) -> PublishResult:
        """Publish segments and move the stream offsets from ``start`` to ``end``, atomically.

        The offsets move only if the stored ones match ``start`` (every common partition at the
        same offset); the new value is the stored one plus ``end``. A mismatch rolls back
        everything and returns Druid's failure message; losing a compare-and-swap race to a
        concurrent publish (another task group's partitions) retries the whole transaction on
        the fresh value. Segments whose id already exists are skipped; segments that a higher
        version in this batch fully overshadows are inserted unused.
        """
        if (start is None) != (end is None):
            raise ValueError("start/end metadata pair must be either null or non-null")
        ids = [segment.id for segment in segments]
        if len(set(ids)) != len(ids):
            duplicates = sorted({str(i) for i in ids if ids.count(i) > 1})
            raise ValueError(f"segments to publish contain duplicate ids: {duplicates}")
        foreign = sorted({segment.data_source for segment in segments} - {data_source})
        if foreign:
            raise ValueError(f"segments to publish must all belong to data source [{data_source}], found {foreign}")
        overshadowed = VersionedIntervalTimeline.from_segments(segments).find_fully_overshadowed()

        def work(conn: Connection) -> None:
            if start is not None and end is not None:
                _compare_and_swap_offsets(conn, data_source, start, end)
            _insert_segments(conn, segments, overshadowed)

        try:
            self._transaction(work)
        except _Abort as failure:
            return PublishResult(False, str(failure))
        except _TryAgain:
            return PublishResult(False, "Not updating metadata, compare-and-swap failure.")
        return PublishResult(True)

    def used_segments(self, data_source: str | None = None) -> list[DataSegment]:
        """All used segments (optionally of one data source), in segment id order."""
        table = tables.segments
        query = select(table.c.payload).where(table.c.used.is_(True))
        if data_source is not None:
            query = query.where(table.c.dataSource == data_source)
        with self._reader.connect() as conn:
            found = [DataSegment.from_payload(_load(payload)) for payload in conn.scalars(query)]
        return sorted(found, key=lambda segment: segment.id)

    def committed_state(self) -> CommittedState:
        """The used segments and the committed stream offsets, read in one transaction. SQLite's read transaction
        sees one snapshot (WAL); PostgreSQL's default READ COMMITTED gives each statement its own, so a publish
        could land between the two reads there: REPEATABLE READ keeps the first statement's snapshot."""
        segments, offsets = tables.segments, tables.data_source
        with self._reader.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            used = [DataSegment.from_payload(_load(payload))
                    for payload in conn.scalars(select(segments.c.payload).where(segments.c.used.is_(True)))]
            committed = {row.dataSource: StreamOffsets.from_payload(_load(row.commit_metadata_payload))
                         for row in conn.execute(select(offsets.c.dataSource, offsets.c.commit_metadata_payload))}
        return CommittedState(sorted(used, key=lambda segment: segment.id), committed)

    def max_segment_version(self, data_source: str, interval: Interval) -> str | None:
        """The highest version of the used segments overlapping `interval`: a new time-chunk lock's version
        must be above it, so what the lock's task writes overshadows them."""
        table = tables.segments
        query = select(func.max(table.c.version)).where(
            table.c.dataSource == data_source, table.c.used.is_(True),
            table.c.start < format_timestamp(interval.end), table.c.end > format_timestamp(interval.start))
        with self._reader.connect() as conn:
            return conn.scalar(query)

    def data_sources(self) -> list[str]:
        """Data sources that have used segments."""
        table = tables.segments
        query = select(table.c.dataSource).where(table.c.used.is_(True)).distinct().order_by(table.c.dataSource)
        with self._reader.connect() as conn:
            return list(conn.scalars(query))

    # -- config (druid_config) ---------------------------------------------------------------

    def get_config(self, name: str) -> dict[str, Any] | None:
        with self._reader.connect() as conn:
            payload = conn.scalar(select(tables.config.c.payload).where(tables.config.c.name == name))
        return None if payload is None else _load(payload)

    def update_config(self, name: str, change: Callable[[dict[str, Any] | None], dict[str, Any]],
                      audit: AuditInfo | None = None) -> dict[str, Any]:
        """Replace a config document with `change(current)`, as one compare-and-swap (retried when another node
        changed it in between), and return what was written; with `audit`, its audit entry goes in the same
        transaction. `change` may raise to leave the document as it is."""

        def work(conn: Connection) -> dict[str, Any]:
            table = tables.config
            old = conn.scalar(select(table.c.payload).where(table.c.name == name))
            new = change(None if old is None else _load(old))
            if old is None:
                conn.execute(insert(table).values(name=name, payload=_dump(new)))
            elif conn.execute(update(table).where(table.c.name == name, table.c.payload == old)
                              .values(payload=_dump(new))).rowcount != 1:
                raise _TryAgain()
            if audit is not None:
                conn.execute(insert(tables.audit).values(
                    audit_key=name, type=name, author=audit.author, comment=audit.comment, ip=audit.ip,
                    created_date=_now(), payload=_dump(new)))
            return new

        return self._transaction(work)

    # -- retention rules (druid_rules, druid_audit) -------------------------------------------

    def rules(self) -> dict[str, list[dict[str, Any]]]:
        """The rules in force: the newest version of each data source's (and `_default`'s)."""
        table = tables.rules
        with self._reader.connect() as conn:
            rows = conn.execute(select(table.c.dataSource, table.c.payload).order_by(table.c.version)).all()
        return {row.dataSource: json.loads(row.payload) for row in rows}

    def set_rules(self, data_source: str, rules: list[dict[str, Any]], author: str, comment: str,
                  ip: str | None) -> None:
        """A new version of the data source's rules, and its audit entry, in one transaction."""
        def work(conn: Connection) -> None:
            version = _now()
            payload = json.dumps(rules, separators=(",", ":")).encode()
            conn.execute(insert(tables.rules).values(id=f"{data_source}_{version}", dataSource=data_source,
                                                     version=version, payload=payload))
            conn.execute(insert(tables.audit).values(audit_key=data_source, type="rules", author=author,
                                                     comment=comment, created_date=version, payload=payload, ip=ip))

        self._transaction(work)

    def rules_history(self, data_source: str | None = None, count: int | None = None) -> list[dict[str, Any]]:
        """Druid's AuditEntry of each change of rules, newest first."""
        table = tables.audit
        query = select(table).where(table.c.type == "rules").order_by(table.c.created_date.desc(), table.c.id.desc())
        if data_source is not None:
            query = query.where(table.c.audit_key == data_source)
        if count is not None:
            query = query.limit(count)
        with self._reader.connect() as conn:
            rows = conn.execute(query).all()
        return [{"key": row.audit_key, "type": row.type,
                 "auditInfo": {"author": row.author, "comment": row.comment, "ip": row.ip},
                 "payload": row.payload.decode(), "auditTime": row.created_date} for row in rows]

    # -- supervisors -------------------------------------------------------------------------

    def insert_supervisor(self, spec_id: str, payload: dict[str, Any]) -> None:
        """Append a version of a supervisor spec (submit, update, suspend or resume)."""
        with self._engine.begin() as conn:
            conn.execute(
                insert(tables.supervisors).values(spec_id=spec_id, created_date=_now(), payload=_dump(payload))
            )

    def terminate_supervisor(self, spec_id: str, data_sources: Sequence[str] = ()) -> None:
        """Append the tombstone that keeps a terminated supervisor from being started again."""
        tombstone = {"type": TOMBSTONE_TYPE, "id": spec_id, "dataSources": list(data_sources), "suspended": False}
        self.insert_supervisor(spec_id, tombstone)

    def active_supervisors(self) -> dict[str, dict[str, Any]]:
        """The latest spec of every supervisor whose latest row is not a tombstone."""
        table = tables.supervisors
        latest = select(func.max(table.c.id)).group_by(table.c.spec_id)
        query = select(table.c.spec_id, table.c.payload).where(table.c.id.in_(latest)).order_by(table.c.spec_id)
        with self._reader.connect() as conn:
            specs = {row.spec_id: _load(row.payload) for row in conn.execute(query)}
        return {spec_id: spec for spec_id, spec in specs.items() if spec.get("type") != TOMBSTONE_TYPE}

    def supervisor_history(self, spec_id: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """Druid's history shape: ``{specId: [{"spec": ..., "version": created_date}, ...]}``, newest first."""
        table = tables.supervisors
        query = select(table.c.spec_id, table.c.created_date, table.c.payload).order_by(table.c.id.desc())
        if spec_id is not None:
            query = query.where(table.c.spec_id == spec_id)
        history: dict[str, list[dict[str, Any]]] = {}
        with self._reader.connect() as conn:
            for row in conn.execute(query):
                history.setdefault(row.spec_id, []).append({"spec": _load(row.payload), "version": row.created_date})
        return history

    # -- tasks -------------------------------------------------------------------------------

    def insert_task(
        self,
        task_id: str,
        data_source: str,
        task_type: str,
        group_id: str,
        payload: dict[str, Any],
        status: dict[str, Any],
    ) -> None:
        """Record a new task; it is active while its status is ``RUNNING`` (Druid's isRunnable)."""
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    insert(tables.tasks).values(
                        id=task_id,
                        created_date=_now(),
                        datasource=data_source,
                        payload=_dump(payload),
                        status_payload=_dump(status),
                        active=status.get("status") == "RUNNING",
                        type=task_type,
                        group_id=group_id,
                    )
                )
        except IntegrityError as error:
            raise EntryExistsError(f"Task [{task_id}] already exists") from error

    def set_task_status(self, task_id: str, status: dict[str, Any], active: bool) -> bool:
        """Update an active task's status; False if the task is unknown or already finished.

        A finished task is never resurrected: a late status report from a lost worker must not
        overwrite the final status.
        """
        table = tables.tasks
        with self._engine.begin() as conn:
            result = conn.execute(
                update(table)
                .where(table.c.id == task_id, table.c.active.is_(True))
                .values(status_payload=_dump(status), active=active)
            )
            return result.rowcount == 1

    def get_task(self, task_id: str) -> TaskRecord | None:
        with self._reader.connect() as conn:
            row = conn.execute(select(tables.tasks).where(tables.tasks.c.id == task_id)).first()
        return None if row is None else _task_record(row)

    def list_tasks(self, active: bool | None = None, data_source: str | None = None) -> list[TaskRecord]:
        """Tasks in creation order, optionally only active (or finished) ones, of one data source."""
        table = tables.tasks
        query = select(table).order_by(table.c.created_date, table.c.id)
        if active is not None:
            query = query.where(table.c.active.is_(active))
        if data_source is not None:
            query = query.where(table.c.datasource == data_source)
        with self._reader.connect() as conn:
            return [_task_record(row) for row in conn.execute(query)]

    # -- task locks --------------------------------------------------------------------------

    def add_lock(self, task_id: str, payload: dict[str, Any]) -> int:
        with self._engine.begin() as conn:
            result = conn.execute(insert(tables.task_locks).values(task_id=task_id, lock_payload=_dump(payload)))
            return int(result.inserted_primary_key[0])

    def remove_lock(self, lock_id: int) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(tables.task_locks).where(tables.task_locks.c.id == lock_id))

    def locks_of_active_tasks(self) -> dict[str, list[tuple[int, dict[str, Any]]]]:
        """Task id → (lock id, TaskLock JSON) of every task still active, for the lockbox's sync at start."""
        locks, tasks = tables.task_locks, tables.tasks
        query = (select(locks.c.id, locks.c.task_id, locks.c.lock_payload)
                 .join(tasks, tasks.c.id == locks.c.task_id).where(tasks.c.active.is_(True)).order_by(locks.c.id))
        found: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        with self._reader.connect() as conn:
            for row in conn.execute(query):
                found.setdefault(row.task_id, []).append((row.id, _load(row.lock_payload)))
        return found

    # -- announcements -----------------------------------------------------------------------

    def announce(self, role: str, host: str, port: int, payload: dict[str, Any]) -> None:
        """Insert or refresh a node's announcement; called again every heartbeat."""
        table = tables.announcements
        node_id = f"{role}:{host}:{port}"
        values = {"role": role, "host": host, "port": port, "payload": _dump(payload), "heartbeat": _now_millis()}
        with self._engine.begin() as conn:
            if conn.execute(update(table).where(table.c.id == node_id).values(**values)).rowcount == 0:
                conn.execute(insert(table).values(id=node_id, **values))

    def unannounce(self, role: str, host: str, port: int) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(tables.announcements).where(tables.announcements.c.id == f"{role}:{host}:{port}"))

    def announcements(self, role: str, max_age_ms: int) -> list[Announcement]:
        """The nodes of a role whose last heartbeat is at most `max_age_ms` old."""
        table = tables.announcements
        query = (select(table).where(table.c.role == role, table.c.heartbeat >= _now_millis() - max_age_ms)
                 .order_by(table.c.id))
        with self._reader.connect() as conn:
            return [Announcement(row.role, row.host, row.port, _load(row.payload), row.heartbeat)
                    for row in conn.execute(query)]

    # -- segment management: used / unused, and kill (the coordinator's data-management API) -

    def has_segments(self, data_source: str) -> bool:
        """Whether any segment of the data source is stored, used or not: Druid answers a mark request for a data
        source it does not know with 204."""
        table = tables.segments
        with self._reader.connect() as conn:
            return conn.scalar(select(table.c.id).where(table.c.dataSource == data_source).limit(1)) is not None

    def segments_by_id(self, data_source: str, segment_ids: Sequence[str]) -> dict[str, tuple[DataSegment, bool]]:
        """The stored segments of these ids, used or not, with their `used` flag; unknown ids are left out."""
        table = tables.segments
        found: dict[str, tuple[DataSegment, bool]] = {}
        with self._reader.connect() as conn:
            for chunk in _chunked(list(dict.fromkeys(segment_ids))):
                query = select(table.c.id, table.c.payload, table.c.used).where(
                    table.c.dataSource == data_source, table.c.id.in_(chunk))
                for row in conn.execute(query):
                    found[row.id] = (DataSegment.from_payload(_load(row.payload)), bool(row.used))
        return found

    def mark_segments_unused(self, data_source: str, interval: Interval | None = None,
                             segment_ids: Sequence[str] | None = None, versions: Sequence[str] | None = None) -> int:
        """Mark used segments unused, those wholly inside `interval` (of `versions`, when given) or those of
        `segment_ids`; the number changed. A segment only partly inside the interval stays used (Druid's rule), so
        a request never hides part of a segment's rows."""
        table = tables.segments
        condition = _segment_filter(data_source, interval, segment_ids, versions)
        with self._engine.begin() as conn:
            result = conn.execute(update(table).where(table.c.used.is_(True), condition)
                                  .values(used=False, used_status_last_updated=_now()))
            return result.rowcount

    def mark_segments_used(self, data_source: str, interval: Interval | None = None,
                           segment_ids: Sequence[str] | None = None, versions: Sequence[str] | None = None) -> int:
        """Mark unused segments used, those wholly inside `interval` (of `versions`) or those of `segment_ids`,
        except the ones that would be overshadowed (Druid's markAsUsedNonOvershadowedSegments): by the used
        segments, or by a newer version among the ones being marked. So marking an interval used again after a
        compaction brings back the compacted segments, not the versions they replaced."""
        table = tables.segments

        def work(conn: Connection) -> int:
            condition = _segment_filter(data_source, interval, segment_ids, versions)
            candidates = [DataSegment.from_payload(_load(payload)) for payload in
                          conn.scalars(select(table.c.payload).where(table.c.used.is_(False), condition))]
            if not candidates:
                return 0
            start = min(c.interval.start for c in candidates)
            end = max(c.interval.end for c in candidates)
            used = [DataSegment.from_payload(_load(payload)) for payload in conn.scalars(
                select(table.c.payload).where(table.c.dataSource == data_source, table.c.used.is_(True),
                                              table.c.start < format_timestamp(end),
                                              table.c.end > format_timestamp(start)))]
            overshadowed = VersionedIntervalTimeline.from_segments([*used, *candidates]).find_fully_overshadowed()
            ids = [str(c.id) for c in candidates if c.id not in overshadowed]
            changed = 0
            for chunk in _chunked(ids):
                changed += conn.execute(update(table).where(table.c.id.in_(chunk), table.c.used.is_(False))
                                        .values(used=True, used_status_last_updated=_now())).rowcount
            return changed

        return self._transaction(work)

    def set_segment_used(self, data_source: str, segment_id: str, used: bool) -> bool:
        """Mark one segment used or unused as asked, without looking at what overshadows it (Druid's single-segment
        endpoints); True if its state changed."""
        table = tables.segments
        with self._engine.begin() as conn:
            result = conn.execute(
                update(table).where(table.c.dataSource == data_source, table.c.id == segment_id,
                                    table.c.used.is_(not used))
                .values(used=used, used_status_last_updated=_now()))
            return result.rowcount == 1

    def unused_segments(self, data_source: str, interval: Interval, versions: Sequence[str] | None = None,
                        limit: int | None = None, marked_unused_by: datetime | None = None) -> list[DataSegment]:
        """Unused segments wholly inside `interval` (of `versions`, when given; marked unused at or before
        `marked_unused_by`, when given), in segment id order, at most `limit` (Druid's RetrieveUnusedSegmentsAction):
        what a kill task may delete."""
        table = tables.segments
        condition = _segment_filter(data_source, interval, None, versions)
        if marked_unused_by is not None:
            condition = condition & (table.c.used_status_last_updated <= format_timestamp(marked_unused_by))
        query = (select(table.c.payload)
                 .where(table.c.used.is_(False), condition)
                 .order_by(table.c.start, table.c.end, table.c.version, table.c.id))
        if limit is not None:
            query = query.limit(limit)
        with self._reader.connect() as conn:
            found = [DataSegment.from_payload(_load(payload)) for payload in conn.scalars(query)]
        return sorted(found, key=lambda segment: segment.id)

    def killable_intervals(self, ends_by: datetime, marked_unused_by: datetime) -> dict[str, Interval]:
        """Per data source, the interval spanning its unused segments that end by `ends_by` and were marked unused
        by `marked_unused_by` (what Druid's kill duty gives a kill task)."""
        table = tables.segments
        query = (select(table.c.dataSource, func.min(table.c.start), func.max(table.c.end))
                 .where(table.c.used.is_(False), table.c.end <= format_timestamp(ends_by),
                        table.c.used_status_last_updated <= format_timestamp(marked_unused_by))
                 .group_by(table.c.dataSource))
        with self._reader.connect() as conn:
            rows = conn.execute(query).all()
        return {source: Interval(parse_timestamp(start), parse_timestamp(end)) for source, start, end in rows}

    def delete_unused_segments(self, data_source: str, segment_ids: Sequence[str]) -> int:
        """Delete the rows of these segments (Druid's SegmentNukeAction), only while they are unused: a segment
        marked used again in the meantime may be queried, so its row and file must stay. The number deleted."""
        table = tables.segments
        deleted = 0
        with self._engine.begin() as conn:
            for chunk in _chunked(list(segment_ids)):
                deleted += conn.execute(delete(table).where(table.c.dataSource == data_source,
                                                            table.c.id.in_(chunk), table.c.used.is_(False))).rowcount
        return deleted

    def segment_load_specs(self) -> list[dict[str, Any]]:
        """The loadSpec of every segment, used or not: the files deep storage must keep."""
        with self._reader.connect() as conn:
            return [_load(payload).get("loadSpec") or {} for payload in conn.scalars(select(tables.segments.c.payload))]

    def delete_pending_segments_created_before(self, data_source: str, before: datetime) -> int:
        """Pending segments of the data source allocated before `before` (Druid's KillStalePendingSegments)."""
        pending = tables.pending_segments
        with self._engine.begin() as conn:
            return conn.execute(delete(pending).where(
                pending.c.dataSource == data_source, pending.c.created_date < format_timestamp(before))).rowcount

    def pending_segment_data_sources(self) -> list[str]:
        pending = tables.pending_segments
        with self._reader.connect() as conn:
            return list(conn.scalars(select(pending.c.dataSource).distinct().order_by(pending.c.dataSource)))

    def delete_pending_segments(self, data_source: str, interval: Interval) -> int:
        """Delete the pending segments (ids allocated and never published) wholly inside `interval`. Only call
        it under an exclusive lock of the interval: then no task that allocated them can still publish them."""
        pending = tables.pending_segments
        with self._engine.begin() as conn:
            return conn.execute(delete(pending).where(
                pending.c.dataSource == data_source, pending.c.start >= format_timestamp(interval.start),
                pending.c.end <= format_timestamp(interval.end))).rowcount

    # -- leadership (sluice_leader_leases) ----------------------------------------------------

    def lease(self, role: str) -> Lease | None:
        table = tables.leader_leases
        with self._reader.connect() as conn:
            row = conn.execute(select(table).where(table.c.role == role)).first()
        return None if row is None else Lease(row.leader, row.epoch, row.expires)

    def claim_lease(self, role: str, decide: Callable[[Lease | None], Lease | None]) -> Lease | None:
        """Write `decide(current lease)` (None: write nothing) as one compare-and-swap; the lease in force after.
        Not fenced: this is how a lease is won and kept."""
        table = tables.leader_leases

        def work(conn: Connection) -> Lease | None:
            row = conn.execute(select(table).where(table.c.role == role).with_for_update()).first()
            current = None if row is None else Lease(row.leader, row.epoch, row.expires)
            new = decide(current)
            if new is None:
                return current
            values = {"leader": new.leader, "epoch": new.epoch, "expires": new.expires}
            if current is None:
                conn.execute(insert(table).values(role=role, **values))
            elif conn.execute(update(table).where(table.c.role == role, table.c.epoch == current.epoch,
                                                  table.c.leader == current.leader).values(**values)).rowcount != 1:
                raise _TryAgain()
            return new

        return self._transaction(work, fenced=False)

    def fence(self, role: str, leader: str, epoch: int) -> None:
        """From now on, this store's compare-and-swap writes (publishes, allocations, offsets, config) happen only
        while `leader` still holds the role's lease at `epoch`; NotLeader otherwise."""
        self._fence = (role, leader, epoch)

    def _check_fence(self, conn: Connection) -> None:
        if self._fence is None:
            return
        role, leader, epoch = self._fence
        table = tables.leader_leases
        # FOR SHARE: a successor's claim of the lease waits until this write has committed, or it commits first and
        # this write finds the lease taken; either way no write of the old term lands after the new term began
        row = conn.execute(select(table.c.leader, table.c.epoch).where(table.c.role == role)
                           .with_for_update(read=True)).first()
        if row is None or (row.leader, row.epoch) != (leader, epoch):
            holder = "nobody" if row is None else f"{row.leader} (epoch {row.epoch})"
            raise NotLeader(f"{leader} is no longer the {role} leader (epoch {epoch}): {holder} holds the lease")

    # -- plumbing ----------------------------------------------------------------------------

    def _transaction(self, work: Callable[[Connection], T], fenced: bool = True) -> T:
        """Run ``work`` in one write transaction, retried whole when it lost a race.

        A race shows up as `_TryAgain` (a compare-and-swap that updated no row) or as a duplicate
        key (two writers inserting the same offsets row or segment id on PostgreSQL). Each retry
        starts a fresh transaction that re-reads everything, so nothing of a lost attempt survives.
        """
        def attempt() -> T:
            with self._engine.begin() as conn:
                if fenced:
                    self._check_fence(conn)
                return work(conn)

        return Retrying(retry=retry_if_exception_type((_TryAgain, IntegrityError)), stop=stop_after_attempt(_MAX_TRIES),
                        wait=wait_random_exponential(multiplier=_BACKOFF_SECONDS, max=1.0), reraise=True)(attempt)


def _compare_and_swap_offsets(conn: Connection, data_source: str, start: StreamOffsets, end: StreamOffsets) -> None:
    """Druid's ``updateDataSourceMetadataWithHandle``: the exactly-once gate of a publish."""
    stored = _read_commit_metadata(conn, data_source)
    if stored is None:
        _insert_commit_metadata(conn, data_source, end)
        return
    current, sha1 = stored
    if not start.matches(current):
        raise _Abort(
            f"Inconsistency between stored metadata state[{current}] and target state[{start}]. "
            "Try resetting the supervisor."
        )
    _swap_commit_metadata(conn, data_source, sha1, current.plus(end))


def _read_commit_metadata(conn: Connection, data_source: str) -> tuple[StreamOffsets, str] | None:
    table = tables.data_source
    row = conn.execute(
        select(table.c.commit_metadata_payload, table.c.commit_metadata_sha1).where(table.c.dataSource == data_source)
    ).first()
    if row is None:
        return None
    return StreamOffsets.from_payload(_load(row.commit_metadata_payload)), row.commit_metadata_sha1


def _insert_commit_metadata(conn: Connection, data_source: str, offsets: StreamOffsets) -> None:
    payload = _dump(offsets.to_payload())
    conn.execute(
        insert(tables.data_source).values(
            dataSource=data_source,
            created_date=_now(),
            commit_metadata_payload=payload,
            commit_metadata_sha1=_sha1_hex(payload),
        )
    )


def _swap_commit_metadata(conn: Connection, data_source: str, old_sha1: str, offsets: StreamOffsets) -> None:
    """Replace the stored offsets only if they are still the ones read (their SHA-1 unchanged)."""
    table = tables.data_source
    payload = _dump(offsets.to_payload())
    result = conn.execute(
        update(table)
        .where(table.c.dataSource == data_source, table.c.commit_metadata_sha1 == old_sha1)
        .values(commit_metadata_payload=payload, commit_metadata_sha1=_sha1_hex(payload))
    )
    if result.rowcount != 1:
        raise _TryAgain("Not updating metadata, compare-and-swap failure.")


def _insert_segments(conn: Connection, segments: Sequence[DataSegment], overshadowed: set[SegmentId]) -> None:
    """Insert the segments whose id is not stored yet (a retried or replica publish)."""
    if not segments:
        return
    table = tables.segments
    ids = [str(segment.id) for segment in segments]
    existing = set(conn.scalars(select(table.c.id).where(table.c.id.in_(ids))))
    now = _now()
    rows = [
        {
            "id": str(segment.id),
            "dataSource": segment.data_source,
            "created_date": now,
            "start": format_timestamp(segment.interval.start),
            "end": format_timestamp(segment.interval.end),
            "partitioned": segment.shard_spec.get("type") != "none",
            "version": segment.version,
            "used": segment.id not in overshadowed,
            "payload": _dump(segment.to_payload()),
            "used_status_last_updated": now,
            "num_rows": segment.num_rows,
        }
        for segment in segments
        if str(segment.id) not in existing
    ]
    if rows:
        conn.execute(insert(table), rows)


def _next_segment_id(conn: Connection, data_source: str, interval: Interval, lock_version: str) -> SegmentId:
    """The id a new segment of ``interval`` gets: next partition of the chunk's current version.

    Druid refuses (and so do we) when used segments of another interval overlap the requested
    one — one segment cannot extend two chunks — and when the chunk already has a version newer
    than the lock, which means the chunk was overwritten after this task took its lock.
    """
    table = tables.segments
    rows = conn.scalars(
        select(table.c.payload).where(
            table.c.dataSource == data_source,
            table.c.used.is_(True),
            table.c.start < format_timestamp(interval.end),
            table.c.end > format_timestamp(interval.start),
        )
    )
    visible = VersionedIntervalTimeline.from_segments(
        DataSegment.from_payload(_load(payload)) for payload in rows
    ).lookup_with_incomplete_partitions(interval)
    for holder in visible:
        if holder.true_interval != interval:
            raise SegmentAllocationError(
                f"Cannot allocate a segment of data source [{data_source}] for interval [{interval}]: "
                f"used segments of interval [{holder.true_interval}] (version [{holder.version}]) overlap it"
            )
    pending = tables.pending_segments
    pending_payloads = conn.scalars(
        select(pending.c.payload).where(
            pending.c.dataSource == data_source,
            pending.c.start == format_timestamp(interval.start),
            pending.c.end == format_timestamp(interval.end),
        )
    )
    taken = [segment.id for holder in visible for segment in holder.segments]
    taken += [_pending_segment_id(payload) for payload in pending_payloads]
    if not taken:
        return SegmentId(data_source, interval, lock_version, 0)
    version, partition_num = max((segment_id.version, segment_id.partition_num) for segment_id in taken)
    if version > lock_version:
        raise SegmentAllocationError(
            f"Cannot allocate a segment of data source [{data_source}] for interval [{interval}]: "
            f"the time chunk already has version [{version}], newer than the lock version [{lock_version}]"
        )
    return SegmentId(data_source, interval, version, partition_num + 1)


def _pending_segment_id(payload: bytes) -> SegmentId:
    document = _load(payload)
    return SegmentId(
        data_source=document["dataSource"],
        interval=Interval.parse(document["interval"]),
        version=document["version"],
        partition_num=int(document["shardSpec"]["partitionNum"]),
    )


def _task_record(row: Any) -> TaskRecord:
    return TaskRecord(
        id=row.id,
        data_source=row.datasource,
        task_type=row.type,
        group_id=row.group_id,
        created_date=row.created_date,
        payload=_load(row.payload),
        status=_load(row.status_payload),
        active=bool(row.active),
    )


def _create_engine(uri: str) -> Engine:
    """An engine for ``sqlite:///path`` or ``postgresql+psycopg://...``.

    SQLite gets the known SQLAlchemy + pysqlite recipe for concurrent writers: WAL (readers never
    block the writer), a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions. A deferred
    transaction that reads and then writes would have to upgrade its lock, and SQLite answers a
    contended upgrade with an immediate "database is locked" instead of waiting; taking the write
    lock at BEGIN makes concurrent publishes from threads queue up instead of failing.
    """
    url = make_url(uri)
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if not url.database or url.database == ":memory:":
        raise ValueError(f"metadata store {uri!r}: SQLite needs a file (sqlite:///path/to/metadata.db)")
    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_SECONDS})
    event.listen(engine, "connect", _configure_sqlite_connection)
    event.listen(engine, "begin", _begin_sqlite_transaction)
    return engine


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    # Stop pysqlite from issuing its own (deferred, lazy) BEGIN; _begin_sqlite_transaction does.
    dbapi_connection.isolation_level = None
    dbapi_connection.execute(f"PRAGMA busy_timeout={int(_SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
    # Switching a file to WAL takes an exclusive lock, and SQLite answers a contended switch with an immediate
    # "database is locked", busy timeout or not: processes starting together on a new store meet that.
    Retrying(retry=retry_if_exception(_is_locked), stop=stop_after_delay(_SQLITE_BUSY_TIMEOUT_SECONDS),
             wait=wait_random_exponential(multiplier=0.01, max=0.5), reraise=True)(
        dbapi_connection.execute, "PRAGMA journal_mode=WAL")


def _is_locked(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "database is locked" in str(error)


def _begin_sqlite_transaction(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(_READ_ONLY) else "BEGIN IMMEDIATE")


def _now_millis() -> int:
    return int(time.time() * 1000)


def _now() -> str:
    return format_timestamp(datetime.now(timezone.utc))


def _dump(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _load(payload: bytes) -> dict[str, Any]:
    return json.loads(payload)


def _sha1_hex(data: bytes) -> str:
    """Upper-case hex SHA-1, as Druid's ``BaseEncoding.base16()`` writes it."""
    return hashlib.sha1(data).hexdigest().upper()


# SQLite allows at most 999 bound parameters in older builds; lists of ids are sent in chunks below that.
_IN_CHUNK = 500


def _chunked(values: list[str]) -> list[list[str]]:
    return [values[i:i + _IN_CHUNK] for i in range(0, len(values), _IN_CHUNK)] or [[]]


def _segment_filter(data_source: str, interval: Interval | None, segment_ids: Sequence[str] | None,
                    versions: Sequence[str] | None) -> Any:
    """The segments of a data-management request: wholly inside `interval`, or with one of `segment_ids`."""
    table = tables.segments
    condition = table.c.dataSource == data_source
    if interval is not None:
        condition = condition & (table.c.start >= format_timestamp(interval.start)) & (
            table.c.end <= format_timestamp(interval.end))
    if segment_ids is not None:
        condition = condition & table.c.id.in_(list(segment_ids))
    if versions is not None:
        condition = condition & table.c.version.in_(list(versions))
    return condition
