"""Druid's automatic compaction (the coordinator's CompactSegments duty): each data source with a compaction config
gets `compact` tasks, newest time chunk first, for the chunks that appends left in pieces, while the newest data stays
alone (`skipOffsetFromLatest`, P1D) so that compaction never takes a chunk a stream still writes.

The parts, in order of flow:

- the configs, with Druid's names and defaults: `DataSourceCompactionConfig` per data source and the cluster's
  `DruidCompactionConfig` (task slots, policy), stored as one document under Druid's key
  `coordinator.compaction.config` in `druid_config`, each change audited in `druid_audit`;
- the policy, pure (Druid's NewestSegmentFirstPolicy): `find_segments_to_compact` over a data source's used segments,
  and `compaction_task_slots`;
- the duty `AutoCompaction`, which reads the configs, the segments and the active tasks, submits the tasks and keeps
  each data source's `AutoCompactionSnapshot` for the status API.

When a chunk needs compaction. Druid compares each segment's `lastCompactionState` with the config; Sluice's segments
do not record one (DataSegment has no such field), so a time chunk needs compaction when
  1. a `granularitySpec.segmentGranularity` is configured and its segments are not exactly one bucket of it, or
  2. its visible segments are of several intervals or versions, or
  3. it has more than one segment and some were appended (partition numbers at or past the chunk's core partitions:
     every streaming append, every `appendToExisting` batch).
A chunk that one overwrite wrote (a batch `REPLACE` or a compaction), however many core partitions it has, counts as
compacted: that is what the compaction itself leaves, so a chunk is never compacted again and again. What this misses
is a change of the config's other fields (dimensions, metrics, rollup, partitioning) for chunks already compacted:
they are compacted again only when new appends arrive, or by a manual `compact` task.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import Field, ValidationError, field_validator
from sqlalchemy import select

from sluice.ids import DataSourceName
from sluice.metadata import tables
from sluice.metadata.store import AuditInfo, MetadataStore
from sluice.periods import Period
from sluice.segment.segment import ETERNITY, DataSegment, Interval
from sluice.segment.timeline import TimelineObjectHolder, VersionedIntervalTimeline
from sluice.spec.data_schema import AggregatorSpec, DimensionsSpec
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.granularity import Granularity, parse_granularity
from sluice.spec.intervals import parse_interval
from sluice.spec.model import SpecModel
from sluice.task.compact_task import (COMPACTION_PRIORITY, CompactionGranularitySpec, CompactionIntervalSpec,
                                      CompactionTaskSpec, CompactionTransformSpec)
from sluice.task.task import TaskFailure, TaskSpec, random_id_part, task_from_json
from sluice.timestamps import add_period, format_timestamp, to_datetime, to_millis

log = logging.getLogger(__name__)

#: the druid_config row (and audit key) Druid keeps the compaction configs under
CONFIG_KEY = "coordinator.compaction.config"
#: Druid's CompactSegments.TASK_ID_PREFIX
TASK_ID_PREFIX = "coordinator-issued"
MAX_INT = 2**31 - 1
#: Druid's default: effectively no limit (100 TB)
DEFAULT_INPUT_SEGMENT_SIZE_BYTES = 100_000_000_000_000


# -- configs --------------------------------------------------------------------------------------------------------


class UserCompactionIOConfig(SpecModel):
    """Druid's UserCompactionTaskIOConfig: with `dropExisting`, chunks of the interval left without rows get tombstones."""

    drop_existing: bool = False


