"""Druid's `compact` task (manual compaction): a data source's segments within an interval read back and written
again, fewer and larger, under a newer version that overshadows them.

It is the batch task in overwrite mode over the `druid` input source of its own data source: the task builds
an `index_parallel` payload per group of input segments and runs `BatchIndexTask` on it, under its own id,
locks and priority (25, Druid's compaction priority, so ingestion wins a contested chunk). The schema is
the segments' own unless the request gives one (Druid's CompactionTask): their dimensions, newest segment
first, typed as the segment files store them; their metrics as combining aggregators (a `count` becomes a
`longSum` of the column it wrote); `__time` read in milliseconds. Rows are already at their query
granularity, so NONE keeps them as they are and rollup only merges rows that are equal in time and
dimensions, which is what appends into one chunk leave behind. Every query answers as before.

Without `granularitySpec.segmentGranularity`, segments keep their granularity: overlapping intervals are
grouped, and each group is compacted at the granularity of its interval's length (Druid's
GranularityType.fromPeriod). With it, all input segments are compacted together over their umbrella
interval, widened to whole chunks of the new granularity so that a chunk is never overwritten with only
part of its rows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import pyarrow.parquet as pq
from pydantic import Field, ValidationError, field_validator, model_validator

from sluice.ids import DataSourceName
from sluice.segment.columns import is_multi_value, parquet_column_types
from sluice.segment.deep_storage import default_cache_dir
from sluice.segment.segment import DataSegment, Interval
from sluice.segment.timeline import VersionedIntervalTimeline
from sluice.spec.context import TaskContext
from sluice.spec.batch import BatchTuningConfig, parse_batch_task
from sluice.spec.data_schema import AggregatorSpec, DimensionsSpec
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.filters import DimFilter
from sluice.spec.granularity import GRANULARITIES, Granularity, parse_granularity
from sluice.spec.intervals import parse_interval
from sluice.spec.model import SpecModel
from sluice.task.batch_index_task import (
    BatchIndexTask,
    BatchIndexTaskSpec,
    new_batch_task_id,
)
from sluice.task.task import PayloadTaskSpec, TaskFailure, TaskStatus, run_to_status, write_task_file
from sluice.task.toolbox import TaskToolbox

log = logging.getLogger(__name__)

#: Druid's Tasks.DEFAULT_MERGE_TASK_PRIORITY: compaction yields to ingestion (batch 50, realtime 75)
COMPACTION_PRIORITY = 25
TIME = "__time"
_TUNING_TYPES = ("index_parallel", "index", "compaction")


def _interval_text(value: str) -> str:
    parse_interval(value)
    return value


class CompactionIntervalSpec(SpecModel):
    type: Literal["interval"]
    interval: str
    #: Druid's guard that the segments are still the ones the submitter saw; accepted, not checked
    sha256_of_sorted_segment_ids: str | None = None

    _parses = field_validator("interval")(lambda cls, value: _interval_text(value))


class SpecificSegmentsSpec(SpecModel):
    type: Literal["segments"]
    segments: list[str] = Field(min_length=1)


class CompactionIOConfig(SpecModel):
    type: Literal["compact"] = "compact"
    input_spec: Annotated[CompactionIntervalSpec | SpecificSegmentsSpec, Field(discriminator="type")]
    #: REPLACE mode: a chunk of the interval left without rows gets a tombstone
    drop_existing: bool = False
    allow_non_aligned_interval: bool = False


class CompactionGranularitySpec(SpecModel):
    """What the compacted segments change; a field left out keeps what the segments have."""

    type: Literal["uniform"] | None = None
    segment_granularity: Any = None
    query_granularity: Any = None
    rollup: bool | None = None

    @model_validator(mode="after")
    def _granularities(self) -> CompactionGranularitySpec:
        for value in (self.segment_granularity, self.query_granularity):
            if value is not None:
                parse_granularity(value)
        return self


class CompactionTransformSpec(SpecModel):
    """Druid's CompactionTransformSpec: only a filter (rows it rejects are dropped from the data source)."""

    filter: DimFilter | None = None


