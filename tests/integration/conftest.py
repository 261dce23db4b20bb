"""Session-wide fixtures: one dev Kafka broker and one SparkSession (each is slow to start)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pyspark.sql import SparkSession

from sluice.dev.tansu import DevKafkaBroker
from sluice.server.node import Node
from sluice.task import spark_session
from tests.integration.harness import running_node


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevKafkaBroker]:
    with DevKafkaBroker(log_dir=tmp_path_factory.mktemp("tansu")) as broker:
        yield broker


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session.get_or_create(master="local[2,4]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    """A throwaway PostgreSQL server's URI (``postgresql+psycopg://``); skipped without PostgreSQL."""
    from sluice.dev import postgres as pg

    bin_dir = pg.find_bin_dir()
    if bin_dir is None:
        pytest.skip(pg.MISSING_REASON)
    with pg.postgres_server(bin_dir) as uri:
        yield uri


@pytest.fixture(scope="session")
def node(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:  # noqa: ARG001
    """One all-in-one Sluice node for the HTTP tests (each test uses its own topic and data source); it shares
    the session's Spark, which must be up first."""
    with running_node(tmp_path_factory.mktemp("sluice")) as node:
        yield node


@pytest.fixture(scope="session")
def http(node: Node) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{node.config.port}", timeout=60) as client:
        yield client
