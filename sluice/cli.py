"""The `sluice` command: `sluice start` runs a node, `sluice quickstart` shows the whole path."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sluice", description="Druid-compatible ingestion and SQL on Spark")
    commands = parser.add_subparsers(dest="command", required=True)

    start = commands.add_parser("start", help="run overlord, worker and broker in one process")
    start.add_argument("--host", default="127.0.0.1")
    start.add_argument("--port", type=int, default=8888)
    start.add_argument("--work-dir", type=Path, default=Path("var"))
    start.add_argument("--metadata-uri", help="sqlite:///… (default: <work-dir>/metadata.db) or postgresql+psycopg://…")
    start.add_argument("--deep-storage", help="file:///… (default: <work-dir>/deep-storage) or s3://bucket/prefix")
    start.add_argument("--spark-master", default="local[*]")

    quickstart = commands.add_parser("quickstart", help="dev broker + sample data + example spec + SQL")
    quickstart.add_argument("--work-dir", type=Path, default=Path("var"))
    quickstart.add_argument("--port", type=int, default=8888)
    quickstart.add_argument("--events", type=int, default=300_000)
    quickstart.add_argument("--exit", action="store_true", help="stop after printing the results")
    parser.add_argument("--log-level", default="WARNING")

    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "start":
        from sluice.server.node import Node, NodeConfig

        node = Node(NodeConfig(args.host, args.port, args.work_dir, args.metadata_uri, args.deep_storage,
                               args.spark_master))
        node.start()
        print(f"Sluice serves on http://{args.host}:{args.port} (Ctrl-C to stop)")
        node.lifecycle.join()
    else:
        from sluice.dev.quickstart import run

        run(args.work_dir, args.port, args.events, args.exit)


if __name__ == "__main__":
    main()
