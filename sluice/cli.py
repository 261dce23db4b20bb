"""The `sluice` command: `sluice start` runs all-in-one, `sluice overlord|worker|broker` one role each,
`sluice quickstart` shows the whole path, `sluice ingest` submits a batch ingestion and follows it, `sluice stream
run` runs a stream job."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.broker.limits import DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_RESULT_ROWS
from sluice.emitter.config import EmitterConfig
from sluice.logs import configure as configure_logging
from sluice.server.roles import Role

if TYPE_CHECKING:
    from sluice.server.node import NodeConfig

_ROLES = {
    "start": ("run overlord and broker in one process, tasks as threads of it", Role.ALL_IN_ONE, 8888),
    "overlord": ("run the overlord: supervisors, task queue, tasks on workers", Role.OVERLORD, 8090),
    "worker": ("run a worker: tasks as peon processes", Role.WORKER, 8091),
    "broker": ("run the broker: Druid SQL", Role.BROKER, 8082),
}


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    if args.command in _ROLES:
        from sluice.server.node import Node

        try:
            config = node_config(args)
        except ValueError as error:
            parser.error(str(error))
        for port in (config.port, *([config.tls.port] if config.tls else [])):
            if not _port_free(config.host, port):  # say so now, not after Spark has started
                parser.error(f"port {port} on {config.host} is in use (another Sluice?); choose one with --port")
        from sluice.metadata.schema import SchemaError

        node = Node(config)
        try:
            node.start()
        except SchemaError as error:  # a store of a newer Sluice: said, not a traceback
            parser.error(str(error))
        print(f"Sluice {args.role.value} serves on http://{args.host}:{args.port} (Ctrl-C to stop)")
        node.lifecycle.join()
        if node.deposed:  # another overlord leads now: a service manager restarts this one as a standby
            sys.exit(75)
    elif args.command == "ingest":
        from sluice.ingest_cli import ingest

        sys.exit(ingest(args.spec, args.url, timeout_s=args.timeout))
    elif args.command == "migrate":
        from sluice.metadata.schema import SchemaError, migrate
        from sluice.metadata.store import MetadataStore
        from sluice.server.node import NodeConfig

        store = MetadataStore(NodeConfig(work_dir=args.work_dir, metadata_uri=args.metadata_uri).resolved_metadata_uri)
        try:
            before, now = migrate(store.engine)
        except SchemaError as error:
            parser.error(str(error))
        print(f"metadata store schema: {now}" + (f" (was {before or 'empty'})" if before != now else " (up to date)"))
    elif args.command == "dev":
        from sluice.dev import produce, tansu

        if args.dev_command == "broker":
            sys.exit(tansu.main(["--port", str(args.port), "--host", args.host]))
        ends = produce.run(args.bootstrap_servers, args.topic, args.events, args.partitions)
        print(f"{args.events} sample events in topic {args.topic} on {args.bootstrap_servers}; end offsets: "
              + ", ".join(f"{p}: {o}" for p, o in sorted(ends.items())))
    elif args.command == "stream":
        from sluice.stream_cli import run as run_stream

        sys.exit(run_stream(args.job, url=args.url, checkpoint_dir=args.checkpoint_dir, reset=args.reset,
                            duration_s=args.duration, spark_master=args.spark_master))
    else:
        from sluice.dev.quickstart import run

        run(args.work_dir, args.port, args.events, args.exit)


def node_config(args: argparse.Namespace) -> NodeConfig:
    """The NodeConfig a role's command line describes; raises ValueError for settings Druid would refuse."""
    from sluice.overlord.supervisor.state_manager import SupervisorStateManagerConfig
    from sluice.security.config import AuthConfig
    from sluice.broker.scheduler import QueryLimits
    from sluice.coordinator.duties import KillConfig
    from sluice.periods import parse_duration
    from sluice.server.node import DEFAULT_MAX_REQUEST_BYTES, NodeConfig
    from sluice.server.tls import TlsConfig

    overlord: dict[str, Any] = {}
    if args.role in (Role.ALL_IN_ONE, Role.OVERLORD):
        overlord["supervisor"] = SupervisorStateManagerConfig(
            unhealthiness_threshold=args.supervisor_unhealthiness_threshold,
            healthiness_threshold=args.supervisor_healthiness_threshold,
            task_unhealthiness_threshold=args.supervisor_task_unhealthiness_threshold,
            task_healthiness_threshold=args.supervisor_task_healthiness_threshold,
            store_stack_trace=args.supervisor_store_stack_trace,
            max_stored_exception_events=args.supervisor_max_stored_exception_events,
            idle_config_enabled=args.supervisor_idle_config_enabled,
            idle_config_inactive_after_millis=args.supervisor_idle_config_inactive_after_millis)
        if args.indexer_queue_max_size is not None:
            if args.indexer_queue_max_size < 1:
                raise ValueError(f"druid.indexer.queue.maxSize must be at least 1, not {args.indexer_queue_max_size}")
            overlord["queue_max_size"] = args.indexer_queue_max_size
    properties: dict[str, str] = args.config
    max_request_bytes = properties.get("sluice.server.http.maxRequestBytes", str(DEFAULT_MAX_REQUEST_BYTES)).strip()
    if not max_request_bytes.isdigit():
        raise ValueError(f"sluice.server.http.maxRequestBytes: [{max_request_bytes}] is not a number of bytes")
    try:
        coordinator_period = parse_duration(properties.get("druid.coordinator.period", "PT60S")).total_seconds()
    except ValueError as error:
        raise ValueError(f"druid.coordinator.period: {error}") from None
    if coordinator_period <= 0:
        raise ValueError("druid.coordinator.period: must be longer than nothing, e.g. PT60S")
    leader: dict[str, float] = {}
    for key, field_name in (("sluice.leader.leaseDuration", "leader_lease_s"),
                            ("sluice.leader.renewPeriod", "leader_renew_s")):
        if key in properties:
            try:
                leader[field_name] = parse_duration(properties[key].strip()).total_seconds()
            except ValueError as error:
                raise ValueError(f"{key}: {error}") from None
    if leader.get("leader_renew_s", 3.0) * 2 > leader.get("leader_lease_s", 15.0):
        raise ValueError("sluice.leader.renewPeriod: must be at most half of sluice.leader.leaseDuration, so that a "
                         "leader renews before its lease runs out")
    return NodeConfig(auth=AuthConfig.from_properties(properties), tls=TlsConfig.from_properties(properties),
                      coordinator_period_s=coordinator_period, kill=KillConfig.from_properties(properties), **leader,
                      query_limits=QueryLimits.from_properties(properties), max_request_bytes=int(max_request_bytes),
                      host=args.host, port=args.port, work_dir=args.work_dir, metadata_uri=args.metadata_uri,
                      deep_storage=args.deep_storage, spark_master=args.spark_master, role=args.role,
                      capacity=getattr(args, "capacity", 2), base_task_dirs=getattr(args, "base_task_dirs", ()),
                      worker_select_strategy=getattr(args, "worker_select_strategy", "equalDistribution"),
                      max_query_rows=getattr(args, "max_query_rows", DEFAULT_MAX_RESULT_ROWS),
                      max_query_bytes=getattr(args, "max_query_bytes", DEFAULT_MAX_RESULT_BYTES),
                      query_memory_limit=getattr(args, "query_memory_limit", "4GB"),
                      load_max_rows=getattr(args, "load_max_rows", 50_000_000),
                      emitter=args.emitter, **overlord)


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def runtime_properties(path: str) -> dict[str, str]:
    """A Druid runtime.properties file, read as Java reads it."""
    import javaproperties

    try:
        with open(path, encoding="utf-8") as file:
            return javaproperties.load(file)
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {error.strerror}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="Druid-compatible ingestion and SQL on Spark")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default) or ERROR")
    # also after the subcommand (`sluice start --log-level INFO`); there it overrides the one before
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", default=argparse.SUPPRESS, help="DEBUG, INFO, WARNING (default) or ERROR")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (description, role, port) in _ROLES.items():
        command = commands.add_parser(name, help=description, parents=[common])
        command.set_defaults(role=role)
        command.add_argument("--config", type=runtime_properties, default={}, metavar="FILE",
                             help="Druid runtime properties (key=value lines); Sluice reads druid.auth.*, "
                                  "druid.escalator.* (basic security), druid.enableTlsPort, druid.tlsPort, "
                                  "druid.server.https.* (an HTTPS port), druid.server.http.defaultQueryTimeout, "
                                  "druid.server.http.maxQueryTimeout, druid.query.scheduler.numThreads and "
                                  "sluice.server.http.maxRequestBytes (default 64 MiB) from it")
        command.add_argument("--host", default="127.0.0.1", help="the address to serve on (default: 127.0.0.1)")
        command.add_argument("--port", type=int, default=port, help=f"the HTTP port (default: {port})")
        command.add_argument("--work-dir", type=Path, default=Path("var"),
                             help="where the node keeps its metadata, segments and task files (default: ./var)")
        command.add_argument("--metadata-uri", help="sqlite:///… (default: <work-dir>/metadata.db) or "
                                                    "postgresql+psycopg://…")
        command.add_argument("--deep-storage", help="file:///… (default: <work-dir>/deep-storage) or s3://bucket/prefix")
        command.add_argument("--spark-master", default="local[*,4]" if role is Role.ALL_IN_ONE else "local[2,4]",
                             help="the Spark master tasks run on")
        command.add_argument("--emitter", type=EmitterConfig.model_validate_json,
                             default=EmitterConfig(type="prometheus"),
                             help='where metrics go, as JSON with Druid\'s names, e.g. \'{"type":"composing",'
                                  '"emitters":["prometheus","logging"]}\' (default: prometheus, served on /metrics)')
        if role is Role.WORKER:
            command.add_argument("--capacity", type=int, default=2, help="tasks (peons) at once")
            command.add_argument("--base-task-dirs", type=lambda dirs: tuple(Path(d) for d in dirs.split(",")),
                                 default=(), help="druid.worker.baseTaskDirs: comma-separated directories for task "
                                                  "directories, slot i in the (i mod n)-th (default: <work-dir>/tasks)")
        if role in (Role.ALL_IN_ONE, Role.BROKER):
            command.add_argument("--max-query-rows", type=int, default=DEFAULT_MAX_RESULT_ROWS,
                                 help="the most rows a query may return; a larger result is refused with Druid's "
                                      "'Resource limit exceeded' (default: 100000, Druid's maxSubqueryRows; 0: no "
                                      "limit)")
            command.add_argument("--max-query-bytes", type=int, default=DEFAULT_MAX_RESULT_BYTES,
                                 help="the most bytes of strings and arrays a query may return; more is refused "
                                      f"with 'Resource limit exceeded' (default: {DEFAULT_MAX_RESULT_BYTES}; 0: no "
                                      "limit)")
            command.add_argument("--query-memory-limit", default="4GB",
                                 help="DuckDB's memory limit, shared by the queries running at once over the same "
                                      "segments (default: 4GB)")
            command.add_argument("--load-max-rows", type=int, default=50_000_000,
                                 help="rows of published segments the broker loads into DuckDB's own storage for "
                                      "faster queries (default: 50000000; 0: read the segment files only)")
        if role is Role.OVERLORD:
            command.add_argument("--worker-select-strategy", default="equalDistribution",
                                 choices=["equalDistribution", "fillCapacity"],
                                 help="druid.indexer.selectStrategy: spread tasks over the workers with the most free "
                                      "slots, or fill one worker first (default: equalDistribution)")
        if role in (Role.ALL_IN_ONE, Role.OVERLORD):
            _add_overlord_options(command)

    ingest = commands.add_parser("ingest", parents=[common], help="submit a batch task (.json) or SQL INSERT/REPLACE (.sql), show its "
                                                "progress and row stats; exit 0 on success, 1 on failure")
    ingest.add_argument("spec", type=Path, help="an index_parallel / index / compact task JSON, or a .sql statement")
    ingest.add_argument("--url", default="http://127.0.0.1:8888", help="the overlord (or all-in-one node) to submit to")
    ingest.add_argument("--timeout", type=float, help="stop following after this many seconds (the task runs on)")

    stream = commands.add_parser("stream", parents=[common],
                                 help="stream jobs (windows, joins, sessions on Spark's state store)")
    stream_commands = stream.add_subparsers(dest="stream_command", required=True)
    stream_run = stream_commands.add_parser("run", parents=[common], help="run a job.json or job.py with a live status line; a job "
                                                        "writing to a data source is submitted to --url")
    stream_run.add_argument("job", type=Path, help="a {\"type\": \"stream\"} JSON spec, or a .py file building one")
    stream_run.add_argument("--url", default="http://127.0.0.1:8888", help="the node a data-source job runs on")
    stream_run.add_argument("--checkpoint-dir", type=Path, default=Path("var/stream-jobs"),
                            help="where a job run here keeps its checkpoint (offsets and state)")
    stream_run.add_argument("--reset", action="store_true", help="start over: drop the checkpoint (a changed job "
                                                                 "needs it)")
    stream_run.add_argument("--duration", type=float, help="stop after this many seconds")
    stream_run.add_argument("--spark-master", default="local[*,4]")

    migrate = commands.add_parser("migrate", parents=[common],
                                  help="bring a metadata store's schema up to this Sluice's (nodes also do it as "
                                       "they start)")
    migrate.add_argument("--metadata-uri", help="sqlite:///… or postgresql+psycopg://… (default: the one of "
                                                "--work-dir)")
    migrate.add_argument("--work-dir", type=Path, default=Path("var"), help="(default: ./var)")
    dev = commands.add_parser("dev", parents=[common], help="a Kafka broker and sample data to try Sluice with")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    dev_broker = dev_commands.add_parser("broker", parents=[common],
                                         help="run a throw-away Kafka-protocol broker (Tansu, in memory) until Ctrl-C")
    dev_broker.add_argument("--port", type=int, default=9092, help="(default: 9092, as the example spec expects)")
    dev_broker.add_argument("--host", default="127.0.0.1")
    dev_produce = dev_commands.add_parser("produce", parents=[common],
                                          help="write sample Wikipedia edits (a few bad records among them) to a topic")
    dev_produce.add_argument("--bootstrap-servers", default="localhost:9092")
    dev_produce.add_argument("--topic", default="wikipedia", help="(default: wikipedia, the example spec's topic; "
                                                                  "created if missing)")
    dev_produce.add_argument("--events", type=int, default=100_000)
    dev_produce.add_argument("--partitions", type=int, default=4, help="for a topic it creates (default: 4)")

    quickstart = commands.add_parser("quickstart", parents=[common],
                                     help="dev broker + sample data + example spec + SQL")
    quickstart.add_argument("--work-dir", type=Path, default=Path("var"))
    quickstart.add_argument("--port", type=int, default=8888)
    quickstart.add_argument("--events", type=int, default=300_000)
    quickstart.add_argument("--exit", action="store_true", help="stop after printing the results")
    return parser


