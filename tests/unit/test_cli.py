"""The `sluice` command as a new user meets it: options before or after the subcommand, a config file of Druid's
keys, a port already in use said before anything starts."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from pathlib import Path

import pytest

from sluice.broker.result_cache import ResultCacheConfig
from sluice.broker.scheduler import QueryLimits
from sluice.coordinator.duties import KillConfig
from sluice.cli import build_node_config, build_parser, main, node_config
from sluice.config import ConfigError, resolve
from sluice.server.roles import Role


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
    assert "sluice.workDir: where the node keeps" in commands.choices[role].format_help()


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


# ------------------------------------------------------------------------------------------- one configuration


def test_a_flag_beats_the_environment_which_beats_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "runtime.properties"
    config.write_text("druid.plaintextPort=8100\n"
                      "druid.worker.capacity=3\n"
                      "druid.indexer.queue.maxSize=10\n"
                      "druid.metadata.storage.type=postgresql\n"
                      "druid.metadata.storage.connector.connectURI=jdbc:postgresql://db.example:5432/druid\n"
                      "druid.metadata.storage.connector.user=druid\n"
                      "druid.metadata.storage.connector.password=s3cr/t\n"
                      "druid.storage.type=s3\n"
                      "druid.storage.bucket=segments\n"
                      "druid.storage.baseKey=/druid/segments/\n"
                      "druid.emitter=logging\n"
                      "druid.emitter.logging.logLevel=warn\n")
    monkeypatch.setenv("druid_plaintextPort", "8200")
    monkeypatch.setenv("druid_worker_capacity", "4")
    worker = node_config(build_parser().parse_args(["worker", "--config", str(config), "--port", "8300"]))
    assert (worker.port, worker.capacity) == (8300, 4)
    assert worker.metadata_uri == "postgresql+psycopg://druid:s3cr%2Ft@db.example:5432/druid"
    assert worker.deep_storage == "s3://segments/druid/segments"
    assert (worker.emitter.type, worker.emitter.log_level) == ("logging", "warn")
    overlord = node_config(build_parser().parse_args(["overlord", "--config", str(config)]))
    assert (overlord.port, overlord.queue_max_size) == (8200, 10)

    main(["config", "show", "worker", "--config", str(config), "--port", "8300"])
    shown = capsys.readouterr().out.splitlines()
    assert "druid.plaintextPort=8300  # flag --port" in shown
    assert "druid.worker.capacity=4  # env druid_worker_capacity" in shown
    assert f"druid.indexer.queue.maxSize=10  # file {config}" in shown
    assert f"druid.metadata.storage.connector.password=*****  # file {config}" in shown
    assert "sluice.spark.master=local[2,4]  # default" in shown
    assert not any("s3cr" in line for line in shown)

    main(["config", "show", "worker", "--config", str(config), "--emitter", '{"type": "prometheus"}'])
    assert '# druid.emitter.* overridden by --emitter: {"type":"prometheus"}' in capsys.readouterr().out.splitlines()


def test_druids_own_metadata_and_deep_storage_defaults_mean_the_work_dir() -> None:
    node = node_config(build_parser().parse_args(["start", "--work-dir", "/srv/sluice"]))
    assert node.metadata_uri is None and node.deep_storage is None
    assert node.resolved_metadata_uri == "sqlite:////srv/sluice/metadata.db"
    derby = {"druid.metadata.storage.type": "derby",
             "druid.metadata.storage.connector.connectURI": "jdbc:derby://localhost:1527/var/druid/metadata.db;create=true",
             "druid.storage.type": "local", "druid.storage.storageDirectory": "/srv/segments"}
    node = build_node_config(resolve(Role.ALL_IN_ONE, [("derby.properties", derby)], environ={}))
    assert (node.metadata_uri, node.deep_storage) == (None, "/srv/segments")


def test_druid_host_is_the_announced_name_and_bind_on_host_chooses_where_to_listen() -> None:
    own = build_node_config(resolve(Role.BROKER, [], environ={"druid_host": "broker-1.example"}))
    assert (own.url, own.bind_address) == ("http://broker-1.example:8082", "broker-1.example")
    druids = build_node_config(resolve(Role.BROKER, [], environ={"druid_host": "broker-1.example",
                                                                 "druid_bindOnHost": "false"}))
    assert (druids.url, druids.bind_address) == ("http://broker-1.example:8082", "0.0.0.0")


def test_the_start_up_warm_up_is_on_unless_a_setting_turns_it_off() -> None:
    assert build_node_config(resolve(Role.ALL_IN_ONE, [], environ={})).warm_up is True
    assert build_node_config(resolve(Role.ALL_IN_ONE, [], environ={"sluice_spark_warmUp": "false"})).warm_up is False
    with pytest.raises(ConfigError, match="sluice.spark.warmUp"):
        build_node_config(resolve(Role.ALL_IN_ONE, [("f", {"sluice.spark.warmUp": "sometimes"})], environ={}))


def test_druids_result_level_cache_keys_reach_the_broker() -> None:
    """The broker keys of Druid's caching docs (configuration: Broker caching); both off unless set."""
    assert build_node_config(resolve(Role.BROKER, [], environ={})).result_cache.enabled is False
    config = build_node_config(resolve(Role.BROKER, [("f", {
        "druid.broker.cache.useResultLevelCache": "true", "druid.broker.cache.populateResultLevelCache": "true",
        "druid.broker.cache.resultLevelCacheLimit": "1048576", "druid.cache.sizeInBytes": "3000000000"})], environ={}))
    assert config.result_cache == ResultCacheConfig(use=True, populate=True, result_limit_bytes=1_048_576,
                                                    size_bytes=3_000_000_000)


