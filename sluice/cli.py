"""The `sluice` command: `sluice start` runs all-in-one, `sluice overlord|worker|broker` one role each,
`sluice quickstart` shows the whole path, `sluice ingest` submits a batch ingestion and follows it, `sluice stream
run` runs a stream job."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.config import (
    BY_KEY, SETTINGS, ConfigError, Properties, PropertyReader, deep_storage_uri, metadata_uri, resolve,
)
from sluice.emitter.config import EmitterConfig
from sluice.logs import configure as configure_logging
from sluice.server.roles import Role

if TYPE_CHECKING:
    from sluice.broker.result_cache import ResultCacheConfig
    from sluice.server.node import NodeConfig

log = logging.getLogger("sluice")

_ROLES = {
    "start": ("run overlord and broker in one process, tasks as threads of it", Role.ALL_IN_ONE),
    "overlord": ("run the overlord: supervisors, task queue, tasks on workers", Role.OVERLORD),
    "worker": ("run a worker: tasks as peon processes", Role.WORKER),
    "broker": ("run the broker: Druid SQL", Role.BROKER),
}


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    properties = settings(args) if hasattr(args, "role") else None  # a role's command, `config show`, `migrate`
    log_format = properties.get("sluice.log.format", "plain") if properties is not None else "plain"
    if log_format not in ("plain", "json"):
        parser.error(f"sluice.log.format: [{log_format}] is not plain or json")
    configure_logging(args.log_level, json_format=log_format == "json")
    if args.command in _ROLES:
        from sluice.server.node import Node

        try:
            config = build_node_config(properties, args.emitter)
        except ValueError as error:
            parser.error(str(error))
        if unknown := properties.unknown():
            log.warning("configuration keys Sluice does not read (ignored): %s", ", ".join(unknown))
        for port in (config.port, *([config.tls.port] if config.tls else [])):
            if problem := _cannot_serve(config.bind_address, port):  # say so now, not after Spark has started
                parser.error(problem)
        from sluice.metadata.schema import SchemaError

        node = Node(config)
        node.lifecycle.handle_signals()
        try:
            node.start()
        except SchemaError as error:  # a store of a newer Sluice: said, not a traceback
            parser.error(str(error))
        print(f"Sluice {args.role.value} serves on {config.url} (Ctrl-C to stop)")
        node.lifecycle.join()
        if node.deposed:  # another overlord leads now: a service manager restarts this one as a standby
            sys.exit(75)
    elif args.command == "ingest":
        from sluice.ingest_cli import ingest

        sys.exit(ingest(args.spec, args.url, timeout_s=args.timeout))
    elif args.command == "config":
        try:
            build_node_config(properties, args.emitter)
        except ValueError as error:
            parser.error(str(error))
        print(f"# sluice {args.show_role}: effective settings (file < env < flag), secrets masked")
        print(properties.render())
        if args.emitter is not None:
            print(f"# druid.emitter.* overridden by --emitter: "
                  f"{args.emitter.model_dump_json(by_alias=True, exclude_defaults=True)}")
        for key in properties.unknown():
            print(f"# not read by Sluice (ignored): {key}")
    elif args.command == "migrate":
        from sluice.metadata.schema import SchemaError, migrate
        from sluice.metadata.store import MetadataStore
        from sluice.server.node import NodeConfig

        read = PropertyReader(properties)
        try:  # only where the store is: the rest of a node's settings need not be right to migrate
            store = MetadataStore(NodeConfig(work_dir=Path(read.string("sluice.workDir")),
                                             metadata_uri=metadata_uri(read)).resolved_metadata_uri)
        except ValueError as error:
            parser.error(str(error))
        try:
            before, now = migrate(store.engine)
        except SchemaError as error:
            parser.error(str(error))
        print(f"metadata store schema: {now}" + (f" (was {before or 'empty'})" if before != now else " (up to date)"))
    elif args.command == "dev":
        from sluice.dev import produce, tansu

        if args.dev_command == "broker":
            sys.exit(tansu.main(["--port", str(args.port), "--host", args.host]))
        if args.dev_command == "spark-cluster":
            from sluice.dev import spark_cluster

            sys.exit(spark_cluster.run(args.work_dir, args.workers, args.cores, args.memory, args.port))
        if args.dev_command == "cluster":
            from sluice.dev import cluster

            sys.exit(cluster.run(cluster.ClusterLayout(
                args.work_dir, args.overlords, args.workers, args.brokers, args.spark_workers, args.capacity,
                share_nothing=args.share_nothing, free_ports=args.free_ports)))
        ends = produce.run(args.bootstrap_servers, args.topic, args.events, args.partitions)
        print(f"{args.events} sample events in topic {args.topic} on {args.bootstrap_servers}; end offsets: "
              + ", ".join(f"{p}: {o}" for p, o in sorted(ends.items())))
    elif args.command == "spark-archive":
        from sluice.task.spark_session import write_class_archive

        print(f"Spark's classes archived in {write_class_archive()}: every Sluice JVM maps them from now on")
    elif args.command == "stream":
        from sluice.stream_cli import run as run_stream

        sys.exit(run_stream(args.job, url=args.url, checkpoint_dir=args.checkpoint_dir, reset=args.reset,
                            duration_s=args.duration, spark_master=args.spark_master))
    else:
        from sluice.dev.quickstart import run

        run(args.work_dir, args.port, args.events, args.exit)


def settings(args: argparse.Namespace) -> Properties:
    """A role's effective settings: defaults, its --config file, the environment, its flags."""
    flags = {key: ("true" if value is True else str(value)) for key, value in vars(args).items() if key in BY_KEY}
    return resolve(args.role, args.config or [], os.environ, flags)