class CompactionTaskPayload(SpecModel):
    type: Literal["compact"]
    id: str | None = None
    data_source: DataSourceName
    io_config: CompactionIOConfig | None = None
    #: Druid's deprecated forms of ioConfig.inputSpec and granularitySpec.segmentGranularity
    interval: str | None = None
    segment_granularity: Any = None
    dimensions_spec: DimensionsSpec | None = None
    metrics_spec: list[AggregatorSpec] | None = None
    granularity_spec: CompactionGranularitySpec | None = None
    transform_spec: CompactionTransformSpec | None = None
    tuning_config: dict[str, Any] | None = None
    context: TaskContext = Field(default_factory=TaskContext)
    #: Druid writes these in a stored task payload; accepted and recomputed
    group_id: str | None = None
    resource: dict[str, Any] | None = None
    created_time: str | None = None

    _parses = field_validator("interval")(lambda cls, value: value if value is None else _interval_text(value))

    @model_validator(mode="after")
    def _one_input(self) -> CompactionTaskPayload:
        """Druid's Checks.checkOneNotNullOrEmpty over ioConfig and interval; the deprecated fields move into
        today's places."""
        if (self.io_config is None) == (self.interval is None):
            raise ValueError("exactly one of ioConfig and interval must be given")
        if self.interval is not None:
            spec = CompactionIntervalSpec(type="interval", interval=self.interval)
            object.__setattr__(self, "io_config", CompactionIOConfig(input_spec=spec))
            object.__setattr__(self, "interval", None)
        if self.segment_granularity is not None:
            given = self.granularity_spec.segment_granularity if self.granularity_spec else None
            if given is not None and parse_granularity(given) != parse_granularity(self.segment_granularity):
                raise ValueError(f"Conflicting segment granularities found {self.segment_granularity}"
                                 f"(segmentGranularity) and {given}(granularitySpec.segmentGranularity)")
            spec_ = (self.granularity_spec or CompactionGranularitySpec()).model_copy(
                update={"segment_granularity": self.segment_granularity})
            object.__setattr__(self, "granularity_spec", spec_)
            object.__setattr__(self, "segment_granularity", None)
        return self


@dataclass(frozen=True)
class CompactionTaskSpec(PayloadTaskSpec):
    id: str
    payload: CompactionTaskPayload

    type = "compact"
    needs_spark = True
    #: like a batch task, a compaction that stops is run again from the start
    can_restore = False
    default_priority = COMPACTION_PRIORITY

    @property
    def data_source(self) -> str:
        return self.payload.data_source

    @property
    def io_config(self) -> CompactionIOConfig:
        assert self.payload.io_config is not None  # set by the payload's validator
        return self.payload.io_config

    @property
    def segment_granularity(self) -> Granularity | None:
        given = self.payload.granularity_spec.segment_granularity if self.payload.granularity_spec else None
        return None if given is None else parse_granularity(given)

    def to_json(self) -> dict[str, Any]:
        document = {k: v for k, v in self.payload.to_json().items() if v is not None}
        return {**document, "id": self.id, "groupId": self.group_id, "dataSource": self.data_source,
                "resource": {"availabilityGroup": self.group_id, "requiredCapacity": 1},
                "context": {**self.payload.context.to_json(), "priority": self.priority}}


def spec_from_json(payload: dict[str, Any]) -> CompactionTaskSpec:
    """Validate a submitted `compact` task; raises SpecError naming the field. One without an id gets Druid's
    kind: compact_<dataSource>_<random>_<time>."""
    try:
        parsed = CompactionTaskPayload.model_validate(payload)
    except ValidationError as err:
        raise from_validation_error(err, payload) from None
    tuning = parsed.tuning_config
    if tuning is not None:
        if tuning.get("type") not in (None, *_TUNING_TYPES):
            raise SpecError("tuningConfig.type", f"expected one of {', '.join(_TUNING_TYPES)}, got {tuning['type']!r}")
        try:
            BatchTuningConfig.model_validate({k: v for k, v in tuning.items() if k != "type"})
        except ValidationError as err:
            raise from_validation_error(err, tuning, ["tuningConfig"]) from None
    spec = CompactionTaskSpec(parsed.id or new_batch_task_id("compact", parsed.data_source), parsed)
    input_spec, granularity = spec.io_config.input_spec, spec.segment_granularity
    if isinstance(input_spec, CompactionIntervalSpec) and granularity is not None \
            and not spec.io_config.allow_non_aligned_interval:
        interval = Interval(*parse_interval(input_spec.interval))
        if not _aligned(interval, granularity):
            raise SpecError("ioConfig.inputSpec.interval", f"Interval[{interval}] to compact is not aligned with "
                                                           f"segmentGranularity[{granularity}]")
    return spec


