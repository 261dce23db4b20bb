"""Druid's supervisor health rules: runs and task outcomes in -> (state, detailedState) out, no servers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sluice.overlord.supervisor.state_manager import (
    ExceptionEvent, State, SupervisorStateManager, SupervisorStateManagerConfig,
)
from sluice.spec.supervisor import IdleConfig

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FIRST_RUN_STEPS = (State.CONNECTING_TO_STREAM, State.DISCOVERING_INITIAL_TASKS, State.CREATING_TASKS)


def shown(manager: SupervisorStateManager) -> tuple[str, str]:
    """What the status report shows: (state, detailedState)."""
    return manager.state.basic.value, manager.state.value


def run(manager: SupervisorStateManager, outcome: str = "ok") -> tuple[str, str]:
    """One RunNotice: its steps, then `ok`, a failure (`error`) or a stream failure (`stream`)."""
    for step in FIRST_RUN_STEPS:
        manager.maybe_set_state(step)
    if outcome != "ok":
        manager.record_throwable_event(ExceptionEvent(T0, "StreamException" if outcome == "stream" else "ISE",
                                                      f"run failed: {outcome}", outcome == "stream"))
    manager.mark_run_finished()
    return shown(manager)


def test_a_new_supervisor_is_pending_then_shows_its_first_runs_steps_under_running():
    manager = SupervisorStateManager(SupervisorStateManagerConfig(), suspended=False)
    assert shown(manager) == ("PENDING", "PENDING")
    for step in FIRST_RUN_STEPS:
        manager.maybe_set_state(step)
        assert shown(manager) == ("RUNNING", step.value)  # Druid's SeekableStreamState: basic state RUNNING
    manager.mark_run_finished()
    assert shown(manager) == ("RUNNING", "RUNNING")
    manager.maybe_set_state(State.CONNECTING_TO_STREAM)
    assert shown(manager) == ("RUNNING", "RUNNING")  # first-run steps are not shown after a successful run


@pytest.mark.parametrize("outcomes, expected", [
    (["error"], ("RUNNING", "CREATING_TASKS")),  # a failed first run stays on the step it reached
    (["error", "error"], ("RUNNING", "CREATING_TASKS")),
    (["error"] * 3, ("UNHEALTHY_SUPERVISOR", "UNHEALTHY_SUPERVISOR")),
    (["ok", "error", "error"], ("RUNNING", "RUNNING")),
    (["ok", "error", "error", "error"], ("UNHEALTHY_SUPERVISOR", "UNHEALTHY_SUPERVISOR")),
    (["error", "error", "ok", "error", "error"], ("RUNNING", "RUNNING")),  # a good run starts the count again
    (["stream"] * 3, ("UNHEALTHY_SUPERVISOR", "UNABLE_TO_CONNECT_TO_STREAM")),  # never connected
    (["ok", "stream", "stream", "stream"], ("UNHEALTHY_SUPERVISOR", "LOST_CONTACT_WITH_STREAM")),
    (["ok", "stream", "stream", "error"], ("UNHEALTHY_SUPERVISOR", "UNHEALTHY_SUPERVISOR")),  # the last failure says
    (["error"] * 3 + ["ok", "ok"], ("UNHEALTHY_SUPERVISOR", "UNHEALTHY_SUPERVISOR")),  # healthy after 3 good runs
    (["error"] * 3 + ["ok"] * 3, ("RUNNING", "RUNNING")),
    (["ok"] + ["stream"] * 3 + ["ok"] * 3, ("RUNNING", "RUNNING")),
])
def test_druids_unhealthiness_and_healthiness_thresholds(outcomes, expected):
    manager = SupervisorStateManager(SupervisorStateManagerConfig(), suspended=False)
    for outcome in outcomes:
        state = run(manager, outcome)
    assert state == expected
    assert manager.state.healthy is (expected[0] != "UNHEALTHY_SUPERVISOR")


@pytest.mark.parametrize("unhealthiness, healthiness, outcomes, expected", [
    (1, 3, ["ok", "error"], "UNHEALTHY_SUPERVISOR"),
    (5, 3, ["ok"] + ["error"] * 4, "RUNNING"),
    (5, 3, ["ok"] + ["error"] * 5, "UNHEALTHY_SUPERVISOR"),
    (1, 1, ["ok", "error", "ok"], "RUNNING"),
    (1, 5, ["ok", "error"] + ["ok"] * 4, "UNHEALTHY_SUPERVISOR"),
])
def test_thresholds_are_configurable(unhealthiness, healthiness, outcomes, expected):
    config = SupervisorStateManagerConfig(unhealthiness_threshold=unhealthiness, healthiness_threshold=healthiness,
                                          max_stored_exception_events=10)
    manager = SupervisorStateManager(config, suspended=False)
    for outcome in outcomes:
        state = run(manager, outcome)
    assert state[1] == expected


@pytest.mark.parametrize("tasks, expected", [
    ([False, False], "RUNNING"),
    ([False, False, False], "UNHEALTHY_TASKS"),
    ([False, False, True, False, False], "RUNNING"),
    ([False, False, False, True, True], "UNHEALTHY_TASKS"),  # recovering needs taskHealthinessThreshold successes
    ([False, False, False, True, True, True], "RUNNING"),
])
def test_task_thresholds_count_consecutive_task_outcomes(tasks, expected):
    manager = SupervisorStateManager(SupervisorStateManagerConfig(), suspended=False)
    run(manager)
    for success in tasks:
        manager.record_completed_task_state(success)
        state = run(manager)
    assert state == (expected, expected)


def test_a_suspended_supervisor_settles_in_suspended_after_its_first_run():
    manager = SupervisorStateManager(SupervisorStateManagerConfig(), suspended=True)
    assert shown(manager) == ("PENDING", "PENDING")
    manager.maybe_set_state(State.CONNECTING_TO_STREAM)
    manager.mark_run_finished()
    assert shown(manager) == ("SUSPENDED", "SUSPENDED")


def test_idle_lasts_across_runs_until_the_supervisor_is_told_it_runs_again():
    manager = SupervisorStateManager(SupervisorStateManagerConfig(), suspended=False)
    run(manager)
    manager.maybe_set_state(State.IDLE)
    assert run(manager) == ("IDLE", "IDLE")
    assert run(manager) == ("IDLE", "IDLE")
    manager.maybe_set_state(State.RUNNING)
    assert run(manager) == ("RUNNING", "RUNNING")


def test_recent_errors_keep_the_newest_events_including_those_that_do_not_fail_a_run():
    manager = SupervisorStateManager(SupervisorStateManagerConfig(), suspended=False)  # keeps max(3, 3) = 3
    for i in range(3):
        manager.record_throwable_event(ExceptionEvent(T0 + timedelta(seconds=i), "ISE", f"failure {i}"))
        manager.mark_run_finished()
    manager.record_event(ExceptionEvent(T0, "TaskFailure", "task group 0: all replicas failed to publish"))
    assert [e.message for e in manager.exception_events] == [
        "failure 1", "failure 2", "task group 0: all replicas failed to publish"]
    assert manager.exception_events[0].to_json() == {"timestamp": "2026-01-01T00:00:01.000Z",
                                                     "exceptionClass": "ISE", "message": "failure 1",
                                                     "streamException": False}


def test_events_that_do_not_fail_a_run_never_make_the_supervisor_unhealthy():
    manager = SupervisorStateManager(SupervisorStateManagerConfig(), suspended=False)
    for _ in range(5):
        manager.record_event(ExceptionEvent(T0, "TaskFailure", "task group 0: all replicas failed to publish"))
        assert run(manager) == ("RUNNING", "RUNNING")


@pytest.mark.parametrize("settings, message", [
    ({"unhealthiness_threshold": 4, "max_stored_exception_events": 3},
     "maxStoredExceptionEvents must be >= to max(healthinessThreshold, unhealthinessThreshold)"),
    ({"healthiness_threshold": 0}, "druid.supervisor.healthinessThreshold must be at least 1, not 0"),
    ({"task_unhealthiness_threshold": -1}, "druid.supervisor.taskUnhealthinessThreshold must be at least 1, not -1"),
    ({"idle_config_inactive_after_millis": 0},
     "druid.supervisor.idleConfig.inactiveAfterMillis should be a positive number"),
])
def test_settings_druid_refuses_are_refused(settings, message):
    with pytest.raises(ValueError) as error:
        SupervisorStateManagerConfig(**settings)
    assert str(error.value) == message


def test_max_stored_exception_events_defaults_to_the_larger_threshold():
    assert SupervisorStateManagerConfig().stored_exception_events == 3
    assert SupervisorStateManagerConfig(healthiness_threshold=7).stored_exception_events == 7


@pytest.mark.parametrize("cluster, spec, expected", [
    ({}, None, None),  # Druid's defaults: idle behaviour off
    ({"idle_config_enabled": True}, None, timedelta(minutes=10)),
    ({"idle_config_enabled": True, "idle_config_inactive_after_millis": 5000}, None, timedelta(seconds=5)),
    ({}, IdleConfig(enabled=True), timedelta(minutes=10)),
    ({"idle_config_inactive_after_millis": 5000}, IdleConfig(enabled=True), timedelta(seconds=5)),
    ({}, IdleConfig(enabled=True, inactive_after_millis=2000), timedelta(seconds=2)),
    ({"idle_config_enabled": True}, IdleConfig(inactive_after_millis=2000), None),  # the spec's own says off
    ({"idle_config_enabled": True}, IdleConfig(enabled=False), None),
])
def test_idle_config_is_the_specs_own_else_the_clusters(cluster, spec, expected):
    assert SupervisorStateManagerConfig(**cluster).idle_after(spec) == expected