# the forms of Druid's docs (configuration/human-readable-byte) and of its HumanReadableBytes parser
@pytest.mark.parametrize(("max_size", "bytes_"), [(None, 10 << 30), (3_000_000_000, 3_000_000_000), ("1t", 10**12),
                                                   ("1T", 10**12), ("1200g", 1_200_000_000_000), ("1GiB", 1 << 30),
                                                   ("300gib", 300 << 30), ("7KiB", 7 << 10), ("2m", 2_000_000)])
def test_the_brokers_segment_cache_is_druids_one_location_with_its_max_size(max_size, bytes_) -> None:
    location = {"path": "/srv/cache", **({"maxSize": max_size} if max_size is not None else {})}
    config = build_node_config(resolve(Role.BROKER, [("f", {"druid.segmentCache.locations": json.dumps([location])})],
                                       environ={}))
    assert (config.segment_cache_dir, config.segment_cache) == (Path("/srv/cache"), (Path("/srv/cache"), bytes_))
    assert build_node_config(resolve(Role.BROKER, [], environ={})).segment_cache_dir == Path("var/segment-cache")


@pytest.mark.parametrize(("properties", "message"), [
    ({"druid.segmentCache.locations": "/srv/cache"}, "druid.segmentCache.locations: [/srv/cache] is not a JSON list"),
    ({"druid.segmentCache.locations": '[{"path": "/a"}, {"path": "/b"}]'},
     "druid.segmentCache.locations: expected one location"),
    ({"druid.segmentCache.locations": '[{"path": "/a", "maxSize": "lots"}]'},
     "druid.segmentCache.locations: maxSize [lots] is not a number of bytes"),
    ({"druid.segmentCache.locations": '[{"path": "/a", "maxSize": "1.2t"}]'},  # Druid takes whole numbers only
     "druid.segmentCache.locations: maxSize [1.2t] is not a number of bytes"),
    ({"druid.segmentCache.locations": '[{"path": "/a", "maxSize": "300GB"}]'},  # Druid's binary units end in iB
     "druid.segmentCache.locations: maxSize [300GB] is not a number of bytes"),
    ({"druid.metadata.storage.type": "mysql"}, "druid.metadata.storage.type: [mysql] is not supported"),
    ({"druid.metadata.storage.type": "postgresql"}, "druid.metadata.storage.connector.connectURI: required"),
    ({"druid.storage.type": "hdfs"}, "druid.storage.type: [hdfs] is not supported"),
    ({"druid.storage.type": "s3"}, "druid.storage.bucket: required"),
    ({"druid.plaintextPort": "http"}, "druid.plaintextPort: [http] is not a whole number"),
    ({"druid.emitter": "kafka"}, "druid.emitter: Input should be"),
    ({"druid.emitter": "http"}, "druid.emitter.http.recipientBaseUrl: the http emitter needs"),
    ({"sluice.leader.renewPeriod": "PT10S"}, "sluice.leader.renewPeriod: must be at most half"),
    ({"druid.supervisor.unhealthinessThreshold": "0"}, "druid.supervisor.unhealthinessThreshold: [0] must be at least 1"),
])
def test_a_setting_that_cannot_be_used_is_refused_naming_its_key(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        build_node_config(resolve(Role.ALL_IN_ONE, [("f", properties)], environ={}))
    assert str(refused.value).startswith(message)


def test_keys_sluice_does_not_read_are_named_with_what_was_probably_meant() -> None:
    properties = resolve(Role.ALL_IN_ONE, [("f", {"druid.indexer.queue.maxsize": "3", "druid.zk.service.host": "zk",
                                                  "druid.auth.authenticatorChain": '["allowAll"]', "sluice.workdir": "x",
                                                  "druid.worker.capacity": "4",
                                                  "druid.coordinator.kill.durationToRetian": "P1D"})],
                         environ={"druid_processing_numThreads": "2"})
    assert properties.unknown() == [
        "druid.coordinator.kill.durationToRetian (did you mean druid.coordinator.kill.durationToRetain?)",
        "druid.indexer.queue.maxsize (did you mean druid.indexer.queue.maxSize?)", "druid.processing.numThreads",
        "druid.worker.capacity (not read by this role)", "druid.zk.service.host",
        "sluice.workdir (did you mean sluice.workDir?)"]


def test_several_config_files_merge_in_order_and_no_secret_is_shown(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    common, own = tmp_path / "common.runtime.properties", tmp_path / "runtime.properties"
    common.write_text("druid.indexer.queue.maxSize=10\ndruid.coordinator.period=PT30S\n"
                      "druid.s3.accessKey=AKIAEXAMPLE\ndruid.emitter.http.basicAuthentication=admin:hunter2\n")
    own.write_text("druid.indexer.queue.maxSize=20\n")
    argv = ["overlord", "--config", str(common), "--config", str(own),
            "--metadata-uri", "postgresql+psycopg://druid:hunter2@db.example/druid"]
    overlord = node_config(build_parser().parse_args(argv))
    assert (overlord.queue_max_size, overlord.coordinator_period_s) == (20, 30)
    main(["config", "show", *argv])
    shown = capsys.readouterr().out
    assert f"druid.indexer.queue.maxSize=20  # file {own}" in shown
    assert f"druid.coordinator.period=PT30S  # file {common}" in shown
    assert "druid.metadata.storage.connector.connectURI=postgresql+psycopg://druid:*****@db.example/druid" in shown
    assert "hunter2" not in shown and "AKIAEXAMPLE" not in shown