def _add_overlord_options(command: argparse.ArgumentParser) -> None:
    """Druid's druid.supervisor.* and druid.indexer.queue.maxSize, named after them."""
    thresholds = {
        "unhealthiness-threshold": ("unhealthinessThreshold",
                                    "failed supervisor runs in a row that make a supervisor unhealthy"),
        "healthiness-threshold": ("healthinessThreshold",
                                  "successful runs in a row that make an unhealthy supervisor healthy again"),
        "task-unhealthiness-threshold": ("taskUnhealthinessThreshold",
                                         "failed tasks in a row that make a supervisor UNHEALTHY_TASKS"),
        "task-healthiness-threshold": ("taskHealthinessThreshold",
                                       "successful tasks in a row that make it healthy again"),
    }
    for option, (druid_name, meaning) in thresholds.items():
        command.add_argument(f"--supervisor-{option}", type=int, default=3,
                             help=f"druid.supervisor.{druid_name}: {meaning} (default: 3)")
    command.add_argument("--supervisor-store-stack-trace", action="store_true",
                         help="druid.supervisor.storeStackTrace: recentErrors carry whole stack traces")
    command.add_argument("--supervisor-max-stored-exception-events", type=int,
                         help="druid.supervisor.maxStoredExceptionEvents: recentErrors kept per supervisor "
                              "(default: the larger of the two supervisor thresholds)")
    command.add_argument("--supervisor-idle-config-enabled", action="store_true",
                         help="druid.supervisor.idleConfig.enabled: supervisors whose spec has no idleConfig turn "
                              "IDLE when their stream has no new data")
    command.add_argument("--supervisor-idle-config-inactive-after-millis", type=int, default=600_000,
                         help="druid.supervisor.idleConfig.inactiveAfterMillis (default: 600000)")
    command.add_argument("--indexer-queue-max-size", type=int,
                         help="druid.indexer.queue.maxSize: the most active tasks; more are refused with HTTP 429 "
                              "(default: 2147483647)")


if __name__ == "__main__":
    main()