class DataSourceCompactionConfig(SpecModel):
    """Druid's DataSourceCompactionConfig: only `dataSource` is required. The task fields are those of the `compact`
    task (Sluice's, so what it refuses is refused here); `maxRowsPerSegment` is Druid's deprecated place for the
    dynamic partitionsSpec's bound."""

    data_source: DataSourceName
    task_priority: int = COMPACTION_PRIORITY
    input_segment_size_bytes: int = Field(DEFAULT_INPUT_SEGMENT_SIZE_BYTES, gt=0)
    max_rows_per_segment: int | None = Field(None, ge=1)
    skip_offset_from_latest: str = "P1D"
    tuning_config: dict[str, Any] | None = None
    granularity_spec: CompactionGranularitySpec | None = None
    dimensions_spec: DimensionsSpec | None = None
    metrics_spec: list[AggregatorSpec] | None = None
    transform_spec: CompactionTransformSpec | None = None
    io_config: UserCompactionIOConfig | None = None
    task_context: dict[str, Any] | None = None
    #: Druid's `msq` engine runs compaction as SQL; Sluice runs native `compact` tasks only
    engine: Literal["native"] | None = None

    @field_validator("skip_offset_from_latest")
    @classmethod
    def _period(cls, value: str) -> str:
        if add_period(0, Period.parse(value), None, -1) > 0:
            raise ValueError(f"'{value}' is negative; give a period such as P1D or PT0S")
        return value

    @property
    def skip_offset(self) -> Period:
        return Period.parse(self.skip_offset_from_latest)

    @property
    def segment_granularity(self) -> Granularity | None:
        given = self.granularity_spec.segment_granularity if self.granularity_spec else None
        return None if given is None else parse_granularity(given)

    @property
    def concurrent_locks(self) -> bool:
        """Druid's `useConcurrentLocks`: the task takes a REPLACE lock, which APPEND locks share."""
        return bool((self.task_context or {}).get("useConcurrentLocks"))


class CompactionPolicy(SpecModel):
    """Druid's compaction candidate search policy; `priorityDatasource` is searched before the others."""

    type: Literal["newestSegmentFirst"] = "newestSegmentFirst"
    priority_datasource: str | None = None


class ClusterCompactionConfig(SpecModel):
    """Druid's ClusterCompactionConfig (POST …/config/compaction/cluster): a field left out keeps its value.
    `useAutoScaleSlots` is kept and means nothing here: Sluice has no autoscaler."""

    compaction_task_slot_ratio: float | None = Field(None, ge=0, le=1)
    max_compaction_task_slots: int | None = Field(None, ge=0)
    compaction_policy: CompactionPolicy | None = None
    use_auto_scale_slots: bool | None = None
    engine: Literal["native"] | None = None


class DruidCompactionConfig(SpecModel):
    """Druid's DruidCompactionConfig: the cluster's settings and every data source's config, one stored document."""

    compaction_configs: list[DataSourceCompactionConfig] = Field(default_factory=list)
    compaction_task_slot_ratio: float = Field(0.1, ge=0, le=1)
    max_compaction_task_slots: int = Field(MAX_INT, ge=0)
    compaction_policy: CompactionPolicy = Field(default_factory=CompactionPolicy)
    use_auto_scale_slots: bool = False
    engine: Literal["native"] = "native"

    def find(self, data_source: str) -> DataSourceCompactionConfig | None:
        return next((c for c in self.compaction_configs if c.data_source == data_source), None)

    def with_config(self, config: DataSourceCompactionConfig) -> DruidCompactionConfig:
        others = [c for c in self.compaction_configs if c.data_source != config.data_source]
        return self.model_copy(update={"compaction_configs": [*others, config]})

    def without(self, data_source: str) -> DruidCompactionConfig:
        return self.model_copy(update={"compaction_configs": [c for c in self.compaction_configs
                                                              if c.data_source != data_source]})

    def with_cluster(self, update: ClusterCompactionConfig) -> DruidCompactionConfig:
        return self.model_copy(update={k: v for k, v in dict(update).items() if v is not None})

    def global_config(self) -> dict[str, Any]:
        """What Druid's audit history shows of the cluster's settings next to a data source's config."""
        return {k: v for k, v in self.to_json().items() if k != "compactionConfigs"}