def create(spec: CompactionTaskSpec, toolbox: TaskToolbox) -> CompactionTask:
    return CompactionTask(spec, toolbox)


# -- from segment metadata to index_parallel payloads (pure) ------------------------------------------------


@dataclass(frozen=True)
class InputSegment:
    """A segment compaction reads, with its file's column types in Druid's names (string, long, float, double)."""

    segment: DataSegment
    column_types: Mapping[str, str]
    #: the string dimensions the file holds as lists: multi-values, already in their multiValueHandling's order
    multi_values: frozenset[str] = frozenset()


def select_segments(spec: CompactionTaskSpec, used: Sequence[DataSegment]) -> list[DataSegment]:
    """The visible used segments the compaction reads (Druid's SegmentProvider); raises TaskFailure as Druid's
    checks do when there are none, or when the listed segments are no longer exactly the visible ones."""
    input_spec = spec.io_config.input_spec
    if isinstance(input_spec, CompactionIntervalSpec):
        interval = Interval(*parse_interval(input_spec.interval))
    else:
        listed = [s for s in used if str(s.id) in set(input_spec.segments)]
        interval = _umbrella([s.interval for s in listed]) if listed else None
    timeline = VersionedIntervalTimeline.from_segments(used)
    visible = sorted({s for holder in timeline.lookup(interval) for s in holder.segments}, key=lambda s: s.id) \
        if interval is not None else []
    if not visible:
        raise TaskFailure("No segments found for compaction. Please check that datasource name and interval are "
                          "correct.")
    if isinstance(input_spec, SpecificSegmentsSpec) and sorted(str(s.id) for s in visible) != sorted(input_spec.segments):
        raise TaskFailure("Specified segments in the spec are different from the current used segments. Possibly new "
                          "segments would have been added or some segments have been unpublished.")
    return visible


def compaction_payloads(spec: CompactionTaskSpec, segments: Sequence[InputSegment]) -> list[dict[str, Any]]:
    """One `index_parallel` payload per group of input segments, in time order (see the module docstring)."""
    granularity = spec.segment_granularity
    if granularity is None:
        return [_payload(spec, group, interval, _granularity_of(interval)) for interval, group in _unified(segments)]
    input_spec = spec.io_config.input_spec
    intervals = [s.segment.interval for s in segments]
    if isinstance(input_spec, CompactionIntervalSpec):
        intervals.append(Interval(*parse_interval(input_spec.interval)))
    umbrella = _umbrella(intervals)
    aligned = Interval(granularity.bucket_start(umbrella.start), _bucket_ceiling(granularity, umbrella.end))
    return [_payload(spec, list(segments), aligned, granularity)]


#: how an aggregator's combining form differs from it, where it must be told that it reads what it wrote
_COMBINING_CHANGES: dict[str, dict[str, Any]] = {
    "HLLSketchBuild": {"type": "HLLSketchMerge"},
    "thetaSketch": {"isInputThetaSketch": True},
    "hyperUnique": {"isInputHyperUnique": True},
}


def combining_aggregator(aggregator: Mapping[str, Any]) -> dict[str, Any]:
    """Druid's AggregatorFactory.getCombiningFactory: the aggregator that merges the column it wrote, with the
    written aggregator's parameters (a sketch's size, a first/last value's length). First/last read back the pairs
    they wrote, which carry their own time; quantiles sketches merge the sketches they meet."""
    name = aggregator["name"]
    if aggregator["type"] == "count":
        return {"type": "longSum", "name": name, "fieldName": name}
    combining = {**aggregator, **_COMBINING_CHANGES.get(str(aggregator["type"]), {}), "fieldName": name}
    combining.pop("timeColumn", None)
    return combining