def node_config(args: argparse.Namespace) -> NodeConfig:
    """The NodeConfig of a role's command line, config file and environment; raises ConfigError naming the key of a
    setting Druid would refuse."""
    return build_node_config(settings(args), args.emitter)


def build_node_config(properties: Properties, emitter: EmitterConfig | None = None) -> NodeConfig:
    from sluice.broker.scheduler import QueryLimits
    from sluice.coordinator.duties import KillConfig
    from sluice.overlord.supervisor.state_manager import SupervisorStateManagerConfig
    from sluice.security.config import AuthConfig
    from sluice.server.node import NodeConfig
    from sluice.server.request_log import RequestLogConfig
    from sluice.server.tls import TlsConfig

    read, role = PropertyReader(properties), properties.role
    role_settings: dict[str, Any] = {}
    if role in (Role.ALL_IN_ONE, Role.OVERLORD):
        threshold = "druid.supervisor.{}Threshold".format
        role_settings["supervisor"] = SupervisorStateManagerConfig(
            unhealthiness_threshold=read.integer(threshold("unhealthiness"), 3, minimum=1),
            healthiness_threshold=read.integer(threshold("healthiness"), 3, minimum=1),
            task_unhealthiness_threshold=read.integer(threshold("taskUnhealthiness"), 3, minimum=1),
            task_healthiness_threshold=read.integer(threshold("taskHealthiness"), 3, minimum=1),
            store_stack_trace=read.boolean("druid.supervisor.storeStackTrace", False),
            max_stored_exception_events=read.integer("druid.supervisor.maxStoredExceptionEvents", None, minimum=0),
            idle_config_enabled=read.boolean("druid.supervisor.idleConfig.enabled", False),
            idle_config_inactive_after_millis=read.integer("druid.supervisor.idleConfig.inactiveAfterMillis",
                                                           600_000, minimum=0))
        role_settings["queue_max_size"] = read.integer("druid.indexer.queue.maxSize", 2**31 - 1, minimum=1)
        lease = read.duration("sluice.leader.leaseDuration", timedelta(seconds=15)).total_seconds()
        renew = read.duration("sluice.leader.renewPeriod", timedelta(seconds=3)).total_seconds()
        if renew * 2 > lease:
            raise ConfigError("sluice.leader.renewPeriod: must be at most half of sluice.leader.leaseDuration, so "
                              "that a leader renews before its lease runs out")
        role_settings |= {"leader_lease_s": lease, "leader_renew_s": renew, "kill": KillConfig.from_properties(properties),
                          "coordinator_period_s": read.duration("druid.coordinator.period",
                                                                timedelta(seconds=60)).total_seconds(),
                          "indexing_period_s": read.duration("druid.coordinator.period.indexingPeriod",
                                                             timedelta(minutes=30)).total_seconds()}
    if role is Role.ALL_IN_ONE:
        role_settings["warm_up"] = read.boolean("sluice.spark.warmUp", True)
    if role is Role.OVERLORD:
        strategy = read.string("sluice.indexer.selectStrategy", "equalDistribution")
        if strategy not in ("equalDistribution", "fillCapacity"):
            raise ConfigError(f"sluice.indexer.selectStrategy: [{strategy}] is not equalDistribution or fillCapacity")
        role_settings["worker_select_strategy"] = strategy
    if role is Role.WORKER:
        role_settings |= {"capacity": read.integer("druid.worker.capacity", 2, minimum=1),
                          "base_task_dirs": _directories(read, "druid.worker.baseTaskDirs")}
    if role in (Role.ALL_IN_ONE, Role.BROKER):
        role_settings |= {"max_query_rows": read.integer("sluice.broker.maxQueryRows", None, minimum=0),
                          "max_query_bytes": read.integer("sluice.broker.maxQueryBytes", None, minimum=0),
                          "query_memory_limit": read.string("sluice.broker.queryMemoryLimit"),
                          "load_max_rows": read.integer("sluice.broker.loadMaxRows", None, minimum=0),
                          "segment_cache": _segment_cache(read),
                          "result_cache": _result_cache(read)}
    port = read.integer("druid.plaintextPort", None, minimum=1)
    if port is None or port > 65535:
        raise ConfigError(f"druid.plaintextPort: [{read.raw('druid.plaintextPort')}] is not a port number")
    return NodeConfig(role=role, host=read.string("druid.host"), bind_on_host=read.boolean("druid.bindOnHost", True),
                      port=port, work_dir=Path(read.string("sluice.workDir")),
                      metadata_uri=metadata_uri(read), deep_storage=deep_storage_uri(read),
                      spark_master=read.string("sluice.spark.master"),
                      emitter=emitter or EmitterConfig.from_properties(properties),
                      auth=AuthConfig.from_properties(properties), tls=TlsConfig.from_properties(properties),
                      query_limits=QueryLimits.from_properties(properties),
                      max_request_bytes=read.integer("sluice.server.http.maxRequestBytes", None, minimum=0),
                      request_logging=RequestLogConfig.from_properties(properties),
                      json_logs=properties.get("sluice.log.format") == "json", **role_settings)


