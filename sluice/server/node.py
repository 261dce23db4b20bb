"""A Sluice process: one or more roles (overlord, worker, broker) sharing a metadata store.

`sluice start` runs overlord and broker with tasks as threads of this process (one Spark for all);
`sluice overlord`, `sluice worker` and `sluice broker` run one role each, and find each other through
announcements in the metadata store. Everything starts through the Lifecycle, stage by stage: metadata
store and deep storage first, then the role's services, then HTTP, then the announcement that the node
serves (`/status/health` turns true).

Each role imports its services as they start: a worker or an overlord process does not load the broker's query
engine (DuckDB, pyarrow's datasets), nor a broker the overlord's, which saves each of them seconds of start-up.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fastapi import FastAPI

from sluice.broker.limits import DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_RESULT_ROWS
from sluice.broker.result_cache import ResultCacheConfig, ResultLevelCache
from sluice.broker.scheduler import QueryLimits
from sluice.config import DEFAULT_MAX_REQUEST_BYTES
from sluice.coordinator.duties import CleanUp, KillConfig, KillUnusedSegments, PeriodicDuty, RetentionDuty
from sluice.discovery import BROKER, OVERLORD, Announcer, live_urls
from sluice.emitter import EmitterConfig, ServiceEmitter, build_emitter
from sluice.lifecycle import Lifecycle, Stage
from sluice.metadata.store import MetadataStore
from sluice.overlord.leadership import LeaderSelector
from sluice.overlord.supervisor.state_manager import SupervisorStateManagerConfig
from sluice.overlord.task_queue import MAX_SIZE
from sluice.security.access import Security
from sluice.security.basic import BasicSecurityDb
from sluice.security.config import AuthConfig
from sluice.segment.deep_storage import DeepStorage
from sluice.server.api_metrics import metrics_router
from sluice.server.api_security import security_router
from sluice.server.auth import install, serve_security, state_guard
from sluice.server.http_server import HttpServer
from sluice.server.json_body import refuse_deep_nesting
from sluice.server.leadership import LeaderRedirect, leadership_router, refuse_when_deposed
from sluice.server.request_log import RequestIdMiddleware, RequestLogConfig, build_request_logger
from sluice.server.roles import Role
from sluice.server.tls import TlsConfig
from sluice.stream.kafka import KafkaStream

if TYPE_CHECKING:
    from sluice.broker.loaded import LoadedDataSources
    from sluice.metadata.offsets import StreamOffsets
    from sluice.overlord.remote_task_runner import HttpRemoteTaskRunner
    from sluice.realtime import RealtimeView
    from sluice.spec.supervisor import KafkaIOConfig
    from sluice.worker.thread_runner import ThreadTaskRunner

log = logging.getLogger(__name__)

VERSION = "0.1.0"
#: how long an elected overlord's start waits for its leader services (the task queue, supervisors, duties)
_LEADER_SERVICES_START_S = 120.0


@dataclass(frozen=True)
class NodeConfig:
    #: the name other nodes and clients reach this node by (Druid's druid.host): announced, and in its URL
    host: str = "127.0.0.1"
    #: druid.bindOnHost: listen on `host` only; else on every interface, as Druid does by default
    bind_on_host: bool = True
    port: int = 8888
    work_dir: Path = Path("var")
    metadata_uri: str | None = None
    deep_storage: str | None = None
    spark_master: str = "local[*,4]"
    #: the all-in-one node runs `pipeline.warm_up` before it is healthy
    warm_up: bool = True
    role: Role = Role.ALL_IN_ONE
    #: a worker's task slots (peons at once)
    capacity: int = 2
    #: druid.worker.baseTaskDirs: where a worker's task directories go, slot i in the (i mod n)-th (default:
    #: <work-dir>/tasks)
    base_task_dirs: tuple[Path, ...] = ()
    #: how the overlord picks a worker: equalDistribution or fillCapacity
    worker_select_strategy: str = "equalDistribution"
    #: DuckDB's memory limit (it would otherwise take 80% of the machine). DuckDB bounds a database, not a query (it
    #: has no per-connection limit): the broker keeps one database per set of files queried together, so queries
    #: running at once over the same files share the limit, and the broker's DuckDB memory can reach it once per file
    #: set being queried at that moment. Past it, DuckDB spills sorts and hash tables to <work-dir>/query-spill; a
    #: query that still does not fit fails with Druid's "Resource limit exceeded". The rows a query returns are
    #: bounded by `max_query_rows`, not by this.
    query_memory_limit: str = "4GB"
    #: druid.segmentCache.locations: where the broker keeps copies of segments from remote deep storage, and their
    #: most bytes (default: <work dir>/segment-cache, `deep_storage.DEFAULT_CACHE_MAX_BYTES`)
    segment_cache: tuple[Path, int] | None = None
    #: Druid's result-level cache (druid.broker.cache.*ResultLevelCache*, druid.cache.sizeInBytes)
    result_cache: ResultCacheConfig = ResultCacheConfig()
    #: the most rows one Druid SQL or native query may return (0: no limit); a larger result is refused with Druid's
    #: "Resource limit exceeded" (400), not truncated. Druid streams results and has no such limit; Sluice holds a
    #: result in memory before sending it, so it bounds it, at Druid's bound for the rows a broker holds in memory
    #: for one query's subqueries (druid.server.http.maxSubqueryRows).
    max_query_rows: int = DEFAULT_MAX_RESULT_ROWS
    #: the most bytes of strings and arrays one query may return (0: no limit); more is refused as rows are
    max_query_bytes: int = DEFAULT_MAX_RESULT_BYTES
    #: druid.server.http.defaultQueryTimeout / maxQueryTimeout, druid.query.scheduler.numThreads
    query_limits: QueryLimits = QueryLimits()
    #: sluice.server.http.maxRequestBytes: a larger request body is refused with 413 (0: no limit)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    #: the rows the broker may hold loaded into DuckDB's own storage (dictionary-encoded, in time order; see
    #: broker/loaded.py), over all data sources, least recently queried unloaded first; 0: read files only
    load_max_rows: int = 50_000_000
    #: where metrics go; Prometheus by default, so every role serves GET /metrics
    emitter: EmitterConfig = EmitterConfig(type="prometheus")
    #: the overlord's druid.supervisor.* settings (health thresholds, recentErrors, idleConfig defaults)
    supervisor: SupervisorStateManagerConfig = SupervisorStateManagerConfig()
    #: druid.indexer.queue.maxSize: the most active tasks the overlord's queue holds; more are refused (429)
    queue_max_size: int = MAX_SIZE
    #: sluice.leader.leaseDuration / renewPeriod: overlords compete for a lease of this length, which the leader
    #: renews (and a standby looks at) every renewal period; a standby takes over at most a lease after the leader died
    leader_lease_s: float = 15.0
    leader_renew_s: float = 3.0
    #: druid.coordinator.period: how often the retention rules are applied
    coordinator_period_s: float = 60.0
    #: druid.coordinator.period.indexingPeriod: how often auto-compaction submits compact tasks
    indexing_period_s: float = 1800.0
    #: how soon a broker answers with a lookup posted to the coordinator: it reads the lookups this often at most
    lookup_poll_s: float = 1.0
    #: druid.coordinator.kill.*: deleting unused segments, off by default
    kill: KillConfig = KillConfig()
    #: druid.auth.* and druid.escalator.*: Druid's default, allowAll, lets everyone do everything
    auth: AuthConfig = AuthConfig()
    #: druid.enableTlsPort and the rest: HTTPS on a second port; None: plaintext only (Druid's default)
    tls: TlsConfig | None = None
    #: druid.request.logging.*: a line per query, as Druid's request loggers write it (noop by default)
    request_logging: RequestLogConfig = RequestLogConfig()
    #: sluice.log.format=json: a JSON object a log line, in this node and in its peons
    json_logs: bool = False

    @property
    def resolved_metadata_uri(self) -> str:
        return self.metadata_uri or f"sqlite:///{(self.work_dir / 'metadata.db').resolve()}"

    @property
    def segment_cache_dir(self) -> Path:
        return self.segment_cache[0] if self.segment_cache else self.work_dir / "segment-cache"

    @property
    def resolved_deep_storage(self) -> str:
        return self.deep_storage or (self.work_dir / "deep-storage").resolve().as_uri()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def bind_address(self) -> str:
        return self.host if self.bind_on_host else "0.0.0.0"


class Node:
    def __init__(self, config: NodeConfig,
                 stream_factory: Callable[[KafkaIOConfig], KafkaStream] = KafkaStream.for_io_config) -> None:
        self.config = config
        self.stream_factory = stream_factory
        self.lifecycle = Lifecycle()
        self.ready = False
        self.app = FastAPI(title="Sluice", version=VERSION, max_body_size=config.max_request_bytes or None)
        role = config.role
        self.emitter = ServiceEmitter(f"druid/{role.value}", f"{config.host}:{config.port}",
                                      build_emitter(config.emitter), VERSION)
        install(self.app, config.auth)
        refuse_deep_nesting(self.app)
        self.app.include_router(metrics_router(self.emitter))
        self.lifecycle.add("emitter", self.emitter.start, self.emitter.close, stage=Stage.INIT)
        self.lifecycle.add("metadata store", self._start_metadata, self._stop_metadata, stage=Stage.INIT)
        if role is Role.ALL_IN_ONE:
            self.lifecycle.add("spark and tasks", self._start_thread_runner, self._stop_thread_runner)
        self.deposed = False
        if role in (Role.ALL_IN_ONE, Role.OVERLORD):
            # the leader's services: they start with a node that runs alone, and on election where overlords compete
            leading = self.lifecycle if role is Role.ALL_IN_ONE else Lifecycle()
            if role is Role.OVERLORD:
                leading.add("remote task runner", self._start_remote_runner, self._stop_remote_runner)
            leading.add("task queue", self._start_queue, self._stop_queue)
            leading.add("supervisors", self._start_supervisors, self._stop_supervisors)
            leading.add("coordinator duties", self._start_duties, self._stop_duties)
            if role is Role.OVERLORD:
                self._leading = leading
                self._leading_started = False
                self._leadership_lock = threading.Lock()
                self.lifecycle.add("leader election", self._start_election, self._stop_election)
                self.app.add_middleware(LeaderRedirect, is_leader=self._is_leader, leader=self._leader)
                refuse_when_deposed(self.app)
            self.app.include_router(leadership_router(self._is_leader, self._leader))
        if role is Role.WORKER:
            self.lifecycle.add("worker", self._start_worker, self._stop_worker)
        if role in (Role.ALL_IN_ONE, Role.BROKER):
            self.lifecycle.add("broker", self._start_broker, self._stop_broker)
        self.app.add_middleware(RequestIdMiddleware)  # added last, so outermost: 401s and redirects carry an id too
        self.request_logger = build_request_logger(config.request_logging)
        self.lifecycle.add("request logger", lambda: None, self.request_logger.close, stage=Stage.INIT)
        self.lifecycle.add("http", self._start_http, self._stop_http, stage=Stage.SERVER)
        self.lifecycle.add("announcement", self._announce, self._unannounce, stage=Stage.ANNOUNCEMENTS)

        @self.app.get("/status/health")
        def health() -> bool:
            return self.ready

        @self.app.get("/status", dependencies=[state_guard()])
        def status() -> dict[str, Any]:
            return {"version": VERSION, "modules": [], "role": self.config.role.value}

    def start(self) -> None:
        self.lifecycle.start()

    def stop(self) -> None:
        self.lifecycle.stop()

    def _start_metadata(self) -> None:
        self.config.work_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = MetadataStore(self.config.resolved_metadata_uri)
        self.metadata.create_tables()
        cache = self.config.segment_cache
        self.deep_storage = DeepStorage.from_uri(self.config.resolved_deep_storage,
                                                 **({"cache_max_bytes": cache[1]} if cache else {}))
        security_db = BasicSecurityDb(self.metadata, self.config.auth)
        security_db.initialize()
        serve_security(self.app, Security(self.config.auth, security_db))
        self.app.include_router(security_router(security_db))

    def _stop_metadata(self) -> None:
        self.metadata.close()

    # ---- overlord ----

    def _start_thread_runner(self) -> None:
        from sluice.overlord.task_actions import LocalTaskActionClient
        from sluice.server.api_chat import chat_router
        from sluice.task import pipeline, spark_session  # Spark starts here, not at import
        from sluice.task.toolbox import TaskToolbox
        from sluice.worker.thread_runner import ThreadTaskRunner

        self.spark = spark_session.get_or_create(self.config.spark_master)
        if self.config.warm_up:
            warm = self.config.work_dir / "warm-up"
            try:
                pipeline.warm_up(self.spark, warm)
            finally:
                shutil.rmtree(warm, ignore_errors=True)

        def toolbox(task_id: str, task_dir: Path) -> TaskToolbox:
            return TaskToolbox(self.spark, self.metadata, self.deep_storage, task_dir, self.stream_factory,
                               LocalTaskActionClient(task_id, self.task_actions), self.emitter)

        self.task_runner: ThreadTaskRunner | HttpRemoteTaskRunner = ThreadTaskRunner(
            toolbox, self.config.work_dir / "tasks")
        self.app.include_router(chat_router(self.task_runner.task))

    def _stop_thread_runner(self) -> None:
        self.task_runner.stop()

    def _start_remote_runner(self) -> None:
        from sluice.overlord.remote_task_runner import HttpRemoteTaskRunner

        self.task_runner = HttpRemoteTaskRunner(self.metadata, self.config.worker_select_strategy,
                                                auth=self.config.auth.escalator.basic_auth)
        self.task_runner.start()

    def _stop_remote_runner(self) -> None:
        self.task_runner.stop()

    # ---- leadership (overlord role) ----

    def _start_election(self) -> None:
        """Compete for the lease; return once this node leads with its services up, or knows who leads."""
        self.selector = LeaderSelector(self.metadata, self.config.url, self._become_leader, self._step_down,
                                       self.config.leader_lease_s, self.config.leader_renew_s)
        self.selector.start()
        # elected: its services may take a while on a loaded machine, and the node is not the leader until they run
        deadline = time.monotonic() + self.config.leader_lease_s + 2 * self.config.leader_renew_s
        elected_deadline = time.monotonic() + _LEADER_SERVICES_START_S
        while not self._leading_started and not self.deposed:
            if self.selector.is_leader:
                if time.monotonic() > elected_deadline:
                    break
            elif self.selector.leader() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)

    def _become_leader(self) -> None:
        with self._leadership_lock:
            if not self.selector.is_leader:
                return
            try:
                self._leading.start()
            except Exception:
                log.exception("the overlord's services did not start; stepping down")
                self._step_down()
                return
            self._leading_started = True

    def _step_down(self) -> None:
        """Deposed (another node holds the lease now) or failed to lead: the process stops, to be restarted by its
        service manager as a standby (`sluice overlord` exits with 75)."""
        self.deposed = True
        self.lifecycle.request_stop()

    def _stop_election(self) -> None:
        with self._leadership_lock:
            if self._leading_started:
                self._leading_started = False
                self._leading.stop()
        self.selector.stop()

    def _is_leader(self) -> bool:
        return self.config.role is Role.ALL_IN_ONE or self._leading_started

    def _leader(self) -> str | None:
        """The leader's URL; None while none is known (or this node is still starting the leader's services)."""
        if self._is_leader():
            return self.config.url
        leader = self.selector.leader()
        return None if leader == self.config.url else leader

    def _start_queue(self) -> None:
        from sluice.overlord.task_actions import TaskActionToolbox
        from sluice.overlord.task_queue import TaskQueue

        self.task_queue = TaskQueue(self.metadata, self.task_runner, self.emitter, self.config.queue_max_size)
        # tasks restored from storage may act before the supervisors start: a checkpoint finds none until then
        self.task_actions = TaskActionToolbox(self.task_queue.lockbox, self.metadata, self.task_queue.lock_holder,
                                              self._checkpoint, self.deep_storage.check_load_spec)
        self.task_queue.start()

    def _checkpoint(self, supervisor_id: str, task_group_id: int, start: StreamOffsets) -> bool:
        supervisors = getattr(self, "supervisors", None)
        return supervisors is not None and supervisors.checkpoint(supervisor_id, task_group_id, start)

    def _stop_queue(self) -> None:
        self.task_queue.stop()

    def _start_supervisors(self) -> None:
        from sluice.overlord.supervisor_manager import SupervisorManager
        from sluice.server.api_coordinator import coordinator_router
        from sluice.server.api_sql_task import sql_task_router
        from sluice.server.api_supervisor import supervisor_router
        from sluice.server.api_task import task_router
        from sluice.server.api_task_action import task_action_router

        self.supervisors = SupervisorManager(self.metadata, self.task_queue, self.stream_factory, self.emitter,
                                             self.config.supervisor)
        self.supervisors.start()
        workers = self.task_runner.workers if self.config.role is Role.OVERLORD else list
        self.app.include_router(supervisor_router(self.supervisors))
        self.app.include_router(task_router(self.metadata, self.task_queue, self.supervisors, workers))
        self.app.include_router(task_action_router(self.task_actions))
        self.app.include_router(coordinator_router(self.metadata, self.task_queue))
        self.app.include_router(sql_task_router(self.task_queue, self.metadata))

    def _stop_supervisors(self) -> None:
        self.supervisors.stop()

    def _start_duties(self) -> None:
        from sluice.coordinator.compaction import AutoCompaction
        from sluice.server.api_compaction import compaction_router
        from sluice.server.api_lookups import lookups_router
        from sluice.server.api_rules import rules_router

        self.duties = [PeriodicDuty("retention", self.config.coordinator_period_s,
                                    RetentionDuty(self.metadata).run_once)]
        kill = self.config.kill
        if kill.pending_segments_on or kill.orphan_files_on:
            self.duties.append(PeriodicDuty("clean-up", kill.period.total_seconds(),
                                            CleanUp(self.metadata, self.deep_storage, kill).run_once))
        if kill.on:
            killing = KillUnusedSegments(self.metadata, self.task_queue.add, self.task_queue.active, kill)
            self.duties.append(PeriodicDuty("kill", kill.period.total_seconds(), killing.run_once))
        runner = self.task_runner
        slots = (lambda: sum(w["worker"]["capacity"] for w in runner.workers())) \
            if self.config.role is Role.OVERLORD else (lambda: self.config.capacity)
        compacting = AutoCompaction(self.metadata, self.task_queue.add, self.task_queue.active,
                                    self.task_queue.lockbox.find_locks_for_task, slots)
        self.duties.append(PeriodicDuty("compaction", self.config.indexing_period_s, compacting.run_once))
        for duty in self.duties:
            duty.start()
        self.app.include_router(rules_router(self.metadata))
        self.app.include_router(compaction_router(self.metadata, compacting))
        self.app.include_router(lookups_router(self.metadata))

    def _stop_duties(self) -> None:
        for duty in self.duties:
            duty.stop()

    # ---- worker ----

    def _start_worker(self) -> None:
        from sluice.server.api_worker import worker_router
        from sluice.worker.worker import PeonConfig, WorkerTaskManager

        peon = PeonConfig(self.config.resolved_metadata_uri, self.config.resolved_deep_storage,
                          self.config.spark_master, self.config.emitter, self.config.auth, self.config.json_logs)
        self.worker = WorkerTaskManager(self.config.base_task_dirs or (self.config.work_dir / "tasks",),
                                        self.config.capacity, self.config.host, peon)
        self.worker.start()
        self.app.include_router(worker_router(self.worker))

    def _stop_worker(self) -> None:
        self.worker.stop()

    # ---- broker ----

    def _start_broker(self) -> None:
        from sluice.broker.broker import Broker
        from sluice.broker.engine import SqlEngine
        from sluice.broker.loaded import LoadedDataSources
        from sluice.broker.overlord_client import OverlordClient
        from sluice.broker.scheduler import QueryScheduler
        from sluice.lookups.coordinator import read_lookups
        from sluice.lookups.references import LookupReferences
        from sluice.server.api_native import native_router
        from sluice.server.api_sql import sql_router

        lookups = LookupReferences(lambda: read_lookups(self.metadata), poll_s=self.config.lookup_poll_s)
        engine = SqlEngine(memory_limit=self.config.query_memory_limit,
                           max_result_rows=self.config.max_query_rows or None,
                           max_result_bytes=self.config.max_query_bytes or None,
                           temp_directory=str(self.config.work_dir / "query-spill"), lookups=lookups.get)
        self.loaded: LoadedDataSources | None = LoadedDataSources(engine.duckdb_config, self.config.load_max_rows) \
            if self.config.load_max_rows else None
        if self.config.role is Role.ALL_IN_ONE:
            self.broker = Broker(self.metadata, self.deep_storage, self.config.segment_cache_dir, engine,
                                 realtime=self._thread_task_views, supervisors=self._supervisor_statuses,
                                 tasks=self._task_statuses, loaded=self.loaded,
                                 result_cache=ResultLevelCache(self.config.result_cache))
        else:
            overlord = OverlordClient(lambda: live_urls(self.metadata, OVERLORD), self.config.work_dir / "realtime-cache",
                                      auth=self.config.auth.escalator.basic_auth)
            self.broker = Broker(self.metadata, self.deep_storage, self.config.segment_cache_dir, engine,
                                 realtime=overlord.realtime_views, supervisors=overlord.supervisor_statuses,
                                 tasks=overlord.task_statuses, loaded=self.loaded,
                                 result_cache=ResultLevelCache(self.config.result_cache))
        scheduler = QueryScheduler(self.config.query_limits)
        self.app.include_router(sql_router(self.broker, self.emitter, scheduler, self.request_logger))
        self.app.include_router(native_router(self.broker, self.metadata, self.emitter, scheduler, self.request_logger))

    def _stop_broker(self) -> None:
        if self.loaded is not None:
            self.loaded.stop()

    def _thread_task_views(self) -> list[RealtimeView]:
        """What this node's reading tasks have persisted (Druid's realtime queries)."""
        from sluice.task.kafka_index_task import KafkaIndexTask
        from sluice.worker.thread_runner import ThreadTaskRunner

        assert isinstance(self.task_runner, ThreadTaskRunner)
        return [view for t in self.task_runner.running() if isinstance(t, KafkaIndexTask) for view in t.realtime_views()]

    def _supervisor_statuses(self) -> list[dict[str, Any]]:
        """sys.supervisors from this node's running supervisors."""
        from sluice.broker import system_tables as sys_tables

        statuses = []
        for spec_id in self.supervisors.ids():
            supervisor = self.supervisors.get(spec_id)
            if supervisor is not None:
                spec = supervisor.spec.to_json()
                statuses.append(sys_tables.supervisor_status(spec_id, spec, supervisor.health()))
        return statuses

    def _task_statuses(self) -> list[dict[str, Any]]:
        """sys.tasks with what this node's task queue says; a task running here is reached through this node's chat
        API, so this node is where it runs."""
        from sluice.broker import system_tables as sys_tables
        from sluice.worker.thread_runner import ThreadTaskRunner

        assert isinstance(self.task_runner, ThreadTaskRunner)
        here = (self.config.host, self.config.port)
        return [sys_tables.task_status(record, self.task_queue.runner_status(record.id) if record.active else None,
                                       here if self.task_runner.task(record.id) is not None else None)
                for record in self.metadata.list_tasks()]

    # ---- serving ----

    def _start_http(self) -> None:
        tls = self.config.tls
        self.http = HttpServer(self.app, self.config.bind_address, self.config.port,
                               None if tls is None else (tls.port, *tls.pem_files(self.config.work_dir / "tls")))
        self.http.start()
        log.info("Sluice %s serves on %s%s", self.config.role.value, self.config.url,
                 f" and https://{self.config.host}:{tls.port}" if tls else "")

    def _stop_http(self) -> None:
        self.http.stop()

    def _announce(self) -> None:
        roles = [OVERLORD, BROKER] if self.config.role is Role.ALL_IN_ONE else [self.config.role.value]
        self._announcers = [Announcer(self.metadata, role, self.config.host, self.config.port, self._announcement)
                            for role in roles]
        for announcer in self._announcers:
            announcer.start()
        self.ready = True

    def _announcement(self) -> dict[str, Any]:
        if self.config.role is Role.WORKER:
            return {"capacity": self.config.capacity, "version": VERSION, "category": "_default_worker_category",
                    "used": self.worker.used_capacity}
        return {"version": VERSION}

    def _unannounce(self) -> None:
        self.ready = False
        for announcer in self._announcers:
            announcer.stop()
