"""Properties of the supervisor's decisions: random histories in, Druid's supervisor invariants out.

A history is a run of RunNotices. Between two of them the world moves: replicas fail or vanish, publishing
replicas commit (a compare-and-swap of the stored offsets from their start to their end, as
`KafkaIndexTask._commit` does) or wait for an earlier generation, the clock advances past taskDuration
and completionTimeout, the stream grows, and partitions may be added. Each notice observes the world,
calls `plan`, and carries the actions out as `stream_supervisor.py` does: StartTask adds a fresh task id to
its group, EndGroup pauses the group and calls `end_group` with end offsets at or past its starting
offsets, KillTask makes the task vanish, RecordStartingOffsets stores offsets next to the committed ones.

Alongside, the test keeps its own account of Druid's rules (which publishing groups succeeded or failed,
and where each partition's next group must start) and checks the decisions against it after every step.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.overlord.supervisor.plan import (
    NOT_SET, EndGroup, KillTask, Observation, Plan, PlanConfig, RecordStartingOffsets, StartTask, SupervisorState,
    TaskGroup, end_group, group_of, plan,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TASK_DURATION = timedelta(minutes=10)
MAX_PARTITIONS = 8

RUNNING, SUCCESS, FAILED, GONE = "RUNNING", "SUCCESS", "FAILED", "GONE"

UPDATES = pytest.mark.parametrize("updates", [False, True], ids=["fixed-spec", "spec-updates"])
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: for a property that fails on purpose (a known bug): report the first failing history, do not spend minutes shrinking


@dataclass
class Task:
    """A task as the world knows it: where it reads from, where it was told to stop, how it ended."""

    start: dict[int, int]
    end: dict[int, int] | None = None
    status: str = RUNNING  # RUNNING, SUCCESS, FAILED, or GONE (the runner no longer knows it)


@dataclass
class Step:
    """One RunNotice: what `plan` was given and decided, what the rules say it had to decide, and the
    state after the runner carried the actions out."""

    config: PlanConfig
    given: SupervisorState
    observation: Observation
    decided: Plan
    after: SupervisorState
    #: the publishing groups that finished (a replica succeeded) or failed (every replica failed, or timed out)
    published: list[TaskGroup]
    failed: list[TaskGroup]
    #: where each partition's next group starts, per the rules: the end offsets last handed out, or NOT_SET
    #: (= the committed offsets) after a publishing group of the partition failed
    expected_offsets: dict[int, int]
    #: the end offsets last handed out (EndGroup), whatever failed since
    last_end: dict[int, int]
    first_seen: dict[int, datetime]
    tasks: dict[str, Task]


@dataclass
class World:
    config: PlanConfig
    partitions: list[int]
    #: the committed offsets (druid_dataSource)
    stored: dict[int, int]
    #: the stream's latest offsets: where a partition with nothing committed starts
    latest: dict[int, int]
    now: datetime = T0
    state: SupervisorState = field(default_factory=SupervisorState)
    tasks: dict[str, Task] = field(default_factory=dict)
    partition_offsets: dict[int, int] = field(default_factory=dict)
    last_end: dict[int, int] = field(default_factory=dict)
    first_seen: dict[int, datetime] = field(default_factory=dict)
    ids: count = field(default_factory=count)

    # ---- the world between two RunNotices ----

    def running(self) -> list[str]:
        return sorted(t for t, task in self.tasks.items() if task.status == RUNNING)

    def publish(self, task_id: str, crash_after_commit: str | None = None) -> None:
        """What a publishing task does (KafkaIndexTask._publish/_commit): commit start -> end if the stored
        offsets are at its start; succeed if a replica already committed; wait while an earlier generation
        has not committed yet; fail otherwise."""
        task = self.tasks[task_id]
        assert task.end is not None
        if task.start == task.end:
            task.status = SUCCESS  # nothing read: nothing to commit
        elif all(self.stored.get(p, o) == o for p, o in task.start.items()):
            self.stored.update(task.end)
            task.status = crash_after_commit or SUCCESS
        elif all(self.stored.get(p) == o for p, o in task.end.items()):
            task.status = SUCCESS  # a replica won the race
        elif not all(self.stored.get(p, o) <= o for p, o in task.start.items()):
            task.status = FAILED  # "publish failed"; waiting would never end

    def happen(self, data: st.DataObject) -> None:
        for _ in range(data.draw(st.integers(0, 3), label="events")):
            running = self.running()
            if not running:
                break
            task_id = data.draw(st.sampled_from(running), label="task")
            if self.tasks[task_id].end is None:
                outcome = data.draw(st.sampled_from([FAILED, GONE]), label="reading task ends")
                self.tasks[task_id].status = outcome
            else:
                outcome = data.draw(st.sampled_from(["publish", "publish", FAILED, GONE, "commit+FAILED",
                                                     "commit+GONE"]), label="publishing task does")
                if outcome == "publish":
                    self.publish(task_id)
                elif outcome.startswith("commit+"):
                    self.publish(task_id, crash_after_commit=outcome.removeprefix("commit+"))
                else:
                    self.tasks[task_id].status = outcome
        minutes = (TASK_DURATION + self.config.completion_timeout) // timedelta(minutes=1) + 1
        self.now += timedelta(minutes=data.draw(st.sampled_from([0, 1]) | st.integers(0, minutes), label="minutes"))
        growth = data.draw(st.integers(0, 5), label="new messages")
        self.latest = {p: o + growth for p, o in self.latest.items()}
        if len(self.partitions) < MAX_PARTITIONS and data.draw(st.booleans(), label="add partition?") \
                and data.draw(st.booleans()):
            partition = len(self.partitions)
            self.partitions.append(partition)
            self.latest[partition] = data.draw(st.integers(0, 100), label="new partition's latest")

    def update_spec(self, data: st.DataObject) -> None:
        """supervisor_manager.create_or_update: the old supervisor ends every reading group (_end_all_groups)
        and the new one takes its state over under the new spec."""
        for group_id in list(self.state.active):
            self.carry_out(EndGroup(group_id), data, None)
        self.config = replace(self.config, task_count=data.draw(st.integers(1, 4), label="new taskCount"),
                              replicas=data.draw(st.integers(1, 2), label="new replicas"))

    # ---- one RunNotice ----

    def observe(self) -> Observation:
        for partition in self.partitions:
            self.first_seen.setdefault(partition, self.now)
        known = {t for g in self.state.active.values() for t in g.task_ids}
        known |= {t for groups in self.state.pending.values() for g in groups for t in g.task_ids}
        statuses = {t: self.tasks[t].status for t in known if self.tasks[t].status != GONE}
        initial = {p: self.latest[p] for p in self.partitions if p not in self.stored}
        # tasks start reading as soon as they are created (the slow-start rule has its own unit test)
        starts = {t: g.created for g in self.state.active.values() for t in g.task_ids if statuses.get(t) == "RUNNING"}
        return Observation(self.now, list(self.partitions), dict(self.stored), initial, statuses, task_start_times=starts)

    def step(self, data: st.DataObject, end_offsets: Callable[[dict[int, int]], dict[int, int]] | None = None) -> Step:
        observation = self.observe()
        given_state, given_observation = copy.deepcopy(self.state), copy.deepcopy(observation)
        published, failed = judge_publishing_groups(self.state, observation)
        for group in failed:  # it and the later groups of its partitions go back to the committed offsets
            for dropped in [group, *later_groups(self.state, group)]:
                self.partition_offsets.update({p: NOT_SET for p in dropped.starting_offsets})
        expected_offsets = {p: self.partition_offsets.get(p, NOT_SET) for p in self.partitions}
        last_end = dict(self.last_end)
        decided = plan(self.state, observation, self.config)
        assert (self.state, observation) == (given_state, given_observation), "plan changed what it was given"
        # the runner goes on changing the state it adopts (task ids join groups); keep what plan returned
        returned = Plan(copy.deepcopy(decided.state), list(decided.actions), list(decided.errors))
        self.state = decided.state
        for action in decided.actions:
            self.carry_out(action, data, end_offsets)
        return Step(self.config, given_state, observation, returned, self.state, published, failed,
                    expected_offsets, last_end, dict(self.first_seen), self.tasks)

    def carry_out(self, action: object, data: st.DataObject,
                  end_offsets: Callable[[dict[int, int]], dict[int, int]] | None) -> None:
        """As StreamSupervisor._execute does."""
        if isinstance(action, RecordStartingOffsets):
            self.stored.update(action.offsets)
        elif isinstance(action, StartTask):
            group = self.state.active[action.group_id]
            task_id = f"task{next(self.ids)}"
            self.tasks[task_id] = Task(dict(group.starting_offsets))
            group.task_ids.add(task_id)
        elif isinstance(action, KillTask):
            self.tasks[action.task_id].status = GONE
        elif isinstance(action, EndGroup):
            group = self.state.active[action.group_id]
            paused = {t for t in group.task_ids if self.tasks[t].status == RUNNING}
            for task_id in group.task_ids - paused:
                self.tasks[task_id].status = GONE
            if not paused:
                del self.state.active[action.group_id]
                return
            if end_offsets is None:
                end = {p: o + data.draw(st.integers(0, 3), label="read") for p, o in group.starting_offsets.items()}
            else:
                end = end_offsets(group.starting_offsets)
            for task_id in paused:
                self.tasks[task_id].end = dict(end)
            group.task_ids = paused
            self.state = end_group(self.state, action.group_id, end, self.now + self.config.completion_timeout)
            self.partition_offsets.update(end)
            self.last_end.update(end)
        else:
            raise AssertionError(f"unknown action {action!r}")


def generation(group: TaskGroup) -> int:
    """Groups in the order they were created: a group's first task starts after every task of the groups
    before it on its partitions (task ids are numbered in start order)."""
    return min(int(t.removeprefix("task")) for t in group.task_ids)


def later_groups(state: SupervisorState, group: TaskGroup) -> list[TaskGroup]:
    """The publishing and reading groups created after `group` that share a partition with it."""
    groups = [g for gs in state.pending.values() for g in gs] + list(state.active.values())
    return [g for g in groups if g.task_ids and set(g.starting_offsets) & set(group.starting_offsets)
            and generation(g) > generation(group)]


def judge_publishing_groups(state: SupervisorState, observation: Observation) -> tuple[list[TaskGroup], list[TaskGroup]]:
    """Druid's rule, oldest group first: a publishing group is done when a replica succeeded; it failed
    when no replica is left running or its completionTimeout passed, and then the later groups of its
    partitions go with it (so they are not judged)."""
    published, failed, dropped = [], [], []
    for group in sorted((g for gs in state.pending.values() for g in gs), key=generation):
        if group in dropped:
            continue
        statuses = {observation.task_statuses.get(t, GONE) for t in group.task_ids}
        if SUCCESS in statuses:
            published.append(group)
        elif RUNNING not in statuses or observation.now >= group.completion_deadline:
            failed.append(group)
            dropped += later_groups(state, group)
    return published, failed


@st.composite
def worlds(draw: st.DrawFn) -> World:
    partitions = draw(st.integers(1, MAX_PARTITIONS), label="partitions")
    config = PlanConfig("wiki", task_count=draw(st.integers(1, 4), label="taskCount"),
                        replicas=draw(st.integers(1, 2), label="replicas"), task_duration=TASK_DURATION,
                        completion_timeout=draw(st.sampled_from([timedelta(minutes=5), timedelta(minutes=30)]),
                                                label="completionTimeout"))
    stored = draw(st.dictionaries(st.integers(0, partitions - 1), st.integers(0, 100)), label="committed")
    latest = {p: stored.get(p, 0) + draw(st.integers(0, 100)) for p in range(partitions)}
    return World(config, list(range(partitions)), stored, latest)


def history(data: st.DataObject, check: Callable[[Step], None], updates: bool = False) -> World:
    """A random history, `check` after every RunNotice; with `updates`, the spec is resubmitted now and then
    with another taskCount and replicas."""
    world = data.draw(worlds())
    for _ in range(data.draw(st.integers(1, 12), label="notices")):
        world.happen(data)
        if updates and data.draw(st.integers(0, 3), label="update spec?") == 0:
            world.update_spec(data)
        check(world.step(data))
    return world


def ending(step: Step) -> set[int]:
    return {a.group_id for a in step.decided.actions if isinstance(a, EndGroup)}


def new_groups(step: Step) -> dict[int, TaskGroup]:
    """Groups `plan` created in this step (they have no task yet when it returns)."""
    return {g: group for g, group in step.decided.state.active.items() if not group.task_ids}


# ---------------------------------------------------------------------------------------------------------------
# properties


@UPDATES
@PROPERTY
@given(data=st.data())
def test_plan_never_mutates_its_input(data, updates):
    history(data, lambda step: None, updates)  # World.step compares what plan was given before and after


@UPDATES
@PROPERTY
@given(data=st.data())
def test_every_partition_belongs_to_exactly_one_reading_group_unless_its_group_is_ending(data, updates):
    def check(step: Step) -> None:
        active = step.after.active
        owners: dict[int, int] = {}
        for group_id, group in active.items():
            assert group.group_id == group_id
            for partition in group.starting_offsets:
                assert group_of(partition, step.config.task_count) == group_id
                assert partition not in owners, f"partition {partition} is read by groups {owners[partition]}, {group_id}"
                owners[partition] = group_id
        for partition in step.observation.partitions:
            group_id = group_of(partition, step.config.task_count)
            if group_id in ending(step):
                continue
            assert group_id in active, f"partition {partition}: no reading group {group_id}"
            # a partition added while its group was reading joins the next group of that id
            if step.first_seen[partition] <= active[group_id].created:
                assert partition in owners, f"partition {partition} is not read by group {group_id}"

    history(data, check, updates)


@UPDATES
@PROPERTY
@given(data=st.data())
def test_a_new_group_starts_where_the_previous_one_ended_or_at_the_committed_or_initial_offsets(data, updates):
    def check(step: Step) -> None:
        obs = step.observation
        for group_id, group in new_groups(step).items():
            for partition, offset in group.starting_offsets.items():
                committed = obs.stored_offsets.get(partition, obs.initial_offsets.get(partition))
                allowed = {committed, step.last_end.get(partition, committed)}
                assert offset in allowed, (f"group {group_id} starts partition {partition} at {offset}; the last end "
                                           f"offset is {step.last_end.get(partition)}, committed/initial {committed}")
                if updates:
                    continue  # which groups go when an old generation fails is not settled after a taskCount change
                previous_end = step.expected_offsets[partition]
                if previous_end != NOT_SET:
                    assert offset == previous_end, (
                        f"group {group_id} starts partition {partition} at {offset}, not at the end offset "
                        f"{previous_end} of the group before it")
                else:
                    assert offset == committed, f"group {group_id} starts partition {partition} at {offset}, not {committed}"

    history(data, check, updates)


@UPDATES
@PROPERTY
@given(data=st.data())
def test_partition_offsets_are_the_last_end_offsets_or_not_set_after_a_failed_publish(data, updates):
    def check(step: Step) -> None:
        offsets = step.decided.state.partition_offsets
        for group in step.failed:
            assert all(offsets[p] == NOT_SET for p in group.starting_offsets)
        for partition, expected in step.expected_offsets.items():
            assert offsets.get(partition, NOT_SET) in {NOT_SET, step.last_end.get(partition, NOT_SET)}
            if not updates:
                assert offsets.get(partition, NOT_SET) == expected

    history(data, check, updates)


#: found by the spec-updates case below; minimal example: test_after_a_task_count_change_a_failed_old_generation_...

@pytest.mark.parametrize("updates", [False, True], ids=["fixed-spec", "spec-updates"])
@PROPERTY
@given(data=st.data())
def test_a_failed_publish_drops_its_group_and_every_later_group_of_its_partitions(data, updates):
    def check(step: Step) -> None:
        decided = step.decided
        killed = [a.task_id for a in decided.actions if isinstance(a, KillTask)]
        assert len(killed) == len(set(killed)), f"a task is killed twice: {killed}"
        assert all(step.observation.task_statuses.get(t) == RUNNING for t in killed)
        for group in step.failed:
            partitions = set(group.starting_offsets)
            for dropped in [group, *later_groups(step.given, group)]:
                running = {t for t in dropped.task_ids if step.observation.task_statuses.get(t) == RUNNING}
                assert running <= set(killed), f"replicas {sorted(running - set(killed))} of a dropped group live on"
            assert not [g for gs in decided.state.pending.values() for g in gs if partitions & set(g.starting_offsets)
                        and generation(g) >= generation(group)], "a later publishing group of the partitions is kept"
            assert all(not g.task_ids for g in decided.state.active.values() if partitions & set(g.starting_offsets))
            assert any(group.group_id == int(e.split()[2]) for e in decided.errors if e.startswith("task group "))
        for group in step.published:  # a group's task ids are its identity: no other group has them
            assert not [g for g in decided.state.pending.get(group.group_id, []) if g.task_ids & group.task_ids]
            running = {t for t in group.task_ids if step.observation.task_statuses.get(t) == RUNNING}
            assert running <= set(killed), f"replicas {sorted(running - set(killed))} of a published group live on"

    history(data, check, updates)


@UPDATES
@PROPERTY
@given(data=st.data())
def test_reading_groups_have_exactly_replicas_running_tasks_once_the_actions_are_carried_out(data, updates):
    def check(step: Step) -> None:
        replicas = step.config.replicas
        for group_id, group in step.decided.state.active.items():
            assert len(group.task_ids) <= replicas
            starts = step.decided.actions.count(StartTask(group_id))
            assert starts == (0 if group_id in ending(step) else replicas - len(group.task_ids))
        for group_id, group in step.after.active.items():
            assert len(group.task_ids) == replicas, f"group {group_id} has {len(group.task_ids)} of {replicas}"
            assert {step.tasks[t].status for t in group.task_ids} == {RUNNING}, "a failed or vanished replica is counted"
            assert {step.tasks[t].start == group.starting_offsets for t in group.task_ids} == {True}

    history(data, check, updates)


@UPDATES
@PROPERTY
@given(data=st.data())
def test_publishing_groups_end_at_or_after_their_start(data, updates):
    def check(step: Step) -> None:
        for groups in step.after.pending.values():
            for group in groups:
                assert group.end_offsets is not None and group.completion_deadline is not None
                assert group.end_offsets.keys() == group.starting_offsets.keys()
                assert all(group.end_offsets[p] >= o for p, o in group.starting_offsets.items())
                assert all(step.tasks[t].end == group.end_offsets for t in group.task_ids)

    history(data, check, updates)


@UPDATES
@PROPERTY
@given(data=st.data())
def test_a_group_ends_exactly_when_its_task_duration_is_over_or_its_partitions_changed(data, updates):
    def check(step: Step) -> None:
        obs = step.observation
        assigned: dict[int, set[int]] = {}
        for partition in obs.partitions:
            assigned.setdefault(group_of(partition, step.config.task_count), set()).add(partition)
        expected = {g for g, group in step.given.active.items()
                    if (obs.now >= group.created + step.config.task_duration
                        or set(group.starting_offsets) != assigned.get(g))  # partitions were added: end early
                    and any(obs.task_statuses.get(t) == RUNNING for t in group.task_ids)
                    and not any(set(group.starting_offsets) & set(f.starting_offsets) for f in step.failed)}
        assert ending(step) == expected

    history(data, check, updates)


@UPDATES
@PROPERTY
@given(data=st.data())
def test_no_task_is_left_running_without_a_group_and_no_committed_offset_is_overwritten(data, updates):
    def check(step: Step) -> None:
        for action in step.decided.actions:
            if isinstance(action, RecordStartingOffsets):
                assert not set(action.offsets) & set(step.observation.stored_offsets)
                assert action.offsets == {p: step.observation.initial_offsets[p] for p in action.offsets}
        tracked = [t for g in step.after.active.values() for t in g.task_ids]
        tracked += [t for groups in step.after.pending.values() for g in groups for t in g.task_ids]
        assert len(tracked) == len(set(tracked)), "a task is in two groups"
        orphans = {t for t, task in step.tasks.items() if task.status == RUNNING} - set(tracked)
        assert not orphans, f"running tasks no group tracks (they could still publish): {sorted(orphans)}"

    history(data, check, updates)


@UPDATES
@PROPERTY
@given(data=st.data())
def test_once_failures_stop_every_partition_commits_again(data, updates):
    """Liveness: after any history, a few RunNotices in which every task publishes as soon as it can (and the
    clock passes taskDuration and completionTimeout) move every partition's committed offset forward."""
    world = history(data, lambda step: None, updates)
    before = {p: world.stored.get(p, -1) for p in world.partitions}
    for _ in range(6):
        for _ in range(3):  # oldest generations first: a later one may be waiting for an earlier one
            for task_id in world.running():
                if world.tasks[task_id].end is not None:
                    world.publish(task_id)
        world.now += TASK_DURATION + world.config.completion_timeout + timedelta(minutes=1)
        world.step(data, end_offsets=lambda start: {p: o + 1 for p, o in start.items()})
    stuck = {p: (before[p], world.stored.get(p)) for p in world.partitions if world.stored.get(p, -1) <= before[p]}
    assert not stuck, f"partitions that did not commit again (before, after): {stuck}"