def parse_data_source_config(document: Any) -> DataSourceCompactionConfig:
    """A posted config; SpecError names the field. The task it makes is validated too, so that a config the duty
    could not turn into a task is refused now, not skipped at every period."""
    if not isinstance(document, dict):
        raise SpecError("", "expected a JSON object with at least 'dataSource'")
    try:
        config = DataSourceCompactionConfig.model_validate(document)
    except ValidationError as err:
        raise from_validation_error(err, document) from None
    granularity = config.segment_granularity or parse_granularity("DAY")
    start = granularity.bucket_start(datetime(2000, 1, 1, tzinfo=UTC))
    probe = Interval(start, granularity.bucket_end(start))
    try:
        task_from_json(compaction_task_payload(config, probe, "validation"))
    except TaskFailure as failure:
        raise SpecError("", str(failure)) from None
    return config


def compaction_task_payload(config: DataSourceCompactionConfig, interval: Interval, task_id: str) -> dict[str, Any]:
    """Druid's ClientCompactionTaskQuery: the `compact` task of one interval, made of the config."""
    document = config.to_json()
    tuning = document["tuningConfig"]
    if config.max_rows_per_segment is not None and not (tuning or {}).get("partitionsSpec"):
        tuning = {**(tuning or {}), "partitionsSpec": {"type": "dynamic",
                                                       "maxRowsPerSegment": config.max_rows_per_segment}}
    payload: dict[str, Any] = {
        "type": "compact", "id": task_id, "dataSource": config.data_source,
        "ioConfig": {"type": "compact", "inputSpec": {"type": "interval", "interval": str(interval)},
                     "dropExisting": config.io_config.drop_existing if config.io_config else False},
        "context": {**(config.task_context or {}), "priority": config.task_priority}}
    for key in ("granularitySpec", "dimensionsSpec", "metricsSpec", "transformSpec"):
        if document[key] is not None:
            payload[key] = document[key]
    if tuning is not None:
        payload["tuningConfig"] = tuning
    return payload


def new_compaction_task_id(data_source: str, interval: Interval, now: datetime) -> str:
    """Druid's IdUtils.newTaskId with the coordinator's prefix and the interval, as the kill duty's ids are:
    coordinator-issued_compact_<dataSource>_<random>_<start>_<end>_<now>."""
    return "_".join([TASK_ID_PREFIX, "compact", data_source, random_id_part(), format_timestamp(interval.start),
                     format_timestamp(interval.end), format_timestamp(now)])


# -- the policy (pure) ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionStatistics:
    """Druid's CompactionStatistics: bytes, segments and time chunks."""

    bytes: int = 0
    segments: int = 0
    intervals: int = 0

    def __add__(self, other: CompactionStatistics) -> CompactionStatistics:
        return CompactionStatistics(self.bytes + other.bytes, self.segments + other.segments,
                                    self.intervals + other.intervals)

    @classmethod
    def of(cls, chunks: Iterable[CompactionCandidate]) -> CompactionStatistics:
        return sum((CompactionStatistics(c.bytes, len(c.segments), 1) for c in chunks), cls())


@dataclass(frozen=True)
class CompactionCandidate:
    """A time chunk (or, with a configured segment granularity, a bucket of it) and its visible segments: what one
    `compact` task rewrites."""

    interval: Interval
    segments: tuple[DataSegment, ...]
    #: why it needs compaction; None when it is compacted already
    reason: str | None = None

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.segments)


@dataclass(frozen=True)
class CompactionSearch:
    """What the policy found in one data source: the chunks to compact, newest first, and the others."""

    to_compact: list[CompactionCandidate] = field(default_factory=list)
    compacted: list[CompactionCandidate] = field(default_factory=list)
    skipped: list[CompactionCandidate] = field(default_factory=list)


