"""The supervisor's decisions: observations in -> state and actions out, no servers involved."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sluice.overlord.supervisor.plan import (
    FIRST_READ_GRACE, NOT_SET, DiscoveredTask, EndGroup, KillTask, LagStats, Observation, PlanConfig,
    RecordStartingOffsets, ResetStoredOffsets, StartTask, SupervisorState, add_checkpoint, adopt, checkpoint_refusal,
    end_group, plan, record_lag,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = PlanConfig("wiki", task_count=2, replicas=1, task_duration=timedelta(minutes=10),
                    completion_timeout=timedelta(minutes=5))


def observe(now=T0, partitions=(0, 1, 2, 3), stored=None, initial=None, statuses=None) -> Observation:
    return Observation(now, list(partitions), stored or {}, initial if initial is not None else
                       {p: 0 for p in partitions if p not in (stored or {})}, statuses or {})


def started(state: SupervisorState, ids: dict[int, str]) -> SupervisorState:
    """What the runner does after StartTask: the task id joins its group."""
    for group_id, task_id in ids.items():
        state.active[group_id].task_ids.add(task_id)
        state.active[group_id].started = state.active[group_id].created
    return state


def test_first_run_groups_partitions_by_modulo_and_records_starting_offsets():
    decided = plan(SupervisorState(), observe(initial={0: 5, 1: 6, 2: 7, 3: 8}), CONFIG)
    assert decided.actions == [RecordStartingOffsets({0: 5, 1: 6, 2: 7, 3: 8}), StartTask(0), StartTask(1)]
    assert decided.state.active[0].starting_offsets == {0: 5, 2: 7}
    assert decided.state.active[1].starting_offsets == {1: 6, 3: 8}


def test_stored_offsets_win_over_initial_ones_and_are_not_recorded_again():
    decided = plan(SupervisorState(), observe(stored={0: 100, 1: 200, 2: 300, 3: 400}), CONFIG)
    assert decided.actions == [StartTask(0), StartTask(1)]
    assert decided.state.active[0].starting_offsets == {0: 100, 2: 300}


def test_replicas_get_the_same_group_and_sequence():
    config = PlanConfig("wiki", 1, 2, timedelta(minutes=10), timedelta(minutes=5))
    decided = plan(SupervisorState(), observe(partitions=(0,)), config)
    assert decided.actions.count(StartTask(0)) == 2
    assert len(decided.state.active) == 1


def test_running_groups_are_left_alone():
    state = started(plan(SupervisorState(), observe(), CONFIG).state, {0: "a", 1: "b"})
    decided = plan(state, observe(now=T0 + timedelta(minutes=1), statuses={"a": "RUNNING", "b": "RUNNING"}), CONFIG)
    assert decided.actions == []
    assert decided.state.active.keys() == {0, 1}


def test_task_duration_ends_the_group_and_the_next_starts_at_its_end_offsets():
    state = started(plan(SupervisorState(), observe(), CONFIG).state, {0: "a", 1: "b"})
    later = T0 + timedelta(minutes=10)
    decided = plan(state, observe(now=later, statuses={"a": "RUNNING", "b": "RUNNING"}), CONFIG)
    assert decided.actions == [EndGroup(0), EndGroup(1)]

    state = end_group(decided.state, 0, {0: 50, 2: 70}, later + CONFIG.completion_timeout)
    assert state.pending[0][0].end_offsets == {0: 50, 2: 70}
    assert state.partition_offsets[0] == 50 and state.partition_offsets[2] == 70
    decided = plan(state, observe(now=later, stored={0: 0, 1: 0, 2: 0, 3: 0}, statuses={"a": "RUNNING", "b": "RUNNING"}),
                   CONFIG)
    assert StartTask(0) in decided.actions
    assert decided.state.active[0].starting_offsets == {0: 50, 2: 70}  # not the stored 0s: no gap, no overlap


def test_a_published_group_is_forgotten_and_its_other_replicas_stopped():
    state = SupervisorState()
    state = started(plan(state, observe(partitions=(0,)), PlanConfig("w", 1, 2, timedelta(1), timedelta(1))).state,
                    {0: "a"})
    state.active[0].task_ids.add("a2")
    state = end_group(state, 0, {0: 10}, T0 + timedelta(hours=1))
    decided = plan(state, observe(partitions=(0,), statuses={"a": "SUCCESS", "a2": "RUNNING"}),
                   PlanConfig("w", 1, 2, timedelta(1), timedelta(1)))
    assert KillTask("a2", "another replica published") in decided.actions
    assert decided.state.pending == {}


@pytest.mark.parametrize("statuses, now, reason", [
    ({"a": "FAILED", "n": "RUNNING"}, T0, "all replicas failed to publish"),
    ({"a": "RUNNING", "n": "RUNNING"}, T0 + timedelta(minutes=6), "completionTimeout exceeded"),
])
def test_a_failed_publish_kills_the_later_group_and_restarts_from_committed_offsets(statuses, now, reason):
    state = started(plan(SupervisorState(), observe(partitions=(0,)), CONFIG).state, {0: "a"})
    state = end_group(state, 0, {0: 10}, T0 + CONFIG.completion_timeout)
    state = started(plan(state, observe(partitions=(0,), statuses={"a": "RUNNING"}), CONFIG).state, {0: "n"})
    assert state.active[0].starting_offsets == {0: 10}

    decided = plan(state, observe(now=now, partitions=(0,), stored={0: 0}, statuses=statuses), CONFIG)
    assert KillTask("n", reason) in decided.actions
    assert any(reason in e for e in decided.errors)
    assert decided.state.partition_offsets[0] == NOT_SET
    assert decided.state.active[0].starting_offsets == {0: 0}  # back to what is committed
    assert decided.state.pending == {}


def test_a_failed_reading_task_is_replaced_at_the_same_starting_offsets():
    state = started(plan(SupervisorState(), observe(stored={p: 7 for p in range(4)}), CONFIG).state, {0: "a", 1: "b"})
    decided = plan(state, observe(stored={p: 7 for p in range(4)}, statuses={"a": "FAILED", "b": "RUNNING"}), CONFIG)
    assert decided.actions == [StartTask(0)]
    assert decided.state.active[0].starting_offsets == {0: 7, 2: 7}
    assert any("failed while reading" in e for e in decided.errors)


def test_a_vanished_task_counts_as_failed():
    stored = {p: 0 for p in range(4)}
    state = started(plan(SupervisorState(), observe(stored=stored), CONFIG).state, {0: "a", 1: "b"})
    decided = plan(state, observe(stored=stored, statuses={"b": "RUNNING"}), CONFIG)
    assert decided.actions == [StartTask(0)]


def test_plan_does_not_mutate_its_input():
    state = started(plan(SupervisorState(), observe(), CONFIG).state, {0: "a", 1: "b"})
    before = repr(state)
    plan(state, observe(now=T0 + timedelta(hours=1), statuses={"a": "FAILED"}), CONFIG)
    assert repr(state) == before


def test_a_suspended_supervisor_ends_its_reading_groups_and_starts_none():
    state = started(plan(SupervisorState(), observe(), CONFIG).state, {0: "a", 1: "b"})
    suspended = PlanConfig(**{**CONFIG.__dict__, "suspended": True})
    decided = plan(state, observe(statuses={"a": "RUNNING", "b": "RUNNING"}), suspended)
    assert decided.actions == [EndGroup(0), EndGroup(1)]
    assert plan(SupervisorState(), observe(), suspended).actions == []


def test_a_failed_publish_kills_reading_groups_of_its_partitions_even_after_a_task_count_change():
    state = started(plan(SupervisorState(), observe(partitions=(0, 1)), PlanConfig(**{**CONFIG.__dict__, "task_count": 1})
                         ).state, {0: "old"})
    state = end_group(state, 0, {0: 10, 1: 10}, T0 + CONFIG.completion_timeout)
    state = started(plan(state, observe(partitions=(0, 1), statuses={"old": "RUNNING"}), CONFIG).state,
                    {0: "new0", 1: "new1"})  # taskCount is now 2: groups 0 and 1 read partitions 0 and 1
    decided = plan(state, observe(partitions=(0, 1), stored={0: 0, 1: 0},
                                  statuses={"old": "FAILED", "new0": "RUNNING", "new1": "RUNNING"}), CONFIG)
    killed = {a.task_id for a in decided.actions if isinstance(a, KillTask)}
    assert killed == {"new0", "new1"}
    assert {g.starting_offsets[p] for g in decided.state.active.values() for p in g.starting_offsets} == {0}


def test_a_new_partition_ends_its_group_early_and_joins_the_next_one():
    stored = {0: 4, 1: 4}
    state = started(plan(SupervisorState(), observe(partitions=(0, 1), stored=stored), CONFIG).state, {0: "a", 1: "b"})
    grown = observe(partitions=(0, 1, 2), stored=stored, initial={2: 0}, statuses={"a": "RUNNING", "b": "RUNNING"})
    decided = plan(state, grown, CONFIG)
    assert decided.actions == [EndGroup(0)]  # partition 2 belongs to group 0; group 1 reads on

    state = end_group(decided.state, 0, {0: 9}, T0 + CONFIG.completion_timeout)
    decided = plan(state, grown, CONFIG)
    assert decided.actions == [RecordStartingOffsets({2: 0}), StartTask(0)]
    assert decided.state.active[0].starting_offsets == {0: 9, 2: 0}


def gone(stored, earliest, latest, **config):
    """The stream no longer holds the committed offsets (retention, or the topic was re-created)."""
    cfg = PlanConfig(**{**CONFIG.__dict__, "task_count": 1, **config})
    obs = Observation(T0, [0, 1], stored, {}, {}, earliest_offsets=earliest, latest_offsets=latest)
    return plan(SupervisorState(), obs, cfg)


def test_offsets_gone_from_the_stream_block_the_group_with_a_clear_error():
    decided = gone({0: 500, 1: 20}, earliest={0: 0, 1: 0}, latest={0: 100, 1: 100})
    assert decided.actions == [] and decided.state.active == {}
    assert decided.blocked == [
        "Previous sequenceNumber [500] is no longer available for partition [0] (the stream holds [0, 100]). "
        "You can clear the previous sequenceNumber and start reading from a valid message by using the "
        "supervisor's reset API."]


@pytest.mark.parametrize("use_earliest, restart", [(True, 0), (False, 100)])
def test_reset_offset_automatically_restarts_the_partition_and_says_so(use_earliest, restart):
    decided = gone({0: 500, 1: 20}, earliest={0: 0, 1: 0}, latest={0: 100, 1: 100},
                   reset_offset_automatically=True, use_earliest_offset=use_earliest)
    assert decided.actions == [ResetStoredOffsets({0: restart}), StartTask(0)]
    assert decided.state.active[0].starting_offsets == {0: restart, 1: 20}
    assert decided.errors == [f"Offsets were reset automatically, potential data duplication or loss: "
                              f"partition [0] from [500] to [{restart}]"]
    assert decided.blocked == []


def test_task_duration_counts_from_when_the_first_replica_started_reading():
    """A peon starting its Spark can take longer than taskDuration; its group is not ended before it read."""
    state = plan(SupervisorState(), observe(partitions=(0,)), CONFIG).state
    state.active[0].task_ids.add("slow")
    long_after = T0 + CONFIG.task_duration * 2
    decided = plan(state, observe(now=long_after, partitions=(0,), statuses={"slow": "RUNNING"}), CONFIG)
    assert decided.actions == [] and decided.state.active[0].started is None

    started_at = long_after + timedelta(seconds=5)
    obs = replace(observe(now=started_at, partitions=(0,), statuses={"slow": "RUNNING"}),
                  task_start_times={"slow": started_at})
    decided = plan(decided.state, obs, CONFIG)
    assert decided.actions == [] and decided.state.active[0].started == started_at

    at_duration = started_at + CONFIG.task_duration
    decided = plan(decided.state, observe(now=at_duration, partitions=(0,), statuses={"slow": "RUNNING"}), CONFIG)
    assert decided.actions == [EndGroup(0)]


def test_a_group_that_has_not_read_its_first_records_is_not_ended_at_task_duration():
    """Its first Spark job is still running (pausing would throw it away); once it has read, the group ends."""
    state = started(plan(SupervisorState(), observe(partitions=(0,), initial={0: 10}), CONFIG).state, {0: "cold"})
    at_duration = T0 + CONFIG.task_duration
    waiting = replace(observe(now=at_duration, partitions=(0,), stored={0: 10}, statuses={"cold": "RUNNING"}),
                      latest_offsets={0: 500}, current_offsets={0: 10})
    decided = plan(state, waiting, CONFIG)
    assert decided.actions == []

    read = plan(decided.state, replace(waiting, current_offsets={0: 11}), CONFIG)
    assert read.actions == [EndGroup(0)]
    # a first read that takes longer than the grace is stuck, not slow: the group ends, cancelling it
    assert plan(decided.state, replace(waiting, now=at_duration + FIRST_READ_GRACE - timedelta(seconds=1)),
                CONFIG).actions == []
    assert plan(decided.state, replace(waiting, now=at_duration + FIRST_READ_GRACE), CONFIG).actions == [EndGroup(0)]
    # nothing to read: the group ends at taskDuration as before, having read nothing
    state = started(plan(SupervisorState(), observe(partitions=(0,), initial={0: 10}), CONFIG).state, {0: "idle"})
    idle = replace(waiting, task_statuses={"idle": "RUNNING"}, latest_offsets={0: 10})
    assert plan(state, idle, CONFIG).actions == [EndGroup(0)]


def discovered(task_id, group_id, start, sequence="seq_a", same_spec=True, end=None):
    return DiscoveredTask(task_id, group_id, start, sequence, T0, same_spec, end)


def test_a_previous_overlords_reading_tasks_become_the_groups_they_belong_to():
    tasks = [discovered("a", 0, {0: 5, 2: 7}), discovered("a2", 0, {0: 5, 2: 7}), discovered("b", 1, {1: 3, 3: 4},
                                                                                              "seq_b")]
    state, kills = adopt(SupervisorState(), tasks, CONFIG, T0)
    assert kills == []
    assert {i: (g.starting_offsets, g.base_sequence_name, g.task_ids) for i, g in state.active.items()} == {
        0: ({0: 5, 2: 7}, "seq_a", {"a", "a2"}), 1: ({1: 3, 3: 4}, "seq_b", {"b"})}
    # adopted groups are not re-created: the next run only lets them read on
    decided = plan(state, observe(stored={p: 0 for p in range(4)}, statuses={"a": "RUNNING", "a2": "RUNNING",
                                                                             "b": "RUNNING"}), CONFIG)
    assert not [a for a in decided.actions if isinstance(a, StartTask)]


def test_a_publishing_task_is_adopted_as_pending_and_the_next_group_starts_at_its_end():
    state, kills = adopt(SupervisorState(), [discovered("p", 0, {0: 5, 2: 7}, end={0: 50, 2: 70})], CONFIG, T0)
    assert kills == [] and state.active == {}
    [group] = state.pending[0]
    assert (group.end_offsets, group.task_ids, group.completion_deadline) == ({0: 50, 2: 70}, {"p"},
                                                                               T0 + CONFIG.completion_timeout)
    assert state.partition_offsets == {0: 50, 2: 70}


def test_tasks_that_no_longer_fit_are_killed():
    tasks = [discovered("old_spec", 0, {0: 5}, same_spec=False), discovered("moved", 1, {0: 5}),
             discovered("first", 0, {0: 5}, "seq_a"), discovered("second", 0, {0: 9}, "seq_b")]
    state, kills = adopt(SupervisorState(), tasks, CONFIG, T0)
    assert [k.task_id for k in kills] == ["old_spec", "moved", "second"]
    assert state.active[0].task_ids == {"first"}


# -- checkpoints (incremental handoff) -------------------------------------------------------------------------

def reading(checkpoints: dict[int, dict[int, int]] | None = None) -> SupervisorState:
    state = started(plan(SupervisorState(), observe(initial={0: 0, 1: 0, 2: 0, 3: 0}), CONFIG).state, {0: "a", 1: "b"})
    for sequence_id, start in (checkpoints or {}).items():
        state.active[0].checkpoint_sequences[sequence_id] = start
    return state


CHECKPOINTS = {
    # name: (group's checkpoints beyond the first, group id, the task's start, refused?, an error?)
    "the latest sequence is checkpointed": ({}, 0, {0: 0, 2: 0}, False, False),
    "after a checkpoint, the new latest one is": ({1: {0: 50, 2: 40}}, 0, {0: 50, 2: 40}, False, False),
    "a replica asking for an ended sequence is ignored": ({1: {0: 50, 2: 40}}, 0, {0: 0, 2: 0}, True, False),
    "a start that is no checkpoint of the group is an error": ({}, 0, {0: 7, 2: 0}, True, True),
    "a group no longer reading ends at its final end offsets": ({}, 3, {3: 0}, True, False),
}


@pytest.mark.parametrize("extra, group_id, start, refused, error", CHECKPOINTS.values(), ids=CHECKPOINTS)
def test_a_checkpoint_request_ends_only_the_groups_latest_sequence(extra, group_id, start, refused, error):
    refusal = checkpoint_refusal(reading(extra), group_id, start)
    assert (refusal is not None) == refused
    assert refusal is None or refusal[1] == error


def test_after_a_checkpoint_new_replicas_get_every_sequence_of_the_group():
    state = add_checkpoint(reading(), 0, {0: 50, 2: 40})
    assert state.active[0].checkpoint_sequences == {0: {0: 0, 2: 0}, 1: {0: 50, 2: 40}}
    assert state.active[0].starting_offsets == {0: 0, 2: 0}  # the group still starts where it started


def test_a_group_that_committed_sequences_and_then_failed_restarts_after_what_is_committed():
    state = add_checkpoint(reading(), 0, {0: 50, 2: 40})  # sequence 0 of group 0 then committed up to 50/40
    decided = plan(state, observe(stored={0: 50, 1: 0, 2: 40, 3: 0}, statuses={"a": "FAILED", "b": "RUNNING"}), CONFIG)
    assert StartTask(0) in decided.actions
    assert decided.state.active[0].starting_offsets == {0: 50, 2: 40}


def test_a_group_created_again_at_the_same_offsets_never_reuses_a_sequence_name():
    """A reset can move the committed offsets back to where an earlier group started; that group's segment ids
    (allocated by sequence name) are committed, and reusing them would skip the new rows as existing segments."""
    config = PlanConfig("wiki", 1, 2, timedelta(minutes=10), timedelta(minutes=5))
    first = plan(SupervisorState(), observe(partitions=(0,), initial={0: 0}), config).state
    again = plan(SupervisorState(), observe(now=T0 + timedelta(hours=1), partitions=(0,), initial={0: 0}), config).state
    assert first.active[0].starting_offsets == again.active[0].starting_offsets
    assert first.active[0].base_sequence_name != again.active[0].base_sequence_name


# ---------------------------------------------------------------------------------------------------------------
# idleConfig and lag

IDLE = PlanConfig("wiki", task_count=1, replicas=1, task_duration=timedelta(minutes=10),
                  completion_timeout=timedelta(minutes=5), idle_after=timedelta(minutes=1))


def one_partition(seconds: float, latest: int, current: int | None = None, statuses=None, stored=None) -> Observation:
    """Partition 0 of a stream holding `latest` events; its reading replicas are at `current`."""
    return Observation(T0 + timedelta(seconds=seconds), [0], stored or {}, {} if stored else {0: 0},
                       statuses or {}, {0: 0}, {0: latest}, current_offsets={} if current is None else {0: current})


def test_idle_once_read_to_the_end_and_nothing_new_then_running_again_when_data_arrives():
    decided = plan(SupervisorState(), one_partition(0, latest=100), IDLE)
    assert (decided.idle, decided.actions) == (False, [RecordStartingOffsets({0: 0}), StartTask(0)])
    state = started(decided.state, {0: "a"})

    decided = plan(state, one_partition(30, latest=100, current=100, statuses={"a": "RUNNING"}), IDLE)
    assert (decided.idle, decided.actions) == (False, [])  # quiet for 30s only
    decided = plan(decided.state, one_partition(61, latest=100, current=100, statuses={"a": "RUNNING"}), IDLE)
    assert (decided.idle, decided.actions) == (True, [])  # the reading group reads on until taskDuration

    decided = plan(decided.state, one_partition(600, latest=100, current=100, statuses={"a": "RUNNING"}), IDLE)
    assert (decided.idle, decided.actions) == (True, [EndGroup(0)])
    state = end_group(decided.state, 0, {0: 100}, T0 + timedelta(minutes=15))
    decided = plan(state, one_partition(660, latest=100, statuses={"a": "RUNNING"}), IDLE)
    assert (decided.idle, decided.actions, decided.state.active) == (True, [], {})  # no next group while idle

    decided = plan(decided.state, one_partition(720, latest=150, statuses={"a": "SUCCESS"}, stored={0: 100}), IDLE)
    assert (decided.idle, decided.actions) == (False, [StartTask(0)])
    assert decided.state.active[0].starting_offsets == {0: 100}  # exactly where the idle group ended


@pytest.mark.parametrize("current, statuses, stored", [
    (90, {"a": "RUNNING"}, None),  # its replica is still behind the stream's end
    (None, {"a": "FAILED"}, {0: 40}),  # its group failed: only what is committed counts as read
])
def test_a_partition_not_read_to_the_end_keeps_the_supervisor_running_however_quiet_the_stream(current, statuses,
                                                                                             stored):
    state = started(plan(SupervisorState(), one_partition(0, latest=100), IDLE).state, {0: "a"})
    decided = plan(state, one_partition(3600, latest=100, current=current, statuses=statuses, stored=stored), IDLE)
    assert decided.idle is False


@pytest.mark.parametrize("config", [
    PlanConfig(**{**IDLE.__dict__, "idle_after": None}),
    PlanConfig(**{**IDLE.__dict__, "suspended": True}),
], ids=["idleConfig off", "suspended"])
def test_never_idle_without_idle_config_or_while_suspended(config):
    state = SupervisorState()  # with IDLE's config, the same runs make it idle at 3600s
    for seconds in (0, 3600, 7200):
        decided = plan(state, one_partition(seconds, latest=100, current=100), config)
        state = decided.state
        assert decided.idle is False


def test_lag_is_the_latest_offset_minus_how_far_each_partition_is_read():
    config = PlanConfig(**{**CONFIG.__dict__, "task_count": 4})
    state = started(plan(SupervisorState(), observe(stored={p: 10 for p in range(4)}), config).state,
                    {0: "a", 1: "b", 2: "c", 3: "d"})
    state = end_group(state, 3, {3: 70}, T0 + timedelta(hours=1))
    del state.active[2]  # its task failed: partition 2 is read as far as it is committed
    obs = replace(observe(stored={p: 10 for p in range(4)}), latest_offsets={0: 100, 1: 100, 2: 100, 3: 100, 4: 9},
                  current_offsets={0: 60})
    assert record_lag(state, obs) == {0: 40, 1: 90, 2: 90, 3: 30}  # 1: no answer yet, read from its start


@pytest.mark.parametrize("lags, expected", [
    ({0: 40, 1: 90, 2: 0}, LagStats(130, 90, 43)),
    ({}, LagStats(0, 0, 0)),
    ({0: -3, 1: 0}, LagStats(-3, 0, -1)),  # latest offsets older than the tasks' (Java truncates -1.5 to -1)
])
def test_lag_stats_are_druids(lags, expected):
    assert LagStats.of(lags) == expected
