"""The `sluice` command: `sluice start` runs all-in-one, `sluice overlord|worker|broker` one role each,
`sluice quickstart` shows the whole path."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from sluice.emitter.config import EmitterConfig
from sluice.server.roles import Role


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sluice", description="Druid-compatible ingestion and SQL on Spark")
    commands = parser.add_subparsers(dest="command", required=True)

    roles = {
        "start": ("run overlord and broker in one process, tasks as threads of it", Role.ALL_IN_ONE, 8888),
        "overlord": ("run the overlord: supervisors, task queue, tasks on workers", Role.OVERLORD, 8090),
        "worker": ("run a worker: tasks as peon processes", Role.WORKER, 8091),
        "broker": ("run the broker: Druid SQL", Role.BROKER, 8082),
    }
    for name, (description, role, port) in roles.items():
        command = commands.add_parser(name, help=description)
        command.set_defaults(role=role)
        command.add_argument("--host", default="127.0.0.1")
        command.add_argument("--port", type=int, default=port)
        command.add_argument("--work-dir", type=Path, default=Path("var"))
        command.add_argument("--metadata-uri", help="sqlite:///… (default: <work-dir>/metadata.db) or "
                                                    "postgresql+psycopg://…")
        command.add_argument("--deep-storage", help="file:///… (default: <work-dir>/deep-storage) or s3://bucket/prefix")
        command.add_argument("--spark-master", default="local[*]" if role is Role.ALL_IN_ONE else "local[2]",
                             help="the Spark master tasks run on")
        command.add_argument("--emitter", type=EmitterConfig.model_validate_json,
                             default=EmitterConfig(type="prometheus"),
                             help='where metrics go, as JSON with Druid\'s names, e.g. \'{"type":"composing",'
                                  '"emitters":["prometheus","logging"]}\' (default: prometheus, served on /metrics)')
        if role is Role.WORKER:
            command.add_argument("--capacity", type=int, default=2, help="tasks (peons) at once")
        if role in (Role.ALL_IN_ONE, Role.BROKER):
            command.add_argument("--max-query-rows", type=int, default=100_000,
                                 help="the most rows a query may return; a larger result is refused with Druid's "
                                      "'Resource limit exceeded' (default: 100000, Druid's maxSubqueryRows; 0: no "
                                      "limit)")
            command.add_argument("--query-memory-limit", default="4GB",
                                 help="DuckDB's memory limit, shared by the queries running at once over the same "
                                      "segments (default: 4GB)")
        if role is Role.OVERLORD:
            command.add_argument("--worker-select-strategy", default="equalDistribution",
                                 choices=["equalDistribution", "fillCapacity"])

    quickstart = commands.add_parser("quickstart", help="dev broker + sample data + example spec + SQL")
    quickstart.add_argument("--work-dir", type=Path, default=Path("var"))
    quickstart.add_argument("--port", type=int, default=8888)
    quickstart.add_argument("--events", type=int, default=300_000)
    quickstart.add_argument("--exit", action="store_true", help="stop after printing the results")
    parser.add_argument("--log-level", default="WARNING")

    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in roles:
        from sluice.server.node import Node, NodeConfig

        node = Node(NodeConfig(host=args.host, port=args.port, work_dir=args.work_dir, metadata_uri=args.metadata_uri,
                               deep_storage=args.deep_storage, spark_master=args.spark_master, role=args.role,
                               capacity=getattr(args, "capacity", 2),
                               worker_select_strategy=getattr(args, "worker_select_strategy", "equalDistribution"),
                               max_query_rows=getattr(args, "max_query_rows", 100_000),
                               query_memory_limit=getattr(args, "query_memory_limit", "4GB"),
                               emitter=args.emitter))
        node.start()
        print(f"Sluice {args.role.value} serves on http://{args.host}:{args.port} (Ctrl-C to stop)")
        node.lifecycle.join()
    else:
        from sluice.dev.quickstart import run

        run(args.work_dir, args.port, args.events, args.exit)


if __name__ == "__main__":
    main()