def dimension_schema(segments: Sequence[InputSegment]) -> list[dict[str, str]]:
    """Every segment's dimensions, newest segment first (Druid prefers the latest type of a dimension). A multi-value
    keeps its values in the order the segments hold them (ARRAY), as Druid keeps a column's multiValueHandling."""
    seen: dict[str, str] = {}
    for item in sorted(segments, key=lambda s: (s.segment.interval, s.segment.version), reverse=True):
        for name in item.segment.dimensions:
            seen.setdefault(name, item.column_types.get(name, "string"))
    multi_values = {name for item in segments for name in item.multi_values}
    return [{"name": name, "type": kind, **({"multiValueHandling": "ARRAY"} if name in multi_values else {})}
            for name, kind in seen.items()]


def metrics_schema(segments: Sequence[InputSegment]) -> list[dict[str, Any]]:
    """The segments' aggregators as combining ones, merged by name (Druid's mergeAggregators): the same name
    must combine the same way in every segment."""
    merged: dict[str, dict[str, Any]] = {}
    for item in segments:
        if item.segment.metrics and not item.segment.aggregators:
            raise TaskFailure(f"segment {item.segment.id} does not record its aggregators; provide metricsSpec")
        for aggregator in item.segment.aggregators:
            combining = combining_aggregator(aggregator)
            if merged.setdefault(combining["name"], combining) != combining:
                raise TaskFailure("Failed to merge existing aggregators when generating metricsSpec; try providing "
                                  f"explicit metricsSpec (metric {combining['name']!r} is "
                                  f"{merged[combining['name']]['type']} in one segment, {combining['type']} in another)")
    return list(merged.values())


def _payload(spec: CompactionTaskSpec, segments: Sequence[InputSegment], interval: Interval,
             granularity: Granularity) -> dict[str, Any]:
    given = spec.payload
    granularity_spec = given.granularity_spec or CompactionGranularitySpec()
    data_schema: dict[str, Any] = {
        "dataSource": spec.data_source,
        "timestampSpec": {"column": TIME, "format": "millis"},
        "dimensionsSpec": given.dimensions_spec.to_json() if given.dimensions_spec else
        {"dimensions": dimension_schema(segments)},
        "metricsSpec": [m.to_json() for m in given.metrics_spec] if given.metrics_spec is not None else
        metrics_schema(segments),
        "granularitySpec": {"segmentGranularity": granularity.to_json(),
                            "queryGranularity": granularity_spec.query_granularity or "NONE",
                            "rollup": True if granularity_spec.rollup is None else granularity_spec.rollup,
                            "intervals": [str(interval)]},
    }
    if given.transform_spec is not None and given.transform_spec.filter is not None:
        data_schema["transformSpec"] = {"filter": given.transform_spec.to_json()["filter"]}
    tuning = {k: v for k, v in (given.tuning_config or {}).items() if k != "type"}
    return {"type": "index_parallel", "id": spec.id, "groupId": spec.group_id,
            "spec": {"dataSchema": data_schema,
                     "ioConfig": {"type": "index_parallel", "appendToExisting": False,
                                  "dropExisting": spec.io_config.drop_existing,
                                  "inputSource": {"type": "druid", "dataSource": spec.data_source,
                                                  "interval": str(interval)}},
                     "tuningConfig": {"type": "index_parallel", **tuning}},
            "context": {**given.context.to_json(), "priority": spec.priority}}


def _unified(segments: Sequence[InputSegment]) -> list[tuple[Interval, list[InputSegment]]]:
    """Segments grouped by interval, overlapping intervals joined, in time order: segments that overlap must be
    compacted together, or the newer one would hide the other's rows."""
    groups: list[tuple[Interval, list[InputSegment]]] = []
    for item in sorted(segments, key=lambda s: (s.segment.interval, s.segment.id)):
        current = item.segment.interval
        if groups and groups[-1][0].overlaps(current):
            union, members = groups[-1]
            groups[-1] = (Interval(union.start, max(union.end, current.end)), [*members, item])
        else:
            groups.append((current, [item]))
    return groups


