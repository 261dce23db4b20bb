"""docs/spec-fields.md, walked: Druid's default of every field is accepted where Druid puts it, and every value the
table says Sluice refuses is a 400 naming that field."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
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


# A section about one input source or format ("## Batch input source `s3`") walks its fields in a spec that has it.
SOURCES = {
    "local": {"type": "local", "baseDir": "/tmp", "filter": "*.json"},
    "http": {"type": "http", "uris": ["http://127.0.0.1/a.json"]},
    "s3": {"type": "s3", "uris": ["s3://bucket/a.json"]},
    "sql": {"type": "sql", "database": {"type": "sqlite", "connectorConfig": {"connectURI": "jdbc:sqlite:/tmp/x.db"}},
            "sqls": ["SELECT * FROM t"]},
    "druid": {"type": "druid", "dataSource": "other", "interval": "2024-01-01/2024-01-02"},
}
#: input sources that read their own columns: Druid refuses an inputFormat beside them
WITHOUT_FORMAT = {"sql", "druid"}
FORMATS = {
    "json": {"type": "json"},
    "csv": {"type": "csv", "columns": ["ts", "a", "x"]},
    "regex": {"type": "regex", "pattern": "(.*) (.*)", "columns": ["ts", "a"]},
    "kafka": {"type": "kafka", "valueFormat": {"type": "json"}},
    "parquet": {"type": "parquet"},
    "avro_ocf": {"type": "avro_ocf"},
}


#: a section about one aggregator ("## Aggregator `thetaSketch`") walks its fields in a spec whose metric it is
AGGREGATORS = {kind: {"type": kind, "name": "m", "fieldName": "x"} for kind in (
    "longFirst", "stringFirst", "HLLSketchBuild", "thetaSketch", "quantilesDoublesSketch", "tDigestSketch",
    "hyperUnique")}


@dataclass(frozen=True)
class Row:
    kind: str  # supervisor or task
    path: str
    default: str  # the table's cells, as written
    status: str
    refused: str
    #: what the section's spec has at spec.ioConfig: ("inputSource" or "inputFormat", its JSON)
    io: tuple[str, dict[str, Any]] | None = None
    #: the section's aggregator, the spec's only metric
    metric: dict[str, Any] | None = None


def _rows() -> list[Row]:
    """Every field, for each kind of spec it applies to."""
    rows: list[Row] = []
    kinds, io, metric = ["supervisor", "task"], None, None
    for line in TABLE.read_text().splitlines():
        if line.startswith("## "):
            kinds = ["supervisor"] if "Kafka" in line else ["task"] if "Batch" in line else ["supervisor", "task"]
            named = re.search(r"input (source|format) `(\w+)`", line, re.IGNORECASE)
            io = None if named is None else (
                ("inputSource", SOURCES[named[2]]) if named[1] == "source" else ("inputFormat", FORMATS[named[2]]))
            aggregator = re.match(r"## Aggregator `(\w+)`", line)
            metric = None if aggregator is None else AGGREGATORS[aggregator[1]]
        if not line.startswith("| ") or line.startswith(("| field", "| ---")):
            continue
        field, default, status, refused = (c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
        match = re.fullmatch(r"(supervisor |task )?`([^`]+)`", field)
        assert match, f"a field cell is a path in backticks: {field!r}"
        for kind in [match.group(1).strip()] if match.group(1) else kinds:
            rows.append(Row(kind, match.group(2), default, status, refused, io, metric))
    return rows


ROWS = _rows()


def _spec_with(row: Row, value: Any) -> tuple[dict[str, Any], Any]:
    """The base spec (with the row's input source or format) with `value` at the row's path; `list[].field` is the
    field of the list's first element."""
    base, parse = PARSERS[row.kind]
    spec = copy.deepcopy(base)
    if row.io is not None:
        spec["spec"]["ioConfig"][row.io[0]] = copy.deepcopy(row.io[1])
        if row.io[1]["type"] in WITHOUT_FORMAT:
            del spec["spec"]["ioConfig"]["inputFormat"]
    if row.metric is not None:
        spec["spec"]["dataSchema"]["metricsSpec"] = [copy.deepcopy(row.metric)]
    *parents, name = row.path.split(".")
    node = spec
    for key in parents:
        node = node[key.removesuffix("[]")][0] if key.endswith("[]") else node.setdefault(key, {})
    node[name] = value
    return spec, parse


def test_the_table_covers_every_part_of_the_spec():
    paths = {row.path for row in ROWS}
    assert len(paths) > 150
    for part in ("spec.dataSchema.dimensionsSpec.", "spec.dataSchema.granularitySpec.", "spec.ioConfig.",
                 "spec.tuningConfig.", "spec.dataSchema.transformSpec.", "spec.tuningConfig.indexSpec.",
                 "spec.ioConfig.inputSource.", "spec.ioConfig.inputFormat.", "context."):
        assert any(p.startswith(part) for p in paths), part
    assert {io[1]["type"] for row in ROWS if (io := row.io)} == set(SOURCES) | set(FORMATS)
    assert all(row.status.split(":")[0].split(" (")[0] in ("honoured", "accepted", "default only", "not yet")
               or row.status.startswith(("honoured", "accepted", "not yet")) for row in ROWS)


def _row_id(row: Row) -> str:
    """`kind:path`, with the section's input source or format (or aggregator) between when it has one."""
    section = row.io[1]["type"] if row.io else row.metric["type"] if row.metric else None
    return f"{row.kind}:{section + ':' if section else ''}{row.path}"


DEFAULTS = [row for row in ROWS if row.default.startswith("`") and not (row.refused and _json(row.refused) == _json(row.default))]


@pytest.mark.parametrize("row", DEFAULTS, ids=map(_row_id, DEFAULTS))
def test_druids_default_is_accepted(row: Row) -> None:
    spec, parse = _spec_with(row, _json(row.default))
    parse(spec)


REFUSED = [row for row in ROWS if row.refused]


@pytest.mark.parametrize("row", REFUSED, ids=map(_row_id, REFUSED))
def test_a_value_sluice_cannot_honour_is_refused_naming_the_field(row: Row) -> None:
    value = _json(row.refused)
    assert value is not None, f"{row.path}: the refused cell must hold JSON in backticks"
    spec, parse = _spec_with(row, value)
    with pytest.raises(SpecError) as refused:
        parse(spec)
    assert refused.value.path.startswith(row.path.replace("[]", "[0]")), refused.value