def _result_cache(read: PropertyReader) -> ResultCacheConfig:
    """Druid's broker keys of the result-level cache; unset, ResultCacheConfig's defaults (Druid's)."""
    from sluice.broker.result_cache import ResultCacheConfig

    default = ResultCacheConfig()
    return ResultCacheConfig(
        use=read.boolean("druid.broker.cache.useResultLevelCache", default.use),
        populate=read.boolean("druid.broker.cache.populateResultLevelCache", default.populate),
        result_limit_bytes=read.integer("druid.broker.cache.resultLevelCacheLimit", default.result_limit_bytes,
                                        minimum=0),
        size_bytes=read.integer("druid.cache.sizeInBytes", default.size_bytes, minimum=0))


#: Druid's HumanReadableBytes units, in any case: k, m, g, t, p are powers of 1000, KiB… PiB powers of 1024 (Druid
#: refuses `KB`, `MB`…, a fraction and a space inside)
_BYTE_UNITS = {"": 1, **{p: 1000 ** (i + 1) for i, p in enumerate("kmgtp")},
               **{f"{p}ib": 1024 ** (i + 1) for i, p in enumerate("kmgtp")}}


def _segment_cache(read: PropertyReader) -> tuple[Path, int] | None:
    """druid.segmentCache.locations: its one location's path and maxSize (bytes, or Druid's human-readable form)."""
    from sluice.segment.deep_storage import DEFAULT_CACHE_MAX_BYTES

    key = "druid.segmentCache.locations"
    locations = read.json(key, "a JSON list of locations")
    if locations is None:
        return None
    if not isinstance(locations, list) or len(locations) != 1 or not isinstance(locations[0], dict) \
            or not isinstance(locations[0].get("path"), str):
        raise ConfigError(f'{key}: expected one location, [{{"path": "/dir", "maxSize": "300GiB"}}], found '
                          f"{read.raw(key)}")
    size = str(locations[0].get("maxSize", DEFAULT_CACHE_MAX_BYTES)).strip()
    number = re.fullmatch(r"(\d+)([a-zA-Z]*)", size)
    if number is None or number[2].lower() not in _BYTE_UNITS:
        raise ConfigError(f"{key}: maxSize [{size}] is not a number of bytes (300000000000, 300g, 300GiB, …)")
    return Path(locations[0]["path"]), int(number[1]) * _BYTE_UNITS[number[2].lower()]


