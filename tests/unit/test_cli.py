"""The `sluice` command as a new user meets it: options before or after the subcommand, a config file of Druid's
keys, a port already in use said before anything starts."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

import pytest

from sluice.broker.scheduler import QueryLimits
from sluice.coordinator.duties import KillConfig
from sluice.cli import build_parser, main, node_config


def test_log_level_goes_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    assert parser.parse_args(["start"]).log_level == "WARNING"
    assert parser.parse_args(["--log-level", "DEBUG", "start"]).log_level == "DEBUG"
    assert parser.parse_args(["start", "--log-level", "INFO"]).log_level == "INFO"
    assert parser.parse_args(["--log-level", "DEBUG", "worker", "--log-level", "ERROR"]).log_level == "ERROR"
    assert parser.parse_args(["stream", "run", "job.json", "--log-level", "INFO"]).log_level == "INFO"


@pytest.mark.parametrize("role", ["start", "overlord", "worker", "broker"])
def test_every_role_option_says_what_it_is_for(role: str) -> None:
    [commands] = [a for a in build_parser()._actions if a.dest == "command"]  # noqa: SLF001
    for action in commands.choices[role]._actions:  # noqa: SLF001
        assert action.help, action.option_strings
    assert "(default: ./var)" in commands.choices[role].format_help()


def test_a_config_file_of_druids_keys_reaches_the_node(tmp_path: Path) -> None:
    config = tmp_path / "runtime.properties"
    config.write_text("# a Druid operator's file\n"
                      "druid.auth.authenticatorChain=[\"basic\"]\n"
                      "druid.auth.authenticator.basic.type=basic\n"
                      "druid.auth.authenticator.basic.authorizerName=basic\n"
                      "druid.auth.authorizers=[\"basic\"]\n"
                      "druid.auth.authorizer.basic.type=basic\n"
                      "druid.server.http.maxQueryTimeout=60000\n"
                      "druid.query.scheduler.numThreads : 8\n"
                      "sluice.server.http.maxRequestBytes=1048576\n"
                      "druid.coordinator.period=PT30S\n"
                      "druid.coordinator.kill.on=true\n"
                      "druid.coordinator.kill.durationToRetain=P30D\n")
    node = node_config(build_parser().parse_args(["start", "--config", str(config)]))
    assert not node.auth.open and node.auth.authenticator_chain[0].name == "basic"
    assert node.query_limits == QueryLimits(max_timeout_ms=60_000, max_running=8)
    assert node.max_request_bytes == 1_048_576 and node.tls is None
    assert node.coordinator_period_s == 30 and node.kill == KillConfig(on=True, duration_to_retain=timedelta(days=30))


def test_a_wrong_key_in_the_config_file_stops_the_start_naming_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "runtime.properties"
    for line, message in (("druid.auth.authenticatorChain=basic", "druid.auth.authenticatorChain: [basic] is not a JSON"),
                          ("druid.coordinator.kill.bufferPeriod=P1M", "druid.coordinator.kill.bufferPeriod: "),
                          ("druid.coordinator.kill.maxSegments=0", "druid.coordinator.kill.maxSegments: [0]"),
                          ("druid.coordinator.period=PT0S", "druid.coordinator.period: must be longer")):
        config.write_text(line + "\n")
        with pytest.raises(SystemExit) as stopped:
            main(["start", "--config", str(config)])
        assert stopped.value.code == 2
        assert message in capsys.readouterr().err, line
    with pytest.raises(SystemExit):
        main(["start", "--config", str(tmp_path / "missing.properties")])
    assert "cannot read" in capsys.readouterr().err


def test_a_port_in_use_is_said_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as stopped:
            main(["broker", "--port", str(port), "--work-dir", str(tmp_path)])
    assert stopped.value.code == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    assert not (tmp_path / "metadata.db").exists()  # nothing started
