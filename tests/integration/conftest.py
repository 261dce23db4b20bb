"""Session-wide fixtures: one dev Kafka broker and one SparkSession (each is slow to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from sluice.dev.tansu import DevKafkaBroker
from sluice.task import spark_session


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevKafkaBroker]:
    with DevKafkaBroker(log_dir=tmp_path_factory.mktemp("tansu")) as broker:
        yield broker


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session.get_or_create(master="local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    """A throwaway PostgreSQL server's URI (``postgresql+psycopg://``); skipped without PostgreSQL."""
    from tests import pg

    bin_dir = pg.find_bin_dir()
    if bin_dir is None:
        pytest.skip(pg.MISSING_REASON)
    with pg.postgres_server(bin_dir) as uri:
        yield uri