def _granularity_of(interval: Interval) -> Granularity:
    """Druid's GranularityType.fromPeriod(interval.toPeriod()): the granularity whose chunk is this interval."""
    for granularity in GRANULARITIES.values():
        if granularity.name != "NONE" and granularity.bucket_start(interval.start) == interval.start \
                and granularity.bucket_end(interval.start) == interval.end:
            return granularity
    raise TaskFailure(f"segments of interval[{interval}] have no granularity to keep; give "
                      "granularitySpec.segmentGranularity")


def _aligned(interval: Interval, granularity: Granularity) -> bool:
    return granularity.bucket_start(interval.start) == interval.start \
        and granularity.bucket_start(interval.end) == interval.end


def _bucket_ceiling(granularity: Granularity, instant: datetime) -> datetime:
    start = granularity.bucket_start(instant)
    return start if start == instant else granularity.bucket_end(start)


def _umbrella(intervals: Sequence[Interval]) -> Interval:
    return Interval(min(i.start for i in intervals), max(i.end for i in intervals))


# -- the task ------------------------------------------------------------------------------------------------


class CompactionTask:
    def __init__(self, spec: CompactionTaskSpec, toolbox: TaskToolbox) -> None:
        self.spec = spec
        self.toolbox = toolbox
        self._current: BatchIndexTask | None = None
        self._stopped = threading.Event()

    def run(self) -> TaskStatus:
        status = run_to_status(self.spec.id, self._run)
        if self._current is None:  # failed before any batch ran: still leave a report
            write_task_file(self.toolbox.task_dir, "report.json", self.report(status))
        return status

    def stop(self) -> None:
        self._stopped.set()
        if self._current is not None:
            self._current.stop()

    def stop_gracefully(self) -> None:
        self.stop()

    def report(self, status: TaskStatus | None = None) -> dict[str, Any]:
        """The report of the batch run under way (or last run): Druid's ingestionStatsAndErrors."""
        if self._current is not None:
            return self._current.report(status)
        return {"ingestionStatsAndErrors": {"type": "ingestionStatsAndErrors", "taskId": self.spec.id, "payload": {
            "ingestionState": "COMPLETED" if status else "NOT_STARTED", "unparseableEvents": {}, "rowStats": {},
            "segmentsPublished": 0, "errorMsg": status.error_msg if status else None}}}

    def _run(self) -> None:
        """Each interval's batch in turn; the first that fails fails the task with its reason."""
        used = self.toolbox.metadata.used_segments(self.spec.data_source)
        chosen = select_segments(self.spec, used)
        inputs = [self._input(s) for s in chosen]
        for payload in compaction_payloads(self.spec, inputs):
            if self._stopped.is_set():
                raise TaskFailure("task was stopped")
            batch = BatchIndexTaskSpec(self.spec.id, parse_batch_task(payload))
            self._current = BatchIndexTask(batch, self.toolbox)
            log.info("task %s compacts %s of %s", self.spec.id, payload["spec"]["ioConfig"]["inputSource"]["interval"],
                     self.spec.data_source)
            status = self._current.run()
            if status.status_code != "SUCCESS":
                raise TaskFailure(status.error_msg or f"compacting {self.spec.data_source} failed")

    def _input(self, segment: DataSegment) -> InputSegment:
        """The segment with the types its file stores its columns as; a tombstone has no rows to read, nor a type."""
        if segment.shard_spec.get("type") == "tombstone" or not segment.load_spec:
            return InputSegment(segment, {})
        schema = pq.read_schema(self.toolbox.deep_storage.fetch(segment.load_spec, default_cache_dir()))
        return InputSegment(segment, parquet_column_types(schema),
                            frozenset(field.name for field in schema if is_multi_value(field.type)))

