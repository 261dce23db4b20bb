"""Publishing one sequence of a streaming task (Druid's StreamAppenderatorDriver publish and handoff).

Spark merges the sequence's persists into segment files; each file gets its segment id from the overlord
(`segmentAllocate`, keyed by the sequence name and the previous id, so replicas get the same ids), is pushed
to deep storage, and all of them are committed with the move of the stored offsets from the sequence's start
to its end, in one transaction (`segmentTransactionalInsert`). Until that commits, nothing is visible.
"""

from __future__ import annotations

import logging
import shutil
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tenacity import Retrying, retry_if_exception_type, wait_fixed

from sluice.emitter import metrics
from sluice.metadata.offsets import StreamOffsets
from sluice.segment.segment import DataSegment, numbered_shard_spec
from sluice.task import actions
from sluice.task.sequences import SequenceMetadata
from sluice.task.task import TaskFailure

if TYPE_CHECKING:
    from sluice.spec.granularity import Granularity
    from sluice.task.pipeline import SegmentFile

log = logging.getLogger(__name__)


class SequencePublisher:
    def __init__(self, task: Any, pipeline: Any) -> None:
        """`task` is the KafkaIndexTask (its spec, toolbox and condition); `pipeline` its IngestPipeline."""
        self._task = task
        self._pipeline = pipeline

    def publish(self, sequence: SequenceMetadata, stopping: Callable[[], bool]) -> list[DataSegment]:
        """Publish `sequence` and return its segments; raises TaskFailure when its commit cannot happen."""
        spec, toolbox = self._task.spec, self._task.toolbox
        schema = spec.ingestion.data_schema
        tuning = spec.ingestion.tuning_config
        staging = toolbox.task_dir / "staging" / str(sequence.sequence_id)
        segments: list[DataSegment] = []
        if sequence.persists:
            files = self._pipeline.merge([toolbox.task_dir / p for p in sequence.persists],
                                         schema.granularity_spec.segment_granularity,
                                         tuning.effective_max_rows_per_segment(), staging)
            segments = append_segments(toolbox, schema.data_source, files, schema.granularity_spec.segment_granularity,
                                       sequence.sequence_name, spec.lock_type, [m.to_json() for m in schema.metrics_spec])
        topic = spec.ingestion.io_config.topic
        start = StreamOffsets(topic, dict(sequence.start_offsets))
        end = StreamOffsets(topic, dict(sequence.end_offsets))
        if segments or start.offsets != end.offsets:
            self._commit(segments, start, end, stopping)
        dimensions = self._task.metric_dimensions
        toolbox.emitter.metric(metrics.INGEST_HANDOFF_COUNT, len(segments), **dimensions)
        toolbox.emitter.metric(metrics.INGEST_ROWS_OUTPUT, sum(s.num_rows or 0 for s in segments), **dimensions)
        toolbox.emitter.metric(metrics.SEGMENT_ADDED_BYTES, sum(s.size for s in segments), **dimensions)
        shutil.rmtree(staging, ignore_errors=True)
        log.info("task %s published sequence %s: %d segments, offsets %s -> %s", spec.id, sequence.sequence_name,
                 len(segments), start.offsets, end.offsets)
        return segments

    def _commit(self, segments: list[DataSegment], start: StreamOffsets, end: StreamOffsets,
                stopping: Callable[[], bool]) -> None:
        """The exactly-once step. A sequence of a later generation (or a later sequence) waits here until the one
        before has committed the offsets it starts from; a replica that lost the race finds its segments there."""
        spec, toolbox = self._task.spec, self._task.toolbox

        def attempt() -> None:
            result = actions.publish_segments(toolbox.actions, spec.data_source, segments, start, end)
            if result.success:
                return
            stored = toolbox.metadata.get_stream_offsets(spec.data_source)
            if self._published_by_replica(stored, end, segments):
                log.info("task %s: a replica already published the same segments and offsets", spec.id)
                return
            if not _earlier_generation_pending(stored, start):
                raise TaskFailure(result.message or "publish failed")
            raise _EarlierSequencePending()

        try:
            Retrying(retry=retry_if_exception_type(_EarlierSequencePending), wait=wait_fixed(toolbox.poll_interval),
                     sleep=self._task.wait, stop=lambda _state: stopping(), reraise=True)(attempt)
        except _EarlierSequencePending:
            raise TaskFailure("task was stopped while waiting to publish; nothing more was committed") from None

    def _published_by_replica(self, stored: StreamOffsets | None, end: StreamOffsets,
                              segments: list[DataSegment]) -> bool:
        """The offsets reached (or passed: a faster replica may have published later sequences too) and these very
        segment ids used: a replica published this sequence."""
        if stored is None or any(stored.offsets.get(p, -1) < o for p, o in end.offsets.items()):
            return False
        used = {str(s.id) for s in self._task.toolbox.metadata.used_segments(self._task.spec.data_source)}
        return all(str(s.id) in used for s in segments)


class _EarlierSequencePending(Exception):
    """The stored offsets are still behind this sequence's start: the sequence before it has not committed yet."""


def append_segments(toolbox: Any, data_source: str, files: Sequence[SegmentFile], granularity: Granularity,
                    sequence_name: str, lock_type: str, aggregators: list[dict[str, Any]]) -> list[DataSegment]:
    """`files` as segments appended to their time chunks: each id allocated after the one before in the sequence
    (so replicas, and a sequence published again, get the same ids), each file pushed to deep storage."""
    segments: list[DataSegment] = []
    previous: str | None = None
    for file in files:
        bucket = datetime.fromtimestamp(file.bucket_start_millis / 1000, UTC)
        segment_id = actions.allocate_segment(toolbox.actions, data_source, bucket, granularity, sequence_name,
                                              previous, lock_type)
        previous = str(segment_id)
        # replicas push the same segment id; unique paths keep a losing replica from touching the winner's file
        load_spec = toolbox.deep_storage.push(file.path, segment_id, unique_path=True)
        metrics = [a["name"] for a in aggregators]
        segments.append(DataSegment(id=segment_id, dimensions=file.dimensions(metrics), metrics=metrics,
                                    aggregators=aggregators, shard_spec=numbered_shard_spec(segment_id.partition_num),
                                    num_rows=file.num_rows, size=file.path.stat().st_size, load_spec=load_spec))
    return segments


def already_committed(stored: StreamOffsets | None, sequence: SequenceMetadata) -> bool:
    """A sequence whose end the stored offsets have reached or passed was committed (by this task before a
    restart, or by a replica): a restored task must not publish it again (Druid #6124)."""
    return stored is not None and all(stored.offsets.get(p, -1) >= end for p, end in sequence.end_offsets.items())


def _earlier_generation_pending(stored: StreamOffsets | None, start: StreamOffsets) -> bool:
    """True while the stored offsets are still behind this sequence's start (an earlier one is publishing)."""
    if stored is None:
        return False
    common = [p for p in start.offsets if p in stored.offsets]
    return bool(common) and all(stored.offsets[p] <= start.offsets[p] for p in common)