def find_segments_to_compact(segments: Sequence[DataSegment], config: DataSourceCompactionConfig,
                             busy: Sequence[Interval] = ()) -> CompactionSearch:
    """Druid's NewestSegmentFirstPolicy over one data source's used segments. Skipped: every chunk that overlaps
    [latest segment end − skipOffsetFromLatest, latest end) (its start floored to the configured segment granularity),
    or a `busy` interval (locked by a task that compaction must not revoke, or being compacted), or whose segments
    weigh more than inputSegmentSizeBytes. Chunks without bytes (tombstones only) are left out, as Druid does."""
    holders = VersionedIntervalTimeline.from_segments(segments).lookup(ETERNITY)
    if not holders:
        return CompactionSearch()
    granularity = config.segment_granularity
    chunks = [c for c in _chunks(holders, granularity) if c.bytes > 0]
    if any(c.interval.start <= ETERNITY.start or c.interval.end >= ETERNITY.end for c in chunks):
        return CompactionSearch(skipped=chunks)  # Druid cannot compact ETERNITY (segmentGranularity ALL)
    latest = holders[-1].interval.end
    skip_start = to_datetime(add_period(to_millis(latest), config.skip_offset, None, -1))
    if granularity is not None:
        skip_start = granularity.bucket_start(skip_start)
    skip = [Interval(min(skip_start, latest), latest), *busy]
    found = CompactionSearch()
    for chunk in sorted(chunks, key=lambda c: c.interval, reverse=True):
        if any(chunk.interval.overlaps(s) for s in skip):
            found.skipped.append(chunk)
        elif (reason := compaction_reason(chunk.interval, chunk.segments, granularity)) is None:
            found.compacted.append(chunk)
        elif chunk.bytes > config.input_segment_size_bytes:
            found.skipped.append(chunk)
        else:
            found.to_compact.append(CompactionCandidate(chunk.interval, chunk.segments, reason))
    return found


def compaction_reason(interval: Interval, segments: Sequence[DataSegment], granularity: Granularity | None) -> str | None:
    """Why these visible segments of one chunk need compacting (see the module docstring); None if they need not."""
    intervals = sorted({s.interval for s in segments})
    if granularity is not None and (intervals != [interval] or granularity.bucket_start(interval.start) != interval.start
                                    or granularity.bucket_end(interval.start) != interval.end):
        return f"segments of {', '.join(map(str, intervals))} are not in {granularity} segments"
    if len(intervals) > 1:
        return f"segments of {', '.join(map(str, intervals))} overlap"
    if len({s.version for s in segments}) > 1:
        return f"segments of {len({s.version for s in segments})} versions"
    core = max(s.core_partitions for s in segments)
    appended = [s for s in segments if s.id.partition_num >= core]
    if len(segments) > 1 and appended:
        return f"{len(segments)} segments, {len(appended)} of them appended"
    return None


def _chunks(holders: Sequence[TimelineObjectHolder], granularity: Granularity | None) -> list[CompactionCandidate]:
    """The visible segments grouped by the interval one task compacts: their own (or, configured, the granularity's
    buckets covering it), overlapping ones joined, so that a task never rewrites part of a segment."""
    spans: list[tuple[Interval, DataSegment]] = []
    for segment in {s.id: s for holder in holders for s in holder.segments}.values():
        span = segment.interval
        if granularity is not None:
            end = granularity.bucket_start(span.end)
            span = Interval(granularity.bucket_start(span.start), end if end == span.end else granularity.bucket_end(end))
        spans.append((span, segment))
    chunks: list[tuple[Interval, list[DataSegment]]] = []
    for span, segment in sorted(spans, key=lambda s: (s[0], s[1].id)):
        if chunks and chunks[-1][0].overlaps(span):
            union, members = chunks[-1]
            chunks[-1] = (Interval(union.start, max(union.end, span.end)), [*members, segment])
        else:
            chunks.append((span, [segment]))
    return [CompactionCandidate(interval, tuple(members)) for interval, members in chunks]


def compaction_task_slots(config: DruidCompactionConfig, total_capacity: int, running: int) -> int:
    """How many more compaction tasks may start: max(1, min(⌊ratio × task slots⌋, maxCompactionTaskSlots)) less the
    compaction tasks already running (Druid: at least one slot, whatever the ratio)."""
    capacity = max(1, min(int(config.compaction_task_slot_ratio * total_capacity), config.max_compaction_task_slots))
    return max(0, capacity - running)


