"""Druid's SupervisorStateManager: a supervisor's state from how its runs and its tasks went.

One failed run does not make a supervisor unhealthy, and one good run does not make it healthy again: it turns
UNHEALTHY_SUPERVISOR after `unhealthinessThreshold` failed runs in a row and becomes healthy again only after
`healthinessThreshold` successful runs in a row (the same for tasks, with the task thresholds). Until its first
successful run it shows which step of that run it reached (CONNECTING_TO_STREAM, DISCOVERING_INITIAL_TASKS,
CREATING_TASKS), so a supervisor stuck on its first run says where. No I/O: the runner tells it what happened.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from sluice.spec.supervisor import IdleConfig
from sluice.timestamps import format_timestamp


class State(Enum):
    """Druid's BasicState and SeekableStreamState: the `detailedState` of the status report; `basic` is its
    `state`."""

    UNHEALTHY_SUPERVISOR = "UNHEALTHY_SUPERVISOR"
    UNHEALTHY_TASKS = "UNHEALTHY_TASKS"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    IDLE = "IDLE"
    SUSPENDED = "SUSPENDED"
    STOPPING = "STOPPING"
    UNABLE_TO_CONNECT_TO_STREAM = "UNABLE_TO_CONNECT_TO_STREAM"
    LOST_CONTACT_WITH_STREAM = "LOST_CONTACT_WITH_STREAM"
    CONNECTING_TO_STREAM = "CONNECTING_TO_STREAM"
    DISCOVERING_INITIAL_TASKS = "DISCOVERING_INITIAL_TASKS"
    CREATING_TASKS = "CREATING_TASKS"

    @property
    def healthy(self) -> bool:
        return self not in _UNHEALTHY

    @property
    def first_run_only(self) -> bool:
        """Shown only until the first successful run: afterwards the steps of a run are not worth reporting."""
        return self in _FIRST_RUN_ONLY

    @property
    def basic(self) -> State:
        return _BASIC.get(self, self)


_UNHEALTHY = {State.UNHEALTHY_SUPERVISOR, State.UNHEALTHY_TASKS, State.UNABLE_TO_CONNECT_TO_STREAM,
              State.LOST_CONTACT_WITH_STREAM}
_FIRST_RUN_ONLY = {State.PENDING, State.UNABLE_TO_CONNECT_TO_STREAM, State.CONNECTING_TO_STREAM,
                   State.DISCOVERING_INITIAL_TASKS, State.CREATING_TASKS}
_BASIC = {State.UNABLE_TO_CONNECT_TO_STREAM: State.UNHEALTHY_SUPERVISOR,
          State.LOST_CONTACT_WITH_STREAM: State.UNHEALTHY_SUPERVISOR,
          State.CONNECTING_TO_STREAM: State.RUNNING, State.DISCOVERING_INITIAL_TASKS: State.RUNNING,
          State.CREATING_TASKS: State.RUNNING}


@dataclass(frozen=True)
class SupervisorStateManagerConfig:
    """Druid's `druid.supervisor.*` settings, the same for every supervisor of an overlord."""

    unhealthiness_threshold: int = 3
    healthiness_threshold: int = 3
    task_unhealthiness_threshold: int = 3
    task_healthiness_threshold: int = 3
    #: recentErrors messages carry the whole stack trace
    store_stack_trace: bool = False
    #: how many recentErrors the status keeps; None: Druid's max(healthinessThreshold, unhealthinessThreshold)
    max_stored_exception_events: int | None = None
    #: druid.supervisor.idleConfig.*: what a spec without its own idleConfig gets
    idle_config_enabled: bool = False
    idle_config_inactive_after_millis: int = 600_000

    def __post_init__(self) -> None:
        for name, value in (("unhealthinessThreshold", self.unhealthiness_threshold),
                            ("healthinessThreshold", self.healthiness_threshold),
                            ("taskUnhealthinessThreshold", self.task_unhealthiness_threshold),
                            ("taskHealthinessThreshold", self.task_healthiness_threshold)):
            if value < 1:
                raise ValueError(f"druid.supervisor.{name} must be at least 1, not {value}")
        if self.stored_exception_events < max(self.healthiness_threshold, self.unhealthiness_threshold):
            raise ValueError("maxStoredExceptionEvents must be >= to max(healthinessThreshold, "
                             "unhealthinessThreshold)")
        if self.idle_config_inactive_after_millis <= 0:
            raise ValueError("druid.supervisor.idleConfig.inactiveAfterMillis should be a positive number")

    @property
    def stored_exception_events(self) -> int:
        if self.max_stored_exception_events is not None:
            return self.max_stored_exception_events
        return max(self.healthiness_threshold, self.unhealthiness_threshold)

    def idle_after(self, spec_idle: IdleConfig | None) -> timedelta | None:
        """How long a stream without new data makes the supervisor IDLE (None: never), as Druid resolves it: a
        spec's idleConfig decides on its own (enabled only when it says so), taking only the cluster's
        inactiveAfterMillis when it has none; a spec without one takes the cluster's settings."""
        if spec_idle is None:
            enabled, millis = self.idle_config_enabled, self.idle_config_inactive_after_millis
        else:
            enabled = spec_idle.enabled
            millis = spec_idle.inactive_after_millis or self.idle_config_inactive_after_millis
        return timedelta(milliseconds=millis) if enabled else None


