"""docs/spec-fields.md, walked: Druid's default of every field is accepted where Druid puts it, and every value the
table says Sluice refuses is a 400 naming that field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sluice.spec.batch import parse_batch_task
from sluice.spec.errors import SpecError
from sluice.spec.supervisor import parse_supervisor_spec

TABLE = Path(__file__).parents[2] / "docs" / "spec-fields.md"
SUPERVISOR = {"type": "kafka", "spec": {
    "dataSchema": {"dataSource": "d", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": [{"type": "string", "name": "a"}]},
                   "metricsSpec": [{"type": "longSum", "name": "m", "fieldName": "x"}],
                   "granularitySpec": {"segmentGranularity": "HOUR"}},
    "ioConfig": {"topic": "t", "inputFormat": {"type": "json"}, "consumerProperties": {"bootstrap.servers": "k:9092"}},
    "tuningConfig": {"type": "kafka"}}}
TASK = {"type": "index_parallel", "spec": {
    "dataSchema": {"dataSource": "d", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": [{"type": "string", "name": "a"}]},
                   "metricsSpec": [{"type": "longSum", "name": "m", "fieldName": "x"}],
                   "granularitySpec": {"segmentGranularity": "HOUR"}},
    "ioConfig": {"type": "index_parallel", "inputSource": {"type": "inline", "data": "{}"},
                 "inputFormat": {"type": "json"}},
    "tuningConfig": {"type": "index_parallel"}}}
PARSERS = {"supervisor": (SUPERVISOR, parse_supervisor_spec), "task": (TASK, parse_batch_task)}


def _json(cell: str) -> Any:
    """The JSON in a cell's leading backticks (a table cell escapes `|` as `\\|`), or None when there is none."""
    match = re.match(r"`([^`]+)`", cell)
    if match is None:
        return None
    try:
        return json.loads(match.group(1).replace("\\|", "|"))
    except ValueError:
        return None


def _rows() -> list[tuple[str, str, str, str, str]]:
    """(kind, path, default cell, status, refused cell) of every field, for each kind of spec it applies to."""
    rows, kinds = [], ["supervisor", "task"]
    for line in TABLE.read_text().splitlines():
        if line.startswith("## "):
            kinds = ["supervisor"] if "Kafka" in line else ["task"] if "Batch" in line else ["supervisor", "task"]
        if not line.startswith("| ") or line.startswith(("| field", "| ---")):
            continue
        field, default, status, refused = (c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
        match = re.fullmatch(r"(supervisor |task )?`([^`]+)`", field)
        assert match, f"a field cell is a path in backticks: {field!r}"
        for kind in [match.group(1).strip()] if match.group(1) else kinds:
            rows.append((kind, match.group(2), default, status, refused))
    return rows


ROWS = _rows()


def _spec_with(kind: str, path: str, value: Any) -> tuple[dict[str, Any], Any]:
    """The base spec with `value` at `path`; `list[].field` is the field of the list's first element."""
    base, parse = PARSERS[kind]
    spec = copy.deepcopy(base)
    *parents, name = path.split(".")
    node = spec
    for key in parents:
        node = node[key.removesuffix("[]")][0] if key.endswith("[]") else node.setdefault(key, {})
    node[name] = value
    return spec, parse


def test_the_table_covers_every_part_of_the_spec():
    paths = {path for _, path, *_ in ROWS}
    assert len(paths) > 100
    for part in ("spec.dataSchema.dimensionsSpec.", "spec.dataSchema.granularitySpec.", "spec.ioConfig.",
                 "spec.tuningConfig.", "spec.dataSchema.transformSpec."):
        assert any(p.startswith(part) for p in paths), part
    assert all(row[3].split(":")[0].split(" (")[0] in ("honoured", "accepted", "default only", "not yet")
               or row[3].startswith(("honoured", "accepted", "not yet")) for row in ROWS)


DEFAULTS = [(kind, path, _json(default)) for kind, path, default, _, refused in ROWS
            if default.startswith("`") and not (refused and _json(refused) == _json(default))]


@pytest.mark.parametrize("kind, path, default", DEFAULTS, ids=[f"{k}:{p}" for k, p, _ in DEFAULTS])
def test_druids_default_is_accepted(kind, path, default):
    spec, parse = _spec_with(kind, path, default)
    parse(spec)


REFUSED = [(kind, path, _json(refused)) for kind, path, _, _, refused in ROWS if refused]


@pytest.mark.parametrize("kind, path, value", REFUSED, ids=[f"{k}:{p}" for k, p, _ in REFUSED])
def test_a_value_sluice_cannot_honour_is_refused_naming_the_field(kind, path, value):
    assert value is not None, f"{path}: the refused cell must hold JSON in backticks"
    spec, parse = _spec_with(kind, path, value)
    with pytest.raises(SpecError) as refused:
        parse(spec)
    assert refused.value.path.startswith(path.replace("[]", "[0]")), refused.value