def newest_first(candidates: Iterable[tuple[str, CompactionCandidate]],
                 priority_data_source: str | None = None) -> list[tuple[str, CompactionCandidate]]:
    """The order tasks are submitted in over all data sources: the priority data source's first, then the newest
    chunk first."""
    ordered = sorted(candidates, key=lambda c: c[1].interval, reverse=True)
    return sorted(ordered, key=lambda c: c[0] != priority_data_source)


# -- the status -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AutoCompactionSnapshot:
    """Druid's AutoCompactionSnapshot of one data source after a run. A chunk a task was submitted for counts as
    compacted (Druid's accounting); awaiting are those that need compaction and found no free slot."""

    data_source: str
    schedule_status: str = "AWAITING_FIRST_RUN"
    message: str | None = None
    awaiting: CompactionStatistics = CompactionStatistics()
    compacted: CompactionStatistics = CompactionStatistics()
    skipped: CompactionStatistics = CompactionStatistics()

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"dataSource": self.data_source, "scheduleStatus": self.schedule_status,
                                    "message": self.message}
        for name, stats in (("AwaitingCompaction", self.awaiting), ("Compacted", self.compacted),
                            ("Skipped", self.skipped)):
            document |= {f"bytes{name}": stats.bytes, f"segmentCount{name}": stats.segments,
                         f"intervalCount{name}": stats.intervals}
        return document


# -- storage: druid_config and druid_audit --------------------------------------------------------------------------


def read_compaction_config(metadata: MetadataStore) -> DruidCompactionConfig:
    """The stored configs (Druid's defaults before anything was stored)."""
    return DruidCompactionConfig.model_validate(metadata.get_config(CONFIG_KEY) or {})


def update_compaction_config(metadata: MetadataStore, change: Callable[[DruidCompactionConfig], DruidCompactionConfig],
                             audit: AuditInfo) -> DruidCompactionConfig:
    """One compare-and-swap of the stored document (`change` may raise to leave it as it is) with its audit entry."""
    written = metadata.update_config(
        CONFIG_KEY, lambda old: change(DruidCompactionConfig.model_validate(old or {})).to_json(), audit)
    return DruidCompactionConfig.model_validate(written)


def compaction_config_history(metadata: MetadataStore, data_source: str, count: int | None = None,
                              interval: Interval | None = None) -> list[dict[str, Any]]:
    """Druid's DataSourceCompactionConfigHistory, oldest first: an entry for every audited change of the data
    source's config or, while it has one, of the cluster's settings (a deletion is an entry with a null config)."""
    table = tables.audit
    query = select(table).where(table.c.audit_key == CONFIG_KEY).order_by(table.c.created_date, table.c.id)
    if interval is not None:
        query = query.where(table.c.created_date >= format_timestamp(interval.start),
                            table.c.created_date < format_timestamp(interval.end))
    with metadata.engine.connect() as conn:
        rows = conn.execute(query).all()
    history: list[dict[str, Any]] = []
    for row in rows:
        stored = DruidCompactionConfig.model_validate_json(row.payload)
        config = stored.find(data_source)
        entry = {"globalConfig": stored.global_config(), "compactionConfig": config.to_json() if config else None}
        last = history[-1] if history else None
        if (config is None and last is None) or (last is not None and {k: last[k] for k in entry} == entry):
            continue
        history.append({**entry, "auditInfo": {"author": row.author, "comment": row.comment, "ip": row.ip},
                        "auditTime": row.created_date})
    return history if count is None else history[-count:] if count > 0 else []


# -- the duty -------------------------------------------------------------------------------------------------------


class HeldLock(Protocol):
    """What the duty reads of a task's lock (the lockbox's TaskLock)."""

    @property
    def type(self) -> str: ...
    @property
    def interval(self) -> Interval: ...
    @property
    def revoked(self) -> bool: ...


