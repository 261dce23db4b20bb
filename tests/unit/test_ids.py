"""Task ids and dataSource names become directory names: Druid's IdUtils.validateId rules, with its messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.ids import path_under, validate_id
from sluice.spec.errors import SpecError
from sluice.spec.supervisor import parse_supervisor_spec
from sluice.task.task import TaskFailure, task_from_json
from sluice.worker.thread_runner import ThreadTaskRunner

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wikipedia-kafka-supervisor.json"


@pytest.mark.parametrize("value", ["wikipedia", "wiki-1.0_x", "with space", "t.e.$\\, Россия 한국中国!?", "é" * 127])
def test_names_druid_accepts_pass(value: str) -> None:
    assert validate_id("dataSource", value) == value


@pytest.mark.parametrize(("value", "message"), [
    ("", "dataSource cannot be null or empty. Please provide a dataSource."),
    (None, "dataSource cannot be null or empty. Please provide a dataSource."),
    (".hidden", "dataSource cannot start with the '.' character."),
    ("../../../tmp/evil", "dataSource cannot start with the '.' character."),
    ("/tmp/x", "dataSource cannot contain the '/' character."),
    ("a/b", "dataSource cannot contain the '/' character."),
    ("tab\there", "dataSource cannot contain whitespace character except space."),
    ("new\nline", "dataSource cannot contain whitespace character except space."),
    ("nul\x00", "dataSource cannot contain character #0 (at position 3)."),
    ("bell\x07", "dataSource cannot contain character #7 (at position 4)."),
    ("\x85next", "dataSource cannot contain whitespace character except space."),
    ("\x9b", "dataSource cannot contain character #155 (at position 0)."),
    ("emoji 😀", "dataSource cannot contain character #128512 (at position 6)."),
    ("x" * 256, "dataSource cannot be longer than 255 bytes."),
    ("é" * 128, "dataSource cannot be longer than 255 bytes."),
])
def test_names_druid_refuses_fail_with_its_message(value: object, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        validate_id("dataSource", value)
    assert str(raised.value) == message


@pytest.mark.parametrize(("payload", "message"), [
    ({"type": "noop", "id": "/tmp/x"}, "task ID cannot contain the '/' character."),
    ({"type": "noop", "id": "ok", "dataSource": "../../../tmp/evil"}, "dataSource cannot start with the '.' character."),
    ({"type": "noop", "id": "x\x00"}, "task ID cannot contain character #0 (at position 1)."),
    ({"type": "noop", "id": "x" * 300}, "task ID cannot be longer than 255 bytes."),
    ({"type": "kill", "id": "ok", "dataSource": "a/b", "interval": "2020-01-01/2021-01-01"}, "cannot contain the '/' character"),
])
def test_a_task_with_a_path_for_a_name_is_refused(payload: dict, message: str) -> None:
    with pytest.raises((TaskFailure, SpecError)) as raised:
        task_from_json(payload)
    assert message in str(raised.value)


def test_a_supervisor_spec_with_a_path_for_a_data_source_is_refused_naming_the_field() -> None:
    spec = json.loads(EXAMPLE.read_text())
    spec["spec"]["dataSchema"]["dataSource"] = "../../../tmp/evil"
    with pytest.raises(SpecError) as raised:
        parse_supervisor_spec(spec)
    assert str(raised.value) == "spec.dataSchema.dataSource: dataSource cannot start with the '.' character."


def test_path_under_keeps_a_name_inside_its_root(tmp_path: Path) -> None:
    assert path_under(tmp_path, "task_1") == tmp_path.resolve() / "task_1"
    assert path_under(tmp_path, "wiki", "2020", "index.parquet") == tmp_path.resolve() / "wiki/2020/index.parquet"
    for escape in (("..", "x"), ("/etc/passwd",), ("a", "..", "..", "b"), (".",)):
        with pytest.raises(ValueError, match="is not a name inside"):
            path_under(tmp_path, *escape)


def test_a_report_asked_for_by_a_path_is_not_found_and_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"secret": true}')  # beside the tasks dir, as a work dir's files are
    runner = ThreadTaskRunner(lambda task_id, task_dir: None, tmp_path / "tasks")  # type: ignore[arg-type,return-value]
    assert runner.report("..") is None
    assert runner.report("no_such_task") is None