def _directories(read: PropertyReader, key: str) -> tuple[Path, ...]:
    """Druid's JSON list of paths, or the same comma-separated."""
    text = read.raw(key)
    if text is None:
        return ()
    if text.startswith("["):
        directories = read.names(key, [])
    else:
        directories = [d.strip() for d in text.split(",") if d.strip()]
    return tuple(Path(d) for d in directories)


def _cannot_serve(host: str, port: int) -> str | None:
    """Why the node could not listen on `host`:`port`, or None when it can."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use (another Sluice?); choose one with --port"
            return f"cannot listen on {host}:{port} (druid.host, --host, druid.bindOnHost): {error.strerror}"
    return None


def runtime_properties(path: str) -> tuple[str, dict[str, str]]:
    """A Druid runtime.properties file, read as Java reads it, with its name."""
    import javaproperties

    try:
        with open(path, encoding="utf-8") as file:
            return path, javaproperties.load(file)
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {error.strerror}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="Druid-compatible ingestion and SQL on Spark")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default) or ERROR")
    # also after the subcommand (`sluice start --log-level INFO`); there it overrides the one before
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", default=argparse.SUPPRESS, help="DEBUG, INFO, WARNING (default) or ERROR")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (description, role) in _ROLES.items():
        _add_role_options(commands.add_parser(name, help=description, parents=[common]), role)
    config = commands.add_parser("config", parents=[common], help="what a role's settings are")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    show = config_commands.add_parser("show", parents=[common],
                                      help="print a role's effective settings (runtime.properties lines, secrets "
                                           "masked), each with where it came from: default, file, env or flag")
    show_roles = show.add_subparsers(dest="show_role", required=True)
    for name, (description, role) in _ROLES.items():
        _add_role_options(show_roles.add_parser(name, help=description, parents=[common]), role)

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

    commands.add_parser("spark-archive", parents=[common],
                        help="archive Spark's classes once (about a minute), so that every node's, peon's and "
                             "job's JVM starts in half the time; `make install` does it")
    migrate = commands.add_parser("migrate", parents=[common],
                                  help="bring a metadata store's schema up to this Sluice's (nodes also do it as "
                                       "they start); the store is the one `sluice start` with the same options uses")
    _add_role_options(migrate, Role.ALL_IN_ONE)
    dev = commands.add_parser("dev", parents=[common],
                              help="a Kafka broker, sample data and a Spark cluster to try Sluice with")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True)
    dev_broker = dev_commands.add_parser("broker", parents=[common],
                                         help="run a throw-away Kafka-protocol broker (Tansu, in memory) until Ctrl-C")
    dev_broker.add_argument("--port", type=int, default=9092, help="(default: 9092, as the example spec expects)")
    dev_broker.add_argument("--host", default="127.0.0.1")
    dev_spark = dev_commands.add_parser("spark-cluster", parents=[common],
                                        help="run a Spark standalone cluster on loopback (a master and its workers, "
                                             "from the installed pyspark) until Ctrl-C, for --spark-master")
    dev_spark.add_argument("--work-dir", type=Path, default=Path("var/spark-cluster"),
                           help="the JVMs' logs and the workers' directories (default: var/spark-cluster)")
    dev_spark.add_argument("--port", type=int, default=7077, help="the master's (default: 7077, Spark's)")
    dev_spark.add_argument("--workers", type=int, default=2, help="(default: 2)")
    dev_spark.add_argument("--cores", type=int, default=1, help="of each worker (default: 1)")
    dev_spark.add_argument("--memory", default="1g", help="of each worker for its executors (default: 1g)")
    dev_cluster = dev_commands.add_parser("cluster", parents=[common],
                                          help="run Sluice's scale-out topology on this machine until Ctrl-C: "
                                               "PostgreSQL, S3 (moto), Kafka (Tansu), a Spark cluster, overlords, "
                                               "workers and brokers (docs/deployment.md)")
    dev_cluster.add_argument("--work-dir", type=Path, default=Path("var/cluster"),
                             help="every node's folder and log (default: var/cluster)")
    dev_cluster.add_argument("--overlords", type=int, default=1, help="(default: 1; two elect a leader)")
    dev_cluster.add_argument("--workers", type=int, default=2, help="(default: 2)")
    dev_cluster.add_argument("--brokers", type=int, default=2, help="(default: 2)")
    dev_cluster.add_argument("--spark-workers", type=int, default=2, help="(default: 2, of one core each)")
    dev_cluster.add_argument("--capacity", type=int, default=1,
                             help="task slots of each worker (default: 1; each task's Spark application takes one "
                                  "core of the Spark cluster)")
    dev_cluster.add_argument("--share-nothing", action="store_true",
                             help="each node and Spark worker as on a machine of its own (Linux, as root: a mount "
                                  "namespace each, where the others' folders and /tmp are empty)")
    dev_cluster.add_argument("--free-ports", action="store_true",
                             help="every listener on a free port instead of Druid's (8090, 8091, 8082, +100 for a "
                                  "second node), Kafka's 9092 and Spark's 7077")
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


#: how each setting's flag parses: a switch, a number, or one of a few names (text otherwise)
_SWITCHES = {"druid.supervisor.storeStackTrace", "druid.supervisor.idleConfig.enabled"}
_NUMBERS = {"druid.plaintextPort", "druid.worker.capacity", "sluice.broker.maxQueryRows", "sluice.broker.maxQueryBytes",
            "sluice.broker.loadMaxRows", "druid.supervisor.unhealthinessThreshold",
            "druid.supervisor.healthinessThreshold", "druid.supervisor.taskUnhealthinessThreshold",
            "druid.supervisor.taskHealthinessThreshold", "druid.supervisor.maxStoredExceptionEvents",
            "druid.supervisor.idleConfig.inactiveAfterMillis", "druid.indexer.queue.maxSize"}
_CHOICES = {"sluice.indexer.selectStrategy": ["equalDistribution", "fillCapacity"]}


def _add_role_options(command: argparse.ArgumentParser, role: Role) -> None:
    """--config, --emitter, and a flag for each setting the role has, named in its help; a flag not given leaves the
    setting to the file, the environment or the default (see sluice/config.py)."""
    command.set_defaults(role=role)
    command.add_argument("--config", type=runtime_properties, action="append", metavar="FILE",
                         help="a Druid runtime.properties file, or several (common first: the later wins): Druid's keys (druid.auth.*, druid.metadata.storage.*, "
                              "druid.storage.*, druid.server.http.*, druid.indexer.*, druid.worker.*…) and Sluice's "
                              "(sluice.*); see `sluice config show`. druid_* / sluice_* environment variables "
                              "override it (druid_worker_capacity=4), flags override both")
    command.add_argument("--emitter", type=EmitterConfig.model_validate_json,
                         help='where metrics go, as JSON with Druid\'s names, e.g. \'{"type":"composing",'
                              '"emitters":["prometheus","logging"]}\'; overrides druid.emitter.* (default: '
                              'prometheus, served on /metrics)')
    for setting in SETTINGS:
        if setting.flag is None or role not in setting.roles:
            continue
        default = setting.default_for(role)
        text = f"{setting.key}: {setting.help}" + ("" if default is None else f" (default: {default})")
        if setting.key in _SWITCHES:
            command.add_argument(setting.flag, dest=setting.key, action="store_true", default=argparse.SUPPRESS,
                                 help=text)
        else:
            command.add_argument(setting.flag, dest=setting.key, default=argparse.SUPPRESS, help=text,
                                 type=int if setting.key in _NUMBERS else str, choices=_CHOICES.get(setting.key),
                                 metavar=None if setting.key in _CHOICES else setting.flag.removeprefix("--").upper()
                                 .replace("-", "_"))


if __name__ == "__main__":
    main()
