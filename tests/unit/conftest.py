"""Fixtures shared by the unit tests: nothing here starts a server or Spark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.metadata.store import MetadataStore


@pytest.fixture
def metadata(tmp_path: Path) -> Iterator[MetadataStore]:
    """A fresh SQLite metadata store with Druid's tables."""
    store = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    store.create_tables()
    yield store
    store.close()
