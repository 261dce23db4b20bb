"""The supervisor's decisions, as a pure function (Druid's SeekableStreamSupervisor.runInternal).

`plan(state, observation, config)` looks at what the runner observed (partitions, stored offsets,
task statuses, the clock) and returns the next state plus the actions to carry out. It performs no
I/O, so every rule below is tested with plain values. The runner (`stream_supervisor.py`) does
the observing and the acting.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta


#: partitionOffsets value meaning "start from what the metadata store has" (Druid's NOT_SET)
NOT_SET = -1
#: how long past taskDuration a group may take to read its first records (a cold peon's first Spark job)
FIRST_READ_GRACE = timedelta(minutes=1)


@dataclass
class TaskGroup:
    """The replicas reading one set of partitions from the same offsets (Druid's TaskGroup)."""

    group_id: int
    #: where every replica of this group starts; never changes during the lifetime of the group, so
    #: replicas read identical ranges, allocate identical segment ids and publish the same commit
    starting_offsets: dict[int, int]
    #: the sequence name replicas share; segment allocation is keyed by it
    base_sequence_name: str
    created: datetime
    #: creation order among all groups of the supervisor (clock readings can tie)
    generation: int = 0
    task_ids: set[str] = field(default_factory=set)
    #: set when the group stops reading: the offsets it publishes up to, and when to give up on it
    end_offsets: dict[int, int] | None = None
    completion_deadline: datetime | None = None
    #: when its first replica started reading (Druid's group start time): taskDuration counts from here, so
    #: a task slow to start (a peon starting its Spark) is not ended before it read anything
    started: datetime | None = None
    #: checkpointSequences: sequence id -> the offsets the sequence starts at. The first is startingOffsets; each
    #: checkpoint adds the next. A replica started later gets them all, so it reads the same sequences
    checkpoint_sequences: dict[int, dict[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.checkpoint_sequences:
            self.checkpoint_sequences = {0: dict(self.starting_offsets)}


@dataclass
class SupervisorState:
    #: activelyReadingTaskGroups: at most one reading group per group id
    active: dict[int, TaskGroup] = field(default_factory=dict)
    #: pendingCompletionTaskGroups: groups that stopped reading and are publishing, oldest first
    pending: dict[int, list[TaskGroup]] = field(default_factory=dict)
    #: partitionOffsets: where the next group for a partition starts; NOT_SET = the committed offsets
    partition_offsets: dict[int, int] = field(default_factory=dict)
    #: the generation the next created group gets
    next_generation: int = 0
    #: the stream's latest offsets when they last changed, and when that was seen (Druid's
    #: previousSequencesFromStream and lastActiveTimeMillis): how long the stream has had no new data
    previous_latest_offsets: dict[int, int] = field(default_factory=dict)
    last_active: datetime | None = None


@dataclass(frozen=True)
class PlanConfig:
    data_source: str
    task_count: int
    replicas: int
    task_duration: timedelta
    completion_timeout: timedelta
    #: a suspended supervisor lets its reading groups publish and starts no new ones
    suspended: bool = False
    #: start a partition over (earliest or latest) when its offset is gone from the stream, with an alert
    reset_offset_automatically: bool = False
    use_earliest_offset: bool = False
    #: idleConfig: a stream that has had no new data for this long, and is read to its end, makes the supervisor
    #: IDLE; None: never
    idle_after: timedelta | None = None


@dataclass(frozen=True)
class Observation:
    now: datetime
    partitions: list[int]
    #: committed offsets in the metadata store (empty when nothing was committed yet)
    stored_offsets: dict[int, int]
    #: where partitions with nothing committed start: earliest or latest per useEarliestOffset on the first
    #: run, earliest for partitions discovered later (so nothing written to a new partition is skipped)
    initial_offsets: dict[int, int]
    #: RUNNING, SUCCESS or FAILED for every task the runner knows; an absent task is gone
    task_statuses: dict[str, str]
    #: what the stream holds now, per partition: offsets outside [earliest, latest] cannot be read
    earliest_offsets: dict[int, int] = field(default_factory=dict)
    latest_offsets: dict[int, int] = field(default_factory=dict)
    #: when tasks of groups that had not started yet began reading, for those whose start is known
    task_start_times: dict[str, datetime] = field(default_factory=dict)
    #: the furthest offset any reading replica has reached, per partition, for those that answered
    current_offsets: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DiscoveredTask:
    """A running task of the data source that this supervisor did not start (a previous overlord did)."""

    task_id: str
    group_id: int
    starting_offsets: dict[int, int]
    base_sequence_name: str
    created: datetime
    #: its ingestion spec is this supervisor's: only then may it go on
    same_spec: bool
    #: set when it is already publishing: the offsets it publishes up to
    end_offsets: dict[int, int] | None = None
    #: its sequences' start offsets, by sequence id
    checkpoints: dict[int, dict[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class StartTask:
    group_id: int


@dataclass(frozen=True)
class EndGroup:
    """Pause the group's replicas, take the highest current offsets as end offsets, let them publish."""

    group_id: int


@dataclass(frozen=True)
class KillTask:
    task_id: str
    reason: str


@dataclass(frozen=True)
class ResetStoredOffsets:
    """Overwrite the committed offsets of partitions whose offsets are gone from the stream."""

    offsets: dict[int, int]


@dataclass(frozen=True)
class RecordStartingOffsets:
    """Store the first starting offsets of partitions nothing was committed for, before any task reads
    them: a later generation's publish then waits for the earlier one instead of racing it."""

    offsets: dict[int, int]


Action = StartTask | EndGroup | KillTask | RecordStartingOffsets | ResetStoredOffsets


@dataclass(frozen=True)
class Plan:
    state: SupervisorState
    actions: list[Action]
    #: what went wrong with tasks (recorded in recentErrors)
    errors: list[str]
    #: what keeps the supervisor from reading some partitions; a run with any counts as failed
    blocked: list[str] = field(default_factory=list)
    #: the stream is read to its end and got nothing new for idleConfig's inactiveAfterMillis: no group is created
    #: (the reading ones end at taskDuration and publish) until new data arrives
    idle: bool = False


def group_of(partition: int, task_count: int) -> int:
    return partition % task_count


def plan(current: SupervisorState, obs: Observation, config: PlanConfig) -> Plan:
    state = copy.deepcopy(current)
    actions: list[Action] = []
    errors: list[str] = []
    blocked: list[str] = []
    _update_partitions(state, obs)
    _check_pending_completion(state, obs, actions, errors)
    _check_active_groups(state, obs, actions, errors)
    idle = False
    if config.suspended:
        actions += [EndGroup(group_id) for group_id in state.active]
    else:
        _check_task_duration(state, obs, config, actions)
        idle = _check_idle(state, obs, config)
        if not idle:
            _create_groups(state, obs, config, actions, errors, blocked)
    return Plan(state, actions, errors, blocked, idle)


def _update_partitions(state: SupervisorState, obs: Observation) -> None:
    for partition in obs.partitions:
        state.partition_offsets.setdefault(partition, NOT_SET)


def _check_pending_completion(state: SupervisorState, obs: Observation, actions: list[Action], errors: list[str]) -> None:
    """A publishing group is done when one replica succeeds; when all fail or it times out, it and every
    later group reading any of its partitions (publishing or reading, under any group id, since taskCount
    may have changed in between) are killed, and their partitions restart from the committed offsets."""
    for group in sorted((g for gs in state.pending.values() for g in gs), key=lambda g: g.generation):
        if not group.task_ids:
            continue  # already dropped as a later group of an earlier failure
        statuses = [obs.task_statuses.get(t, "FAILED") for t in group.task_ids]
        if "SUCCESS" in statuses:
            actions += [KillTask(t, "another replica published") for t in group.task_ids
                        if obs.task_statuses.get(t) == "RUNNING"]
            group.task_ids = set()
        elif "RUNNING" not in statuses or obs.now >= group.completion_deadline:
            reason = "all replicas failed to publish" if "RUNNING" not in statuses else "completionTimeout exceeded"
            errors.append(f"task group {group.group_id} ({', '.join(sorted(group.task_ids))}): {reason}")
            later = _later_pending_groups(state, group)
            errors += [f"task group {g.group_id} ({', '.join(sorted(g.task_ids))}): dropped, an earlier task group "
                       f"of its partitions failed to publish" for g in later]
            doomed = [group, *later, *_pop_reading_groups(state, set(group.starting_offsets))]
            actions += [KillTask(t, reason) for g in doomed for t in sorted(g.task_ids)
                        if obs.task_statuses.get(t) == "RUNNING"]
            for doomed_group in doomed:
                for partition in doomed_group.starting_offsets:
                    state.partition_offsets[partition] = NOT_SET
                doomed_group.task_ids = set()
    state.pending = {i: kept for i, gs in state.pending.items() if (kept := [g for g in gs if g.task_ids])}


def _later_pending_groups(state: SupervisorState, failed: TaskGroup) -> list[TaskGroup]:
    partitions = set(failed.starting_offsets)
    return [g for gs in state.pending.values() for g in gs
            if g.task_ids and g.generation > failed.generation and partitions & set(g.starting_offsets)]


def _pop_reading_groups(state: SupervisorState, partitions: set[int]) -> list[TaskGroup]:
    """Remove the reading groups of these partitions (by partition, so a changed taskCount is covered)."""
    return [state.active.pop(g) for g, group in list(state.active.items()) if partitions & set(group.starting_offsets)]


def _check_active_groups(state: SupervisorState, obs: Observation, actions: list[Action], errors: list[str]) -> None:
    """Failed or vanished replicas leave their group; an empty group is dropped and re-created at the
    same starting offsets (partitionOffsets did not move)."""
    for group_id, group in list(state.active.items()):
        for task_id in sorted(group.task_ids):
            status = obs.task_statuses.get(task_id, "FAILED")
            if status != "RUNNING":
                group.task_ids.discard(task_id)
                if status == "FAILED":
                    errors.append(f"task {task_id} of task group {group_id} failed while reading")
        if not group.task_ids:
            del state.active[group_id]


def _check_task_duration(state: SupervisorState, obs: Observation, config: PlanConfig, actions: list[Action]) -> None:
    """A group ends at taskDuration, or early when its partitions changed (new partitions join the next group).

    A group that has not read its first records while records wait for it is given up to FIRST_READ_GRACE more: a
    peon's first Spark job can take longer than taskDuration on a loaded machine, pausing abandons a read in
    flight, and ending the group would throw that read away only for the next group to start just as cold. It ends
    as soon as one of its replicas has read something; a read that is stuck rather than slow is still cut off."""
    assigned: dict[int, set[int]] = {}
    for partition in obs.partitions:
        assigned.setdefault(group_of(partition, config.task_count), set()).add(partition)
    for group_id, group in state.active.items():
        starts = [obs.task_start_times[t] for t in group.task_ids if t in obs.task_start_times]
        if group.started is None and starts:
            group.started = min(starts)
        expired = group.started is not None and obs.now >= group.started + config.task_duration
        waiting = expired and obs.now < group.started + config.task_duration + FIRST_READ_GRACE \
            and _waiting_for_first_read(group, obs)
        if set(group.starting_offsets) != assigned.get(group_id) or (expired and not waiting):
            actions.append(EndGroup(group_id))


def _waiting_for_first_read(group: TaskGroup, obs: Observation) -> bool:
    """No replica of the group has moved past its starting offsets, and the stream holds records past them."""
    start = group.starting_offsets
    return (all(obs.current_offsets.get(p, o) <= o for p, o in start.items())
            and any(obs.latest_offsets.get(p, o) > o for p, o in start.items()))


def _check_idle(state: SupervisorState, obs: Observation, config: PlanConfig) -> bool:
    """Druid's checkIfStreamInactiveAndTurnSupervisorIdle, by the rule its docs give: idle once the latest offsets
    have not moved for longer than idleConfig's inactiveAfterMillis and every partition is read up to them. (Its
    code restarts the wait after every run that still found unread data, so a slow catch-up delays IDLE by another
    inactiveAfterMillis.)"""
    if config.idle_after is None:
        return False
    if state.last_active is None or obs.latest_offsets != state.previous_latest_offsets:
        state.previous_latest_offsets = dict(obs.latest_offsets)
        state.last_active = obs.now
        return False
    read = _read_offsets(state, obs)
    caught_up = all(read.get(p, NOT_SET) >= latest for p, latest in obs.latest_offsets.items())
    return caught_up and obs.now - state.last_active > config.idle_after


def _read_offsets(state: SupervisorState, obs: Observation) -> dict[int, int]:
    """How far each partition is read: the furthest offset its reading replicas reached (their group's start while
    none has answered); for a partition no group reads, where the next group will start (the end of a publishing
    group, or what is committed). Partitions with none of these are left out."""
    read = {p: o for p in obs.partitions
            if (o := max(state.partition_offsets.get(p, NOT_SET), obs.stored_offsets.get(p, NOT_SET))) != NOT_SET}
    for group in state.active.values():
        for partition, start in group.starting_offsets.items():
            read[partition] = max(start, obs.current_offsets.get(partition, start))
    return read


def record_lag(state: SupervisorState, obs: Observation) -> dict[int, int]:
    """Druid's record lag per partition: the stream's latest offset minus how far the partition is read."""
    read = _read_offsets(state, obs)
    return {p: latest - read[p] for p, latest in sorted(obs.latest_offsets.items()) if p in read}


@dataclass(frozen=True)
class LagStats:
    """Druid's LagStats over the partitions' lags: their sum, the largest (at least 0) and the mean, truncated to a
    whole number as Java's long division does."""

    total: int
    max: int
    avg: int

    @classmethod
    def of(cls, partition_lags: dict[int, int]) -> LagStats:
        total = sum(partition_lags.values())
        return cls(total, max([0, *partition_lags.values()]), int(total / len(partition_lags)) if partition_lags else 0)


def _create_groups(state: SupervisorState, obs: Observation, config: PlanConfig, actions: list[Action],
                   errors: list[str], blocked: list[str]) -> None:
    ending = {a.group_id for a in actions if isinstance(a, EndGroup)}
    groups: dict[int, list[int]] = {}
    for partition in sorted(obs.partitions):
        groups.setdefault(group_of(partition, config.task_count), []).append(partition)
    first_offsets: dict[int, int] = {}
    reset_offsets: dict[int, int] = {}
    for group_id, partitions in groups.items():
        if group_id in ending:
            continue  # the next group starts once this one's end offsets are known
        if group_id not in state.active:
            starting = {p: _starting_offset(state, obs, config, p, first_offsets, reset_offsets, errors, blocked)
                        for p in partitions}
            if None in starting.values():
                continue  # a partition cannot be read: this group waits for an operator's reset
            name = sequence_name(config, group_id, starting, obs.now)
            state.active[group_id] = TaskGroup(group_id, starting, name, obs.now, state.next_generation)
            state.next_generation += 1
        missing = config.replicas - len(state.active[group_id].task_ids)
        actions += [StartTask(group_id)] * max(missing, 0)
    if reset_offsets:
        actions.insert(0, ResetStoredOffsets(reset_offsets))
    if first_offsets:
        actions.insert(0, RecordStartingOffsets(first_offsets))


def _starting_offset(state: SupervisorState, obs: Observation, config: PlanConfig, partition: int,
                     first_offsets: dict[int, int], reset_offsets: dict[int, int], errors: list[str],
                     blocked: list[str]) -> int | None:
    """Where a new group reads `partition` from: the previous group's end or the committed offset, whichever is
    further, else the initial one (recorded). An offset the stream no longer holds is never skipped silently."""
    offset = state.partition_offsets.get(partition, NOT_SET)
    # a group that checkpointed and then failed committed some of its sequences: what is committed is not read again
    offset = max(offset, obs.stored_offsets.get(partition, NOT_SET))
    if offset == NOT_SET:
        first_offsets[partition] = obs.initial_offsets[partition]
        return first_offsets[partition]
    if _available(obs, partition, offset):
        return offset
    if not config.reset_offset_automatically:
        blocked.append(_unavailable(obs, partition, offset))
        return None
    restart = reset_offsets[partition] = state.partition_offsets[partition] = _restart_offset(obs, config, partition)
    errors.append(f"Offsets were reset automatically, potential data duplication or loss: partition [{partition}] "
                  f"from [{offset}] to [{restart}]")
    return restart


def _available(obs: Observation, partition: int, offset: int) -> bool:
    earliest = obs.earliest_offsets.get(partition, offset)
    latest = obs.latest_offsets.get(partition, offset)
    return earliest <= offset <= latest


def _restart_offset(obs: Observation, config: PlanConfig, partition: int) -> int:
    return (obs.earliest_offsets if config.use_earliest_offset else obs.latest_offsets)[partition]


def _unavailable(obs: Observation, partition: int, offset: int) -> str:
    """Druid's message, plus what the stream holds now."""
    return (f"Previous sequenceNumber [{offset}] is no longer available for partition [{partition}] "
            f"(the stream holds [{obs.earliest_offsets.get(partition)}, {obs.latest_offsets.get(partition)}]). "
            f"You can clear the previous sequenceNumber and start reading from a valid message by using the "
            f"supervisor's reset API.")


def sequence_name(config: PlanConfig, group_id: int, starting_offsets: dict[int, int], created: datetime) -> str:
    """The name the group's replicas share, and so the key of their segment allocation: unique per group, never
    reused. A group created later at the same starting offsets (after a reset moved the committed offsets back)
    must not be handed the segment ids an earlier group already committed, or its rows would be skipped as
    segments that exist."""
    digest = hashlib.sha1(json.dumps([config.data_source, group_id, sorted(starting_offsets.items()),
                                      created.isoformat()]).encode())
    return f"index_kafka_{config.data_source}_{digest.hexdigest()[:15]}"


def end_group(current: SupervisorState, group_id: int, end_offsets: dict[int, int], deadline: datetime) -> SupervisorState:
    """After EndGroup: the group publishes up to `end_offsets`; the next group starts exactly there."""
    state = copy.deepcopy(current)
    group = state.active.pop(group_id)
    group.end_offsets = dict(end_offsets)
    group.completion_deadline = deadline
    state.pending.setdefault(group_id, []).append(group)
    state.partition_offsets.update(end_offsets)
    return state


def checkpoint_refusal(state: SupervisorState, group_id: int, start: dict[int, int]) -> tuple[str, bool] | None:
    """Druid's CheckpointNotice check. None: the group's latest sequence, which started at `start`, ends now.
    Otherwise why not, and whether that is an error: a group no longer reading ends its sequence at its final
    end offsets anyway, and a replica's request for a sequence another replica's request already ended is
    expected; a `start` that is none of the group's checkpoints is not."""
    group = state.active.get(group_id)
    if group is None:
        return f"task group {group_id} is not reading any more; its tasks publish at their end offsets", False
    latest = group.checkpoint_sequences[max(group.checkpoint_sequences)]
    if start == latest:
        return None
    if start in group.checkpoint_sequences.values():
        return f"task group {group_id} already checkpointed at {latest} (a replica asked first)", False
    return f"No such previous checkpoint [{start}] found for task group {group_id}", True


def add_checkpoint(current: SupervisorState, group_id: int, end: dict[int, int]) -> SupervisorState:
    """After a checkpoint: the group's replicas read on into a new sequence starting at `end`."""
    state = copy.deepcopy(current)
    group = state.active[group_id]
    group.checkpoint_sequences[max(group.checkpoint_sequences) + 1] = dict(end)
    return state


def adopt(state: SupervisorState, discovered: list[DiscoveredTask], config: PlanConfig,
          now: datetime) -> tuple[SupervisorState, list[KillTask]]:
    """Druid's discoverTasks: running tasks a previous overlord left become this supervisor's groups when
    their spec is this one's and their partitions are still their group's under taskCount; the others are
    killed (they commit nothing, and new groups start from the committed offsets).

    Publishing tasks become pending-completion groups, given a fresh completionTimeout, and the next group
    of their partitions starts where they end; reading tasks become the reading group of their group id
    (replicas share a base sequence name; a second, different group for the same id is killed).
    """
    state = copy.deepcopy(state)
    kills: list[KillTask] = []
    publishing_first = sorted(discovered, key=lambda t: (t.end_offsets is None, sorted(t.starting_offsets.items())))
    for task in publishing_first:
        if not task.same_spec or not task.starting_offsets or any(
                group_of(p, config.task_count) != task.group_id for p in task.starting_offsets):
            kills.append(KillTask(task.task_id, "left by a previous overlord with another spec or partitioning"))
            continue
        if task.end_offsets is not None:
            group = next((g for g in state.pending.get(task.group_id, [])
                          if g.base_sequence_name == task.base_sequence_name), None)
            if group is None:
                group = TaskGroup(task.group_id, dict(task.starting_offsets), task.base_sequence_name, task.created,
                                  state.next_generation, end_offsets=dict(task.end_offsets),
                                  completion_deadline=now + config.completion_timeout)
                state.next_generation += 1
                state.pending.setdefault(task.group_id, []).append(group)
                for partition, offset in task.end_offsets.items():
                    state.partition_offsets[partition] = max(state.partition_offsets.get(partition, NOT_SET), offset)
            group.task_ids.add(task.task_id)
            continue
        group = state.active.get(task.group_id)
        if group is None:
            group = TaskGroup(task.group_id, dict(task.starting_offsets), task.base_sequence_name, task.created,
                              state.next_generation, checkpoint_sequences=dict(task.checkpoints))
            state.next_generation += 1
            state.active[task.group_id] = group
        if group.base_sequence_name != task.base_sequence_name:
            kills.append(KillTask(task.task_id, "another task group already reads its partitions"))
            continue
        group.task_ids.add(task.task_id)
    return state, kills