class AutoCompaction:
    def __init__(self, metadata: MetadataStore, submit: Callable[[TaskSpec], None],
                 active: Callable[[str | None], list[TaskSpec]], locks: Callable[[str], Sequence[HeldLock]],
                 total_capacity: Callable[[], int], clock: Callable[[], float] = time.time) -> None:
        """`submit` queues a task; `active` lists the active tasks (of a data source, or all), `locks` a task's
        locks, `total_capacity` the cluster's task slots (Druid's totalWorkerCapacity)."""
        self._metadata = metadata
        self._submit = submit
        self._active = active
        self._locks = locks
        self._total_capacity = total_capacity
        self._clock = clock
        #: the last run's snapshots, replaced whole by each run (read by the status API from other threads)
        self._snapshots: dict[str, AutoCompactionSnapshot] = {}
        self._run_lock = threading.Lock()

    def snapshots(self) -> dict[str, AutoCompactionSnapshot]:
        return self._snapshots

    def run_once(self) -> list[str]:
        """Submit the tasks there are slots for; the ids of those submitted. Runs one at a time (the periodic duty and
        Druid's POST …/compaction/compact may meet)."""
        with self._run_lock:
            return self._run()

    def _run(self) -> list[str]:
        cluster = read_compaction_config(self._metadata)
        active = self._active(None)
        slots = compaction_task_slots(cluster, self._total_capacity(), sum(t.type == "compact" for t in active))
        searches = {c.data_source: find_segments_to_compact(self._metadata.used_segments(c.data_source), c,
                                                            self._busy(c, active))
                    for c in cluster.compaction_configs}
        queue = newest_first(((ds, c) for ds, found in searches.items() for c in found.to_compact),
                             cluster.compaction_policy.priority_datasource)
        submitted: dict[str, list[CompactionCandidate]] = {ds: [] for ds in searches}  # this run's, per data source
        messages: dict[str, str] = {}
        ids: list[str] = []
        for data_source, candidate in queue:
            if len(ids) >= slots:
                break
            config = cluster.find(data_source)
            assert config is not None
            task_id = new_compaction_task_id(data_source, candidate.interval, datetime.fromtimestamp(self._clock(), UTC))
            try:
                self._submit(task_from_json(compaction_task_payload(config, candidate.interval, task_id)))
            except Exception as error:  # noqa: BLE001 - a full queue, a config a newer Sluice refuses: next period
                messages[data_source] = f"could not submit a compaction task: {error}"
                log.warning("auto-compaction of %s %s: %s", data_source, candidate.interval, messages[data_source])
                continue
            submitted[data_source].append(candidate)
            ids.append(task_id)
            log.info("auto-compaction: task %s compacts %s of %s (%s)", task_id, candidate.interval, data_source,
                     candidate.reason)
        self._snapshots = {ds: AutoCompactionSnapshot(
            ds, "RUNNING", messages.get(ds),
            awaiting=CompactionStatistics.of(c for c in found.to_compact
                                             if c.interval not in {s.interval for s in submitted[ds]}),
            compacted=CompactionStatistics.of([*found.compacted, *submitted[ds]]),
            skipped=CompactionStatistics.of(found.skipped)) for ds, found in searches.items()}
        return ids

    def _busy(self, config: DataSourceCompactionConfig, active: Sequence[TaskSpec]) -> list[Interval]:
        """Druid's locked intervals: those of tasks at the compaction's priority or above (a lower one's lock the
        compaction would revoke, so it is no reason to wait), and those of compaction tasks not running yet. With
        concurrent locks, the compaction's REPLACE lock shares the chunk with APPEND locks: they are no reason."""
        busy = []
        for task in active:
            if task.data_source != config.data_source:
                continue
            if isinstance(task, CompactionTaskSpec) and isinstance(task.io_config.input_spec, CompactionIntervalSpec):
                busy.append(Interval(*parse_interval(task.io_config.input_spec.interval)))
            if task.priority < config.task_priority:
                continue
            busy += [lock.interval for lock in self._locks(task.id)
                     if not lock.revoked and not (config.concurrent_locks and lock.type == "APPEND")]
        return busy
