"""Runs one Kafka supervisor: observes, asks `plan` what to do, and does it.

One thread handles the supervisor's notices in order (Druid's notice queue): a RunNotice every
`period` after `startDelay`, one whenever a task of this supervisor changes status, the operator's
notices (reset, resetOffsets, handoff), and the stop notice. RunNotices are coalesced: while one is
queued, more are not added (Druid issue #11414 is what happens otherwise). Because every change of
the supervisor's state happens on that one thread, no lock guards it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Callable, TypeVar

from sluice.emitter import ServiceEmitter, metrics
from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import MetadataStore
from sluice.overlord.supervisor.plan import (
    NOT_SET, DiscoveredTask, EndGroup, KillTask, LagStats, Observation, PlanConfig, RecordStartingOffsets,
    ResetStoredOffsets, StartTask, SupervisorState, TaskGroup, add_checkpoint, adopt, checkpoint_refusal, end_group,
    plan, record_lag,
)
from sluice.overlord.supervisor.state_manager import (
    ExceptionEvent, State, SupervisorStateManager, SupervisorStateManagerConfig,
)
from sluice.overlord.task_runner import TaskRunner
from sluice.timestamps import format_timestamp
from sluice.spec.supervisor import KafkaIOConfig, KafkaSupervisorSpec
from sluice.stream.kafka import KafkaStream, StreamError
from sluice.task.kafka_index_task import KafkaIndexTaskSpec, TaskState, new_task_id
from sluice.task.meters import ParseExceptionReport, latest_parse_errors
from sluice.task.task import TaskFailure, TaskStatus

log = logging.getLogger(__name__)

#: Druid's alert when the supervisor starts partitions over because their stored offsets are gone from the stream
OFFSETS_RESET_ALERT = "Offsets were reset automatically, potential data duplication or loss"
#: lag is emitted in these states and unhealthy ones, as in Druid (not while a first run is under way)
_LAG_STATES = {State.RUNNING, State.IDLE}
#: how long a starting supervisor waits for a previous overlord's tasks to be located before killing them
DISCOVERY_TIMEOUT = 30.0

_RUN, _STOP, _TERMINATE = "run", "stop", "terminate"
T = TypeVar("T")


class SupervisorStopped(RuntimeError):
    """The supervisor stopped before it got to the notice."""


class StreamSupervisor:
    def __init__(self, spec: KafkaSupervisorSpec, runner: TaskRunner, metadata: MetadataStore,
                 stream_factory: Callable[[KafkaIOConfig], KafkaStream], emitter: ServiceEmitter,
                 supervisor_config: SupervisorStateManagerConfig = SupervisorStateManagerConfig(),
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 state: SupervisorState | None = None) -> None:
        """`state` is a previous supervisor's final state: an updated spec takes over its publishing groups
        and continues from the offsets they end at. `supervisor_config` holds the overlord's druid.supervisor.*
        settings."""
        self.spec = spec
        io = spec.spec.io_config
        self.config = PlanConfig(spec.id, io.task_count, io.replicas, io.task_duration, io.completion_timeout,
                                 spec.suspended, spec.spec.tuning_config.reset_offset_automatically,
                                 io.use_earliest_offset, supervisor_config.idle_after(io.idle_config))
        self.state = state or SupervisorState()
        self._runner = runner
        self._metadata = metadata
        self._stream_factory = stream_factory
        self._emitter = emitter
        self._store_stack_trace = supervisor_config.store_stack_trace
        self._clock = clock
        self._notices: queue.Queue[str | tuple[Callable[[], Any], Future]] = queue.Queue()
        self._run_queued = threading.Event()
        self._thread = threading.Thread(target=self._handle_notices, name=f"supervisor-{spec.id}", daemon=True)
        self._stream: KafkaStream | None = None
        # what the status report shows, refreshed by every run
        self._state_manager = SupervisorStateManager(supervisor_config, spec.suspended)
        self._stopping = False
        self._latest_offsets: dict[int, int] = {}
        self._offsets_updated: datetime | None = None
        #: SUCCESS or FAILED of this supervisor's tasks as the runner reports them (on its thread), counted by the
        #: state manager at the next run (on the notice thread)
        self._task_outcomes: deque[str] = deque()
        self._killed: set[str] = set()
        self._parse_errors: list[ParseExceptionReport] = []

    # ---- lifecycle ----

    def start(self) -> None:
        self._runner.add_listener(self._on_task_status)
        self._started_at = time.monotonic()
        self._thread.start()

    def _discover_tasks(self) -> bool:
        """DISCOVERING_INITIAL_TASKS: adopt or kill the running tasks of this data source it did not start.

        False while some such task cannot be asked yet (its peon is not located yet after an overlord
        restart): the run waits for it, for at most DISCOVERY_TIMEOUT, so it does not start a second group
        over the same partitions.
        """
        found, waiting = [], []
        for task in self._runner.active(self.spec.id):
            if not isinstance(task, KafkaIndexTaskSpec) or self._owns(task.id) or task.id in self._killed:
                continue
            client = self._runner.client(task.id)
            state = client.state if client is not None else None
            if state is None:
                waiting.append(task.id)
                continue
            end = client.end_offsets() if state is TaskState.PUBLISHING else None
            if state is TaskState.PUBLISHING and end is None:
                waiting.append(task.id)
                continue
            found.append(DiscoveredTask(task.id, task.task_group_id, task.start_offsets, task.base_sequence_name,
                                        task.created, task.ingestion == self.spec.spec, end, client.checkpoints()))
        self.state, kills = adopt(self.state, found, self.config, self._clock())
        if waiting and time.monotonic() - self._started_at > DISCOVERY_TIMEOUT:
            kills += [KillTask(t, "its peon could not be reached after an overlord restart") for t in waiting]
            waiting = []
        for kill in kills:
            self._execute(kill)
        killed = {k.task_id for k in kills}
        if adopted := sorted(t.task_id for t in found if t.task_id not in killed):
            log.info("supervisor %s adopted the running tasks %s", self.spec.id, adopted)
        return not waiting

    def stop(self, graceful: bool, timeout: float = 60.0) -> SupervisorState:
        """graceful (terminate, update): reading groups stop at definite end offsets and publish; otherwise just
        stop. Returns the final state, whose publishing groups a successor supervisor can take over."""
        self._stopping = True
        self._notices.put(_TERMINATE if graceful else _STOP)
        self._thread.join(timeout)
        self._runner.remove_listener(self._on_task_status)
        return self.state

    def submit(self, work: Callable[[], T], timeout: float = 60.0) -> T:
        """Run `work` on the notice thread, in order with the other notices, and wait for its result."""
        future: Future = Future()
        self._notices.put((work, future))
        return future.result(timeout)

    def reset(self) -> None:
        """Hard reset: forget the committed offsets, kill every task; reading restarts per useEarliestOffset."""
        self.submit(self._reset)

    def reset_offsets(self, offsets: dict[int, int]) -> None:
        """Set the committed offsets of some partitions (Druid's ResetNotice) and restart their groups there."""
        self.submit(lambda: self._reset_offsets(offsets))

    def checkpoint(self, group_id: int, start: dict[int, int]) -> bool:
        """A task's checkpoint request (Druid's checkPointDataSourceMetadata): queued as a CheckpointNotice, handled
        in order with the other notices. False when the supervisor is stopping."""
        if self._stopping:
            return False
        self._notices.put((lambda: self._checkpoint(group_id, start), Future()))
        return True

    def handoff(self, group_ids: list[int]) -> None:
        """End these reading groups now rather than at taskDuration (best effort, as in Druid)."""
        self.submit(lambda: [self._end_group(g) for g in group_ids if g in self.state.active])

    def request_run(self) -> None:
        if not self._run_queued.is_set():
            self._run_queued.set()
            self._notices.put(_RUN)

    def _on_task_status(self, status: TaskStatus) -> None:
        if self._owns(status.id) and not self._stopping:
            if status.id not in self._killed:
                self._task_outcomes.append(status.status_code)
            self.request_run()

    def _owns(self, task_id: str) -> bool:
        groups = list(self.state.active.values()) + [g for gs in self.state.pending.values() for g in gs]
        return any(task_id in g.task_ids for g in groups)

    def _handle_notices(self) -> None:
        io = self.spec.spec.io_config
        next_run = time.monotonic() + io.start_delay.total_seconds()
        while True:
            try:
                notice = self._notices.get(timeout=max(0.0, next_run - time.monotonic()))
            except queue.Empty:
                notice = _RUN
            if isinstance(notice, tuple):
                self._run_work(*notice)
            elif notice == _RUN:
                self._run_queued.clear()
                self._run_once()
                next_run = time.monotonic() + io.period.total_seconds()
            else:
                if notice == _TERMINATE:
                    self._end_all_groups()
                if self._stream is not None:
                    self._stream.close()
                self._cancel_queued_work()
                return

    def _run_work(self, work: Callable[[], Any], future: Future) -> None:
        try:
            future.set_result(work())
        except Exception as error:
            future.set_exception(error)

    def _cancel_queued_work(self) -> None:
        while True:
            try:
                notice = self._notices.get_nowait()
            except queue.Empty:
                return
            if isinstance(notice, tuple):
                notice[1].set_exception(SupervisorStopped(f"supervisor {self.spec.id} stopped"))

    # ---- operator notices ----

    def _kill_groups(self, groups: list[Any], reason: str) -> None:
        for group in groups:
            for task_id in group.task_ids:
                self._killed.add(task_id)
                self._runner.shutdown(task_id, reason)
            for partition in group.starting_offsets:
                self.state.partition_offsets[partition] = NOT_SET

    def _reset(self) -> None:
        groups = list(self.state.active.values()) + [g for gs in self.state.pending.values() for g in gs]
        self._kill_groups(groups, "supervisor hard reset")
        self.state = SupervisorState()
        self._metadata.delete_stream_offsets(self.spec.id)
        self.request_run()

    def _reset_offsets(self, offsets: dict[int, int]) -> None:
        partitions = set(offsets)
        self._metadata.reset_stream_offsets(self.spec.id, StreamOffsets(self.spec.spec.io_config.topic, offsets))
        hit = [g for g in self.state.active.values() if partitions & set(g.starting_offsets)]
        for group_id, groups in list(self.state.pending.items()):
            hit += [g for g in groups if partitions & set(g.starting_offsets)]
            self.state.pending[group_id] = [g for g in groups if not partitions & set(g.starting_offsets)]
            if not self.state.pending[group_id]:
                del self.state.pending[group_id]
        self.state.active = {i: g for i, g in self.state.active.items() if not partitions & set(g.starting_offsets)}
        self._kill_groups(hit, "offsets were reset")
        for partition in partitions:
            self.state.partition_offsets[partition] = NOT_SET
        self.request_run()

    # ---- one RunNotice ----

    def _run_once(self) -> None:
        """One RunNotice, telling the state manager which step it reached (Druid's runInternal)."""
        states = self._state_manager
        while self._task_outcomes:
            states.record_completed_task_state(self._task_outcomes.popleft() == "SUCCESS")
        observation = None
        finished = True
        try:
            states.maybe_set_state(State.CONNECTING_TO_STREAM)
            partitions, latest, earliest, stored = self._observe_stream()
            states.maybe_set_state(State.DISCOVERING_INITIAL_TASKS)
            if not self._discover_tasks():
                finished = False  # adopted tasks must be in the groups before their statuses are observed
                return
            observation = self._observe(partitions, latest, earliest, stored)
            decided = plan(self.state, observation, self.config)
            self.state = decided.state
            for message in decided.errors:
                self._record_error("TaskFailure", message, fails_run=False)
            for message in decided.blocked:
                self._record_error("StreamException", message, stream=True)
            if decided.idle:
                states.maybe_set_state(State.IDLE)
            elif states.state is State.IDLE:
                states.maybe_set_state(State.RUNNING)
            if not decided.idle and not self.spec.suspended:
                states.maybe_set_state(State.CREATING_TASKS)
            for action in decided.actions:
                self._execute(action)
        except StreamError as error:
            self._record_error("StreamException", str(error), stream=True, trace=traceback.format_exc())
        except Exception as error:  # the supervisor keeps running; UNHEALTHY_SUPERVISOR after a few of these
            log.exception("supervisor %s run failed", self.spec.id)
            self._record_error(type(error).__name__, str(error), trace=traceback.format_exc())
        finally:
            if finished:
                states.mark_run_finished()
                if observation is not None:
                    self._emit_lag(observation)

    def _observe_stream(self) -> tuple[list[int], dict[int, int], dict[int, int], dict[int, int]]:
        """CONNECTING_TO_STREAM: the stream's partitions, latest and earliest offsets, and the committed offsets."""
        io = self.spec.spec.io_config
        if self._stream is None:
            self._stream = self._stream_factory(io)
        partitions = self._stream.partitions()
        latest = self._stream.latest_offsets(partitions)
        self._latest_offsets, self._offsets_updated = latest, self._clock()
        stored = self._metadata.get_stream_offsets(self.spec.id)
        if stored is not None and stored.stream != io.topic:
            raise StreamError(f"the metadata store has offsets of stream [{stored.stream}], not [{io.topic}]; "
                              f"reset the supervisor to start over")
        return partitions, latest, self._stream.earliest_offsets(partitions), stored.offsets if stored else {}

    def _observe(self, partitions: list[int], latest: dict[int, int], earliest: dict[int, int],
                 stored_offsets: dict[int, int]) -> Observation:
        io = self.spec.spec.io_config
        from_earliest = io.use_earliest_offset or bool(self.state.partition_offsets)  # a partition added later
        initial = {p: (earliest if from_earliest else latest)[p] for p in partitions if p not in stored_offsets}
        task_ids = {t for g in self.state.active.values() for t in g.task_ids}
        task_ids |= {t for gs in self.state.pending.values() for g in gs for t in g.task_ids}
        statuses = {t: s.status_code for t in task_ids if (s := self._runner.status(t)) is not None}
        not_started = [t for g in self.state.active.values() if g.started is None for t in g.task_ids]
        starts = {t: started for t in not_started
                  if (client := self._runner.client(t)) is not None and (started := client.start_time()) is not None}
        current: dict[int, int] = {}
        for task_id in (t for g in self.state.active.values() for t in g.task_ids):
            if (client := self._runner.client(task_id)) is not None and (offsets := client.current_offsets()):
                for partition, offset in offsets.items():
                    current[partition] = max(offset, current.get(partition, offset))
        return Observation(self._clock(), partitions, stored_offsets, initial, statuses, earliest, latest, starts,
                           current)

    def _emit_lag(self, observation: Observation) -> None:
        """Druid's ingest/kafka/lag, maxLag, avgLag and partitionLag, from this run's latest offsets minus how far the
        partitions are read."""
        state = self._state_manager.state
        if self.spec.suspended or (state not in _LAG_STATES and state.healthy):
            return
        lags = record_lag(self.state, observation)
        if not lags:
            return
        dimensions: dict[str, Any] = {metrics.DATASOURCE: self.spec.id, metrics.STREAM: self.spec.spec.io_config.topic}
        if (tags := self.spec.context and self.spec.context.extra(metrics.TAGS)) is not None:
            dimensions[metrics.TAGS] = tags
        for partition, lag in lags.items():
            self._emitter.metric(metrics.INGEST_KAFKA_PARTITION_LAG, lag,
                                 **dimensions, **{metrics.PARTITION: partition})
        stats = LagStats.of(lags)
        self._emitter.metric(metrics.INGEST_KAFKA_LAG, stats.total, **dimensions)
        self._emitter.metric(metrics.INGEST_KAFKA_MAX_LAG, stats.max, **dimensions)
        self._emitter.metric(metrics.INGEST_KAFKA_AVG_LAG, stats.avg, **dimensions)

    def _execute(self, action: Any) -> None:
        io = self.spec.spec.io_config
        if isinstance(action, (RecordStartingOffsets, ResetStoredOffsets)):
            self._metadata.reset_stream_offsets(self.spec.id, StreamOffsets(io.topic, action.offsets))
            if isinstance(action, ResetStoredOffsets):
                self._emitter.alert(OFFSETS_RESET_ALERT, dataSource=self.spec.id, stream=io.topic,
                                    partitions=sorted(action.offsets), offsets=_str_keys(action.offsets))
        elif isinstance(action, StartTask):
            group = self.state.active[action.group_id]
            task = KafkaIndexTaskSpec(new_task_id(self.spec.id, group.base_sequence_name), group.group_id,
                                      group.base_sequence_name, self.spec.spec, dict(group.starting_offsets),
                                      created=group.created, checkpoints=dict(group.checkpoint_sequences),
                                      use_concurrent_locks=bool(self.spec.context and self.spec.context.use_concurrent_locks))
            group.task_ids.add(task.id)
            try:
                self._runner.run(task)
            except Exception:  # not queued (a full queue): the group does not wait for a task that never ran
                group.task_ids.discard(task.id)
                raise
        elif isinstance(action, KillTask):
            self._killed.add(action.task_id)
            self._runner.shutdown(action.task_id, action.reason)
        elif isinstance(action, EndGroup):
            self._end_group(action.group_id)

    def _end_group(self, group_id: int) -> None:
        """Pause every replica, publish up to the highest offsets any of them reached, start the next group."""
        end = self._set_end_offsets(group_id, finish=True)
        if end is None:
            return
        self.state = end_group(self.state, group_id, end, self._clock() + self.config.completion_timeout)
        self.request_run()

    def _checkpoint(self, group_id: int, start: dict[int, int]) -> None:
        """CheckpointNotice: end the group's current sequence at the highest offsets any replica reached; the
        replicas publish it while they read on into the next sequence (incremental handoff)."""
        refusal = checkpoint_refusal(self.state, group_id, start)
        if refusal is not None:
            message, error = refusal
            if error:
                self._record_error("IllegalStateException", message)
            else:
                log.info("supervisor %s: %s", self.spec.id, message)
            return
        end = self._set_end_offsets(group_id, finish=False)
        if end is None:
            return
        self.state = add_checkpoint(self.state, group_id, end)
        log.info("supervisor %s: task group %d checkpointed at %s", self.spec.id, group_id, end)

    def _set_end_offsets(self, group_id: int, finish: bool) -> dict[int, int] | None:
        """Pause the group's replicas and give them all the same end offsets, the highest any of them reached
        (Druid's checkpointTaskGroup). Replicas that cannot be paused or take them are killed and leave the group.
        Returns the end; None when no replica took it (the group is dropped, to be restarted from its start)."""
        group = self.state.active[group_id]
        paused = {t: c for t in group.task_ids if (c := self._runner.client(t)) is not None}
        offsets = {t: o for t, c in paused.items() if (o := c.pause()) is not None}
        for task_id in group.task_ids - set(offsets):
            self._killed.add(task_id)
            self._runner.shutdown(task_id, "could not be paused to set its end offsets")
        if not offsets:
            self._record_error("TaskFailure", f"task group {group.group_id}: no replica could be paused; restarting it",
                               fails_run=False)
            del self.state.active[group_id]
            return None
        end = {p: max(o[p] for o in offsets.values()) for p in group.starting_offsets}
        took = set()
        for task_id in offsets:
            try:
                paused[task_id].set_end_offsets(end, finish=finish)
                took.add(task_id)
            except TaskFailure as failure:
                self._killed.add(task_id)
                self._runner.shutdown(task_id, f"could not set its end offsets: {failure}")
        if not took:
            self._record_error("TaskFailure",
                               f"task group {group.group_id}: no replica took its end offsets; restarting it",
                               fails_run=False)
            del self.state.active[group_id]
            return None
        group.task_ids = took
        return end

    def _end_all_groups(self) -> None:
        for group_id in list(self.state.active):
            try:
                self._end_group(group_id)
            except Exception as error:
                log.exception("supervisor %s: ending task group %d failed", self.spec.id, group_id)
                self._record_error(type(error).__name__, str(error))

    def _record_error(self, kind: str, message: str, stream: bool = False, fails_run: bool = True,
                      trace: str | None = None) -> None:
        """Into recentErrors (with the stack trace under druid.supervisor.storeStackTrace); `fails_run` counts this
        run as failed towards the unhealthiness threshold."""
        log.warning("supervisor %s: %s", self.spec.id, message)
        event = ExceptionEvent(self._clock(), kind, trace if trace and self._store_stack_trace else message, stream)
        if fails_run:
            self._state_manager.record_throwable_event(event)
        else:
            self._state_manager.record_event(event)

    # ---- reporting ----

    def health(self) -> tuple[str, str]:
        """(state, detailedState) as in Druid's supervisor state table."""
        if self._stopping:
            return State.STOPPING.value, State.STOPPING.value
        detailed = self._state_manager.state
        return detailed.basic.value, detailed.value

    @property
    def healthy(self) -> bool:
        return not self.health()[0].startswith("UNHEALTHY")

    def status_report(self) -> dict[str, Any]:
        io = self.spec.spec.io_config
        now = self._clock()
        state, detailed = self.health()
        reading, ending = self._groups()
        tasks = [(t, g, "ACTIVE") for g in reading for t in sorted(g.task_ids)]
        tasks += [(t, g, "PUBLISHING") for g in ending for t in sorted(g.task_ids)]
        # the tasks are asked at once, as Druid's report does: a busy peon (one starting Spark) delays the report by
        # its own answer, not by every task's
        with ThreadPoolExecutor(max_workers=max(1, len(tasks)), thread_name_prefix="task-report") as pool:
            reports = list(pool.map(lambda task: self._task_report(*task, now), tasks))
        active = [r for r in reports if r["type"] == "ACTIVE"]
        publishing = [r for r in reports if r["type"] == "PUBLISHING"]
        task_lags = [report["lag"] for report in active if report["lag"] is not None]
        lag = {p: min(l[p] for l in task_lags if p in l) for p in sorted({p for l in task_lags for p in l})}
        payload = {
            "dataSource": self.spec.id,
            "stream": io.topic,
            "partitions": len(self._latest_offsets),
            "replicas": io.replicas,
            "durationSeconds": int(io.task_duration.total_seconds()),
            "activeTasks": active,
            "publishingTasks": publishing,
            "latestOffsets": _str_keys(self._latest_offsets),
            "minimumLag": lag,
            "aggregateLag": max(0, sum(lag.values())),
            "offsetsLastUpdated": format_timestamp(self._offsets_updated) if self._offsets_updated else None,
            "suspended": self.spec.suspended,
            "healthy": not state.startswith("UNHEALTHY"),
            "state": state,
            "detailedState": detailed,
            "recentErrors": [event.to_json() for event in self._state_manager.exception_events],
        }
        return {"id": self.spec.id, "generationTime": format_timestamp(now), "payload": payload}

    def _groups(self) -> tuple[list[TaskGroup], list[TaskGroup]]:
        """The reading and the publishing groups, copied: the notice thread changes them while an HTTP
        thread asks their tasks."""
        snapshot = self.state
        return list(snapshot.active.values()), [g for gs in list(snapshot.pending.values()) for g in list(gs)]

    def stats(self) -> dict[str, dict[str, Any]]:
        """Druid's /stats: per task group, per task, its live rowStats (totals and moving averages)."""
        reading, ending = self._groups()
        stats: dict[str, dict[str, Any]] = {}
        for group in reading + ending:
            for task_id in sorted(group.task_ids):
                client = self._runner.client(task_id)
                if client is not None and (report := client.row_stats_report()) is not None:
                    stats.setdefault(str(group.group_id), {})[task_id] = report
        return stats

    def parse_errors(self) -> list[dict[str, Any]]:
        """Druid's /parseErrors: the newest parse exceptions of the tasks, kept across task generations."""
        tuning, io = self.spec.spec.tuning_config, self.spec.spec.io_config
        if tuning.max_parse_exceptions <= 0:
            return []
        reading, ending = self._groups()
        fetched = [r for g in reading + ending for t in sorted(g.task_ids)
                   if (client := self._runner.client(t)) is not None for r in client.parse_errors()]
        self._parse_errors = latest_parse_errors(self._parse_errors + fetched,
                                                 tuning.max_saved_parse_exceptions * io.task_count)
        return [r.to_json() for r in self._parse_errors]

    def _task_report(self, task_id: str, group: Any, kind: str, now: datetime) -> dict[str, Any]:
        client = self._runner.client(task_id)
        current = client.current_offsets() if client is not None else None
        remaining = ((group.started or now) + self.config.task_duration - now).total_seconds()
        return {
            "id": task_id,
            "startingOffsets": _str_keys(group.starting_offsets),
            "startTime": format_timestamp(group.created),
            "remainingSeconds": max(0, int(remaining)),
            "type": kind,
            "currentOffsets": _str_keys(current) if current is not None else None,
            "lag": _str_keys({p: self._latest_offsets[p] - o for p, o in current.items() if p in self._latest_offsets})
            if current is not None else None,
        }


def _str_keys(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in sorted(offsets.items())}