@UPDATES
@PROPERTY
@given(data=st.data())
def test_a_suspended_supervisor_starts_nothing_and_ends_every_reading_group(data, updates):
    world = history(data, lambda step: None, updates)
    world.config = replace(world.config, suspended=True)
    for _ in range(3):
        world.happen(data)
        step = world.step(data)
        assert not [a for a in step.decided.actions if isinstance(a, StartTask | RecordStartingOffsets)]
        assert ending(step) == set(step.decided.state.active)
        assert step.after.active == {}


def test_after_a_task_count_change_a_failed_old_generation_drops_the_later_generation_of_another_group_id():
    one_by_one = PlanConfig("wiki", task_count=1, replicas=1, task_duration=TASK_DURATION,
                            completion_timeout=timedelta(minutes=30))
    world = World(one_by_one, partitions=[0, 1], stored={}, latest={0: 0, 1: 0})
    read = lambda n: lambda start: {p: o + n for p, o in start.items()}  # noqa: E731
    world.step(None, read(5))  # task0 reads partitions 0 and 1 from 0
    for group_id in list(world.state.active):  # the spec is resubmitted with taskCount 2: task0 ends at 5, 5
        world.carry_out(EndGroup(group_id), None, read(5))
    world.config = replace(one_by_one, task_count=2)
    world.step(None, read(2))  # task1 reads partition 0 from 5, task2 partition 1 from 5 (group 1)
    world.now += TASK_DURATION
    world.step(None, read(2))  # both end at 7 and publish; they wait for task0's commit
    assert [g.task_ids for g in world.state.pending[1]] == [{"task2"}]

    world.tasks["task0"].status = FAILED  # task0's publish fails: nothing of partitions 0 and 1 is committed
    step = world.step(None, read(2))
    assert step.decided.state.partition_offsets == {0: NOT_SET, 1: NOT_SET}
    assert step.decided.state.active[1].starting_offsets == {1: 0}  # partition 1 is read again from 0 ...
    killed = {a.task_id for a in step.decided.actions if isinstance(a, KillTask)}
    assert killed == {"task1", "task2"}  # ... so task2 (5 -> 7, group 1) must go, as task1 (group 0) does
