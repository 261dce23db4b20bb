"""A Sluice node running overlord, worker and broker in one process (`sluice start`).

Everything is built and started through the Lifecycle, stage by stage: the metadata store and deep
storage first, then Spark, the task runner and the supervisors, then HTTP, then the announcement
that the node serves (`/status/health` turns true).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fastapi import FastAPI

from sluice.broker.broker import Broker
from sluice.lifecycle import Lifecycle, Stage
from sluice.metadata.store import MetadataStore
from sluice.overlord.supervisor_manager import SupervisorManager
from sluice.segment.deep_storage import DeepStorage
from sluice.server.api_sql import sql_router
from sluice.server.api_supervisor import supervisor_router
from sluice.server.api_task import task_router
from sluice.server.http_server import HttpServer
from sluice.spec.supervisor import KafkaIOConfig
from sluice.stream.kafka import KafkaStream
from sluice.task.kafka_index_task import TaskToolbox
from sluice.worker.thread_runner import ThreadTaskRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeConfig:
    host: str = "127.0.0.1"
    port: int = 8888
    work_dir: Path = Path("var")
    metadata_uri: str | None = None
    deep_storage: str | None = None
    spark_master: str = "local[*]"

    @property
    def resolved_metadata_uri(self) -> str:
        return self.metadata_uri or f"sqlite:///{(self.work_dir / 'metadata.db').resolve()}"

    @property
    def resolved_deep_storage(self) -> str:
        return self.deep_storage or (self.work_dir / "deep-storage").resolve().as_uri()


def kafka_stream(io: KafkaIOConfig) -> KafkaStream:
    return KafkaStream({k: str(v) for k, v in io.consumer_properties.items()}, io.topic)


class Node:
    def __init__(self, config: NodeConfig, stream_factory: Callable[[KafkaIOConfig], KafkaStream] = kafka_stream) -> None:
        self.config = config
        self.stream_factory = stream_factory
        self.lifecycle = Lifecycle()
        self.ready = False
        self.app = FastAPI(title="Sluice", version="0.1.0")
        self.lifecycle.add("metadata store", self._start_metadata, stage=Stage.INIT)
        self.lifecycle.add("spark and tasks", self._start_tasks, self._stop_tasks, stage=Stage.NORMAL)
        self.lifecycle.add("supervisors", self._start_supervisors, self._stop_supervisors, stage=Stage.NORMAL)
        self.lifecycle.add("http", self._start_http, self._stop_http, stage=Stage.SERVER)
        self.lifecycle.add("announcement", self._announce, self._unannounce, stage=Stage.ANNOUNCEMENTS)

        @self.app.get("/status/health")
        def health() -> bool:
            return self.ready

        @self.app.get("/status")
        def status() -> dict:
            return {"version": "0.1.0", "modules": []}

    def start(self) -> None:
        self.lifecycle.start()

    def stop(self) -> None:
        self.lifecycle.stop()

    def _start_metadata(self) -> None:
        self.config.work_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = MetadataStore(self.config.resolved_metadata_uri)
        self.metadata.create_tables()
        self.deep_storage = DeepStorage.from_uri(self.config.resolved_deep_storage)
        self.broker = Broker(self.metadata, self.deep_storage, self.config.work_dir / "segment-cache")

    def _start_tasks(self) -> None:
        from sluice.task import kafka_source, spark_session  # Spark starts here, not at import

        self.spark = spark_session.get_or_create(self.config.spark_master)
        kafka_source.register(self.spark)

        def toolbox(task_dir: Path) -> TaskToolbox:
            return TaskToolbox(self.spark, self.metadata, self.deep_storage, task_dir, self.stream_factory)

        self.task_runner = ThreadTaskRunner(toolbox, self.metadata, self.config.work_dir / "tasks")
        self.task_runner.fail_orphans()

    def _stop_tasks(self) -> None:
        self.task_runner.stop()

    def _start_supervisors(self) -> None:
        self.supervisors = SupervisorManager(self.metadata, self.task_runner, self.stream_factory)
        self.supervisors.start()

    def _stop_supervisors(self) -> None:
        self.supervisors.stop()

    def _start_http(self) -> None:
        self.app.include_router(supervisor_router(self.supervisors))
        self.app.include_router(task_router(self.metadata, self.task_runner))
        self.app.include_router(sql_router(self.broker))
        self.http = HttpServer(self.app, self.config.host, self.config.port)
        self.http.start()
        log.info("Sluice serves on http://%s:%d", self.config.host, self.config.port)

    def _stop_http(self) -> None:
        self.http.stop()

    def _announce(self) -> None:
        self.ready = True

    def _unannounce(self) -> None:
        self.ready = False
