"""One configuration for every role, in Druid's terms.

A setting is a runtime.properties key: Druid's key wherever Sluice does what Druid does (`druid.plaintextPort`,
`druid.metadata.storage.*`, `druid.storage.*`, `druid.worker.capacity`, `druid.indexer.queue.maxSize`,
`druid.supervisor.*`, `druid.auth.*`…), `sluice.*` for Sluice's own. Three layers, each overriding the one before:
the file given with `--config`, the environment (Druid's Docker convention: `druid_indexer_queue_maxSize=10` sets
`druid.indexer.queue.maxSize`; `sluice_…` likewise), and command-line flags. `sluice config show` prints the result
with where each value came from and secrets masked.

Reads go through `PropertyReader`, whose errors name the key; keys no part of Sluice reads are warned about at start
(a typo is not silently ignored).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from pydantic import TypeAdapter, ValidationError

from sluice.broker.limits import DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_RESULT_ROWS
from sluice.periods import parse_duration
from sluice.server.roles import Role
from sluice.spec.input_source import Password, reveal

log = logging.getLogger(__name__)
_PASSWORD_PROVIDER: TypeAdapter[Password] = TypeAdapter(Password)


class ConfigError(ValueError):
    """A setting that cannot be used; the message starts with its key."""


#: Druid has no such limit (Jetty reads what comes); a node holds a body in memory, so it bounds it. Task specs with
#: inline data are the largest bodies a user sends.
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
_ALL_ROLES = frozenset(Role)
_SERVING = frozenset({Role.ALL_IN_ONE, Role.BROKER})
_LEADING = frozenset({Role.ALL_IN_ONE, Role.OVERLORD})


@dataclass(frozen=True)
class Setting:
    key: str
    help: str
    #: the value when nothing sets it, as text; a role's own where roles differ; None: unset
    default: str | Mapping[Role, str] | None = None
    #: the command-line option that sets it
    flag: str | None = None
    roles: frozenset[Role] = _ALL_ROLES

    def default_for(self, role: Role) -> str | None:
        return self.default.get(role) if isinstance(self.default, Mapping) else self.default


SETTINGS: tuple[Setting, ...] = (
    Setting("druid.host", "the name other nodes and clients reach this node by (announced; with "
            "druid.bindOnHost, also the only address it listens on)", "127.0.0.1", "--host"),
    Setting("druid.bindOnHost", "true: listen on druid.host only (Sluice's default, so that a node is not reachable "
            "from other machines unless asked); false: on every interface, as Druid's default", "true"),
    Setting("druid.plaintextPort", "the HTTP port",
            {Role.ALL_IN_ONE: "8888", Role.OVERLORD: "8090", Role.WORKER: "8091", Role.BROKER: "8082"}, "--port"),
    Setting("sluice.log.format", "plain, or json: a JSON object a line, with the request and query ids", "plain"),
    Setting("sluice.workDir", "where the node keeps its metadata, segments and task files", "var", "--work-dir"),
    Setting("druid.metadata.storage.type", "derby (Druid's default; Sluice keeps an SQLite store in the work dir "
            "instead), sqlite or postgresql", "derby"),
    Setting("druid.metadata.storage.connector.connectURI",
            "jdbc:postgresql://host:port/db, an SQLAlchemy URI (sqlite:///…, postgresql+psycopg://…), or unset for "
            "the work dir's SQLite store", None, "--metadata-uri"),
    Setting("druid.metadata.storage.connector.user", "the metadata store's user (with a jdbc: connectURI)"),
    Setting("druid.metadata.storage.connector.password", "its password (a string or Druid's password provider JSON)"),
    Setting("druid.storage.type", "deep storage: local or s3", "local"),
    Setting("druid.storage.storageDirectory", "local deep storage's directory (default: <work dir>/deep-storage)"),
    Setting("druid.storage.bucket", "S3 deep storage's bucket (endpoint and credentials: the AWS_* environment)"),
    Setting("druid.storage.baseKey", "S3 deep storage's key prefix", ""),
    Setting("sluice.storage.uri", "deep storage as one URI, file:///… or s3://bucket/prefix; overrides druid.storage.*",
            None, "--deep-storage"),
    Setting("sluice.spark.master", "the Spark master tasks run on",
            {Role.ALL_IN_ONE: "local[*,4]", Role.OVERLORD: "local[2,4]", Role.WORKER: "local[2,4]",
             Role.BROKER: "local[2,4]"}, "--spark-master"),
    Setting("sluice.spark.warmUp", "run a small read, persist and merge as the node starts, so that its first task "
            "does not find Spark cold (about 20 s before the node is healthy)", "true", None,
            frozenset({Role.ALL_IN_ONE})),
    Setting("druid.emitter", "where metrics go: prometheus (served on /metrics), logging, http, composing or noop; "
            "each emitter's own keys under druid.emitter.<type>.*", "prometheus"),
    Setting("druid.worker.capacity", "tasks (peons) at once", "2", "--capacity", frozenset({Role.WORKER})),
    Setting("druid.worker.baseTaskDirs", 'directories for task directories, slot i in the (i mod n)-th, as a JSON '
            'list ["/a","/b"] or comma-separated (default: <work dir>/tasks)', None, "--base-task-dirs",
            frozenset({Role.WORKER})),
    Setting("sluice.broker.maxQueryRows", "the most rows a query may return; a larger result is refused with Druid's "
            "'Resource limit exceeded' (Druid's maxSubqueryRows; 0: no limit)", str(DEFAULT_MAX_RESULT_ROWS), "--max-query-rows", _SERVING),
    Setting("sluice.broker.maxQueryBytes", "the most bytes of strings and arrays a query may return; more is refused "
            "(0: no limit)", str(DEFAULT_MAX_RESULT_BYTES), "--max-query-bytes", _SERVING),
    Setting("sluice.broker.queryMemoryLimit", "DuckDB's memory limit, shared by the queries running at once", "4GB",
            "--query-memory-limit", _SERVING),
    Setting("druid.segmentCache.locations", 'where the broker keeps its copies of segments from remote deep storage, '
            'and their most bytes, least recently used dropped first: Druid\'s JSON list of one location '
            '[{"path": "/var/sluice/segment-cache", "maxSize": "300GiB"}] (default: <work dir>/segment-cache, 10GiB)',
            None, None, _SERVING),
    Setting("druid.broker.cache.useResultLevelCache", "answer a query again from the result-level cache while the "
            "segments it read stay the same", "false", None, _SERVING),
    Setting("druid.broker.cache.populateResultLevelCache", "keep query results in the result-level cache", "false",
            None, _SERVING),
    Setting("druid.broker.cache.resultLevelCacheLimit", "the largest result kept, in bytes", str(2**31 - 1), None,
            _SERVING),
    Setting("druid.cache.sizeInBytes", "the result-level cache's size, in bytes (least recently used results go "
            "first)", str(256 << 20), None, _SERVING),
    Setting("sluice.broker.loadMaxRows", "rows of published segments the broker loads into DuckDB's own storage for "
            "faster queries (0: read the segment files only)", "50000000", "--load-max-rows", _SERVING),
    Setting("sluice.indexer.selectStrategy", "equalDistribution (spread tasks over the workers with the most free "
            "slots) or fillCapacity (fill one worker first)", "equalDistribution", "--worker-select-strategy",
            frozenset({Role.OVERLORD})),
    Setting("druid.supervisor.unhealthinessThreshold", "failed supervisor runs in a row that make a supervisor "
            "unhealthy", "3", "--supervisor-unhealthiness-threshold", _LEADING),
    Setting("druid.supervisor.healthinessThreshold", "successful runs in a row that make an unhealthy supervisor "
            "healthy again", "3", "--supervisor-healthiness-threshold", _LEADING),
    Setting("druid.supervisor.taskUnhealthinessThreshold", "failed tasks in a row that make a supervisor "
            "UNHEALTHY_TASKS", "3", "--supervisor-task-unhealthiness-threshold", _LEADING),
    Setting("druid.supervisor.taskHealthinessThreshold", "successful tasks in a row that make it healthy again", "3",
            "--supervisor-task-healthiness-threshold", _LEADING),
    Setting("druid.supervisor.storeStackTrace", "recentErrors carry whole stack traces", "false",
            "--supervisor-store-stack-trace", _LEADING),
    Setting("druid.supervisor.maxStoredExceptionEvents", "recentErrors kept per supervisor (default: the larger of "
            "the two supervisor thresholds)", None, "--supervisor-max-stored-exception-events", _LEADING),
    Setting("druid.supervisor.idleConfig.enabled", "supervisors whose spec has no idleConfig turn IDLE when their "
            "stream has no new data", "false", "--supervisor-idle-config-enabled", _LEADING),
    Setting("druid.supervisor.idleConfig.inactiveAfterMillis", "how long without new data makes a supervisor IDLE",
            "600000", "--supervisor-idle-config-inactive-after-millis", _LEADING),
    Setting("druid.indexer.queue.maxSize", "the most active tasks; more are refused with HTTP 429", str(2**31 - 1),
            "--indexer-queue-max-size", _LEADING),
    Setting("druid.coordinator.period", "how often the retention rules are applied", "PT60S",
            None, _LEADING),
    Setting("druid.coordinator.period.indexingPeriod", "how often auto-compaction submits compact tasks", "PT1800S",
            None, _LEADING),
    Setting("druid.coordinator.kill.on", "delete unused segments (rows and files) past their retention", "false", None,
            _LEADING),
    Setting("druid.coordinator.kill.period", "how often the kill duty and the clean-up run", "P1D", None, _LEADING),
    Setting("druid.coordinator.kill.durationToRetain", "unused segments ending before this long ago are killed",
            "P90D", None, _LEADING),
    Setting("druid.coordinator.kill.bufferPeriod", "…and marked unused before this long ago", "P30D", None, _LEADING),
    Setting("druid.coordinator.kill.maxSegments", "segments one kill task deletes at most", "100", None, _LEADING),
    Setting("druid.coordinator.kill.pendingSegments.on", "delete pending segments no task can publish any more",
            "true", None, _LEADING),
    Setting("sluice.coordinator.kill.orphanFiles.on", "delete files in deep storage that no segment names", "true",
            None, _LEADING),
    Setting("sluice.coordinator.kill.orphanFiles.durationToRetain", "…once they are this old", "P1D", None, _LEADING),
    Setting("sluice.leader.leaseDuration", "overlords compete for a lease of this length in the metadata store; a "
            "standby takes over at most this long after the leader died", "PT15S", None, _LEADING),
    Setting("sluice.leader.renewPeriod", "how often the leader renews its lease (at most half of it)", "PT3S", None,
            _LEADING),
    Setting("druid.server.http.defaultQueryTimeout", "a query's timeout when its context gives none (ms)", "300000"),
    Setting("druid.server.http.maxQueryTimeout", "the largest timeout a query may ask for (ms; default: none)"),
    Setting("druid.query.scheduler.numThreads", "queries running at once; more are refused with HTTP 429 "
            "(default: as many as ask)"),
    Setting("druid.query.scheduler.laning.strategy", "none, or hilo: queries of a negative priority share at most "
            "druid.query.scheduler.laning.maxLowPercent of numThreads", "none", None, _SERVING),
    Setting("druid.query.scheduler.laning.maxLowPercent", "the hilo strategy's share of the slots for low-priority "
            "queries (1-100)", None, None, _SERVING),
    Setting("sluice.server.http.maxRequestBytes", "a larger request body is refused with HTTP 413 (0: no limit)",
            str(DEFAULT_MAX_REQUEST_BYTES)),
    Setting("druid.sql.planner.authorizeSystemTablesDirectly", "a sys table needs SYSTEM_TABLE READ on its name",
            "false", None, _SERVING),
    Setting("druid.enablePlaintextPort", "Sluice's nodes call each other on the plaintext port: true only", "true"),
    Setting("druid.enableTlsPort", "serve HTTPS on druid.tlsPort too", "false"),
    Setting("druid.tlsPort", "the HTTPS port"),
    Setting("druid.server.https.keyStorePath", "the TLS port's PKCS #12 key store"),
    Setting("druid.server.https.keyStoreType", "pkcs12 (convert a JKS one with keytool)", "pkcs12"),
    Setting("druid.server.https.keyStorePassword", "the key store's password (or Druid's password provider JSON)"),
)
BY_KEY = {setting.key: setting for setting in SETTINGS}

#: Druid's key families whose configurations warn about the keys of theirs they do not read: security, request
#: logging, each emitter's settings
_FAMILIES = ("druid.auth.", "druid.escalator.", "druid.request.logging.", "druid.emitter.")
#: words in a key whose value is not shown (Druid's druid.server.hiddenProperties hides the same)
_SECRET_WORDS = ("password", "secret", "credential", "token", "pwd", "accesskey", "basicauthentication")


@dataclass(frozen=True)
class Value:
    text: str
    #: "default", "file <path>", "env <NAME>" or "flag <--option>"
    source: str


@dataclass(frozen=True, eq=False)
class Properties(Mapping[str, str]):
    """The effective settings of one role, with where each came from."""

    role: Role
    entries: Mapping[str, Value] = field(default_factory=dict)

    def __getitem__(self, key: str) -> str:
        return self.entries[key].text

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def source(self, key: str) -> str:
        return self.entries[key].source if key in self.entries else "default"

    def unknown(self) -> list[str]:
        """Keys set that this role does not read, each with the key it probably meant when there is one."""
        known = set(BY_KEY)
        said = []
        for key in sorted(self.entries):
            if self.entries[key].source == "default" or key.startswith(_FAMILIES):
                continue
            if key in known:
                if self.role not in BY_KEY[key].roles:
                    said.append(f"{key} (not read by this role)")
                continue
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
            said.append(f"{key} (did you mean {close[0]}?)" if close else key)
        return said

    def render(self) -> str:
        """runtime.properties lines of every setting, secrets masked, each with its source."""
        return "\n".join(f"{key}={masked(key, self.entries[key].text)}  # {self.entries[key].source}"
                         for key in sorted(self.entries))


def masked(key: str, value: str) -> str:
    """The value as it may be shown: a secret key's as stars, a URI's password as stars."""
    if is_secret(key) and value:
        return "*****"
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return value
    if not password:
        return value
    return value.replace(f":{password}@", ":*****@", 1)


def is_secret(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def environment_properties(environ: Mapping[str, str]) -> dict[str, Value]:
    """Settings from `druid_…` and `sluice_…` variables: underscores become dots (keys with underscores of their own
    cannot be set so, as in Druid's Docker image)."""
    return {name.replace("_", "."): Value(text, f"env {name}") for name, text in environ.items()
            if name.startswith(("druid_", "sluice_"))}


def resolve(role: Role, files: Sequence[tuple[str, Mapping[str, str]]] = (), environ: Mapping[str, str] | None = None,
            flags: Mapping[str, str] | None = None) -> Properties:
    """Defaults, then the files (named, in order: a common file, then the role's own, as Druid's operators keep
    them), then the environment, then the flags: the later wins."""
    values: dict[str, Value] = {}
    for setting in SETTINGS:
        default = setting.default_for(role)
        if role in setting.roles and default is not None:
            values[setting.key] = Value(default, "default")
    for name, file in files:
        values |= {key: Value(text, f"file {name}") for key, text in file.items()}
    values |= environment_properties(os.environ if environ is None else environ)
    values |= {key: Value(text, f"flag {BY_KEY[key].flag}") for key, text in (flags or {}).items()}
    return Properties(role, values)


class PropertyReader:
    """Typed reads of settings; a value that cannot be used raises ConfigError naming its key. It remembers which
    keys were read, so that a family's others can be warned about."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        self._properties = properties
        self._read: set[str] = set()

    def raw(self, key: str) -> str | None:
        self._read.add(key)
        value = self._properties.get(key)
        return None if value is None or value.strip() == "" else value.strip()

    def string(self, key: str, default: Any = None) -> str:
        value = self.raw(key)
        if value is not None:
            return value
        if default is None:
            raise ConfigError(f"{key}: required")
        return default

    def integer(self, key: str, default: int | None, minimum: int | None = None) -> int | None:
        value = self.raw(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{key}: [{value}] is not a whole number") from None
        if minimum is not None and number < minimum:
            raise ConfigError(f"{key}: [{value}] must be at least {minimum}")
        return number

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{key}: [{value}] is not true or false")
        return value.lower() == "true"

    def duration(self, key: str, default: timedelta, allow_zero: bool = False) -> timedelta:
        """An ISO-8601 period (PT60S, P1D), longer than nothing unless `allow_zero`."""
        value = self.raw(key)
        if value is None:
            return default
        try:
            duration = parse_duration(value)
        except ValueError as error:
            raise ConfigError(f"{key}: {error}") from None
        if duration < timedelta(0) or (duration == timedelta(0) and not allow_zero):
            raise ConfigError(f"{key}: must be longer than nothing, e.g. PT60S")
        return duration

    def json(self, key: str, expected: str) -> Any:
        """The value as JSON, None when unset; a ConfigError saying it is not `expected` when it is not JSON."""
        value = self.raw(key)
        if value is None:
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"{key}: [{value}] is not {expected}") from None

    def names(self, key: str, default: list[str]) -> list[str]:
        """A JSON list of strings, e.g. `["basic"]`."""
        expected = 'a JSON list of names, e.g. ["basic"]'
        names = self.json(key, expected)
        if names is None:
            return default
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"{key}: [{self.raw(key)}] is not {expected}")
        return names


    def password(self, key: str) -> str | None:
        """Druid's password provider: the password itself, or `{"type": "default", "password": ...}` or
        `{"type": "environment", "variable": ...}` (the spec's `Password`); None when the key is not set."""
        value = (self.raw(key) or "").strip() or None
        if value is None or not value.startswith("{"):
            return value
        try:
            return reveal(_PASSWORD_PROVIDER.validate_json(value))
        except ValidationError:
            raise ConfigError(f'{key}: password provider must be {{"type": "default", "password": ...}} or '
                              '{"type": "environment", "variable": ...}') from None
        except ValueError as e:
            raise ConfigError(f"{key}: {e}") from None

    def warn_unread(self, prefixes: tuple[str, ...]) -> None:
        for key in sorted(set(self._properties) - self._read):
            if key.startswith(prefixes):
                log.warning("configuration key %s is not one Sluice knows; it is ignored", key)


def metadata_uri(reader: PropertyReader) -> str | None:
    """The SQLAlchemy URI of druid.metadata.storage.*; None: the work dir's SQLite store."""
    kind = reader.string("druid.metadata.storage.type", "derby").lower()
    uri = reader.raw("druid.metadata.storage.connector.connectURI")
    if kind not in ("derby", "sqlite", "postgresql"):
        raise ConfigError(f"druid.metadata.storage.type: [{kind}] is not supported; use postgresql, or derby/sqlite "
                          "for the work dir's SQLite store")
    if uri is None or uri.startswith("jdbc:derby:"):
        if kind == "postgresql":
            raise ConfigError("druid.metadata.storage.connector.connectURI: required with "
                              "druid.metadata.storage.type=postgresql")
        return None
    if uri.startswith("jdbc:postgresql://"):
        user = reader.raw("druid.metadata.storage.connector.user")
        password = reader.password("druid.metadata.storage.connector.password")
        login = "" if user is None else quote(user, safe="") + (
            "" if password is None else ":" + quote(password, safe="")) + "@"
        return "postgresql+psycopg://" + login + uri.removeprefix("jdbc:postgresql://")
    if uri.startswith("jdbc:"):
        raise ConfigError(f"druid.metadata.storage.connector.connectURI: [{masked('', uri)}] is not a PostgreSQL JDBC "
                          "URI")
    return uri


def deep_storage_uri(reader: PropertyReader) -> str | None:
    """The deep storage URI of sluice.storage.uri or druid.storage.*; None: the work dir's."""
    uri = reader.raw("sluice.storage.uri")
    if uri is not None:
        return uri
    kind = reader.string("druid.storage.type", "local")
    if kind == "local":
        directory = reader.raw("druid.storage.storageDirectory")
        return None if directory is None else directory
    if kind == "s3":
        bucket = reader.string("druid.storage.bucket")
        return f"s3://{bucket}/{reader.string('druid.storage.baseKey', '').strip('/')}"
    raise ConfigError(f"druid.storage.type: [{kind}] is not supported; use local or s3")