@dataclass(frozen=True)
class ExceptionEvent:
    """One entry of the status report's recentErrors."""

    timestamp: datetime
    exception_class: str
    message: str
    stream_exception: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"timestamp": format_timestamp(self.timestamp), "exceptionClass": self.exception_class,
                "message": self.message, "streamException": self.stream_exception}


class SupervisorStateManager:
    """The rules of Druid's SupervisorStateManager (and SeekableStreamSupervisorStateManager's stream states).

    The runner proposes a state at each step of a run (`maybe_set_state`), records what failed
    (`record_throwable_event`) and how tasks ended (`record_completed_task_state`), and calls `mark_run_finished`
    once per run. Calls come from the supervisor's notice thread; `state` and `exception_events` may be read from
    any thread.
    """

    def __init__(self, config: SupervisorStateManagerConfig, suspended: bool) -> None:
        self._config = config
        #: what a healthy supervisor settles in after its runs
        self._steady = State.SUSPENDED if suspended else State.RUNNING
        self.state = State.PENDING
        self.at_least_one_successful_run = False
        self._current_run_successful = True
        #: whether the last failure was the stream's: it decides which unhealthy state the supervisor is in
        self._last_failure_from_stream = False
        # whether a low count of successes means recovering from unhealthiness, or just a young supervisor
        self._hit_unhealthiness_threshold = False
        self._hit_task_unhealthiness_threshold = False
        self._failed_runs = 0
        self._successful_runs = 0
        self._failed_tasks = 0
        self._successful_tasks = 0
        self._events: deque[ExceptionEvent] = deque(maxlen=config.stored_exception_events)
        self._events_lock = threading.Lock()

    def maybe_set_state(self, proposed: State) -> None:
        """Druid's maybeSetState: past a threshold the unhealthy state wins; an unhealthy supervisor stays so until
        enough successes in a row; first-run steps are shown only until a run succeeds."""
        config = self._config
        if self._failed_runs >= config.unhealthiness_threshold:
            self._hit_unhealthiness_threshold = True
            self.state = self._unhealthy_supervisor_state()
            return
        if self._failed_tasks >= config.task_unhealthiness_threshold:
            self._hit_task_unhealthiness_threshold = True
            self.state = State.UNHEALTHY_TASKS
            return
        recovering = ((self._hit_unhealthiness_threshold and self._successful_runs < config.healthiness_threshold)
                      or (self._hit_task_unhealthiness_threshold
                          and self._successful_tasks < config.task_healthiness_threshold))
        if not self.state.healthy and recovering:
            return
        if proposed is self._steady and not self.at_least_one_successful_run:
            return  # the first run's steps say more than RUNNING until a run has succeeded
        if not proposed.first_run_only or not self.at_least_one_successful_run:
            self.state = proposed

    def _unhealthy_supervisor_state(self) -> State:
        if not self._last_failure_from_stream:
            return State.UNHEALTHY_SUPERVISOR
        return State.LOST_CONTACT_WITH_STREAM if self.at_least_one_successful_run \
            else State.UNABLE_TO_CONNECT_TO_STREAM

    def record_throwable_event(self, event: ExceptionEvent) -> None:
        """Something made this run fail; it is shown in recentErrors."""
        self.record_event(event)
        self._current_run_successful = False
        self._last_failure_from_stream = event.stream_exception

    def record_event(self, event: ExceptionEvent) -> None:
        """Shown in recentErrors without failing the run: what went wrong with a task group is counted through its
        tasks' outcomes (Druid only alerts it), but an operator looking at the status should see it too."""
        with self._events_lock:
            self._events.append(event)

    def record_completed_task_state(self, success: bool) -> None:
        if success:
            self._successful_tasks += 1
            self._failed_tasks = 0
        else:
            self._failed_tasks += 1
            self._successful_tasks = 0

    def mark_run_finished(self) -> None:
        """Count the run, then settle in the steady state (an IDLE supervisor stays IDLE until data arrives)."""
        self.at_least_one_successful_run |= self._current_run_successful
        self._successful_runs = self._successful_runs + 1 if self._current_run_successful else 0
        self._failed_runs = 0 if self._current_run_successful else self._failed_runs + 1
        if self.state is not State.IDLE:
            self.maybe_set_state(self._steady)
        self._current_run_successful = True

    @property
    def exception_events(self) -> list[ExceptionEvent]:
        with self._events_lock:
            return list(self._events)
