"""What a persist directory holds beside its Parquet rows, readable without Spark (the task's realtime views list
it; the merge at publish uses it)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

#: a persist's string dimensions of which a row held several values (a JSON list); Spark reads no file named `_…`
MULTI_VALUES_FILE = "_multi_values.json"


def write_multi_values(persist_dir: Path, names: Iterable[str]) -> None:
    """Note the dimensions of which a persist's rows hold several values (none: nothing is written)."""
    if names := list(names):
        (persist_dir / MULTI_VALUES_FILE).write_text(json.dumps(names))


def multi_values(persist_dirs: Iterable[Path]) -> tuple[str, ...]:
    """The string dimensions that any of these persists holds multi-valued (as their JSON array text), sorted."""
    return tuple(sorted({name for d in persist_dirs if (d / MULTI_VALUES_FILE).exists()
                         for name in json.loads((d / MULTI_VALUES_FILE).read_text())}))
