"""Druid's lookup specs: a `LookupExtractorFactoryContainer` (`version` + `lookupExtractorFactory`) per lookup name
per tier, and the factories Sluice can serve: `map` (the key → value pairs in the spec itself) and `cachedNamespace`
over a `jdbc` extraction namespace (a table of a SQL database, read through SQLAlchemy).

Druid's coordinator stores a factory as the JSON it was given, without loading extensions; Sluice validates it on
the way in, so that a lookup no broker could load is a 400 naming the field, not a lookup that fails on every query.
The document is kept as posted (GET returns it unchanged), and parsed again where it is loaded.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator

from sluice.periods import parse_duration
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.input_source import SqlConnectorConfig
from sluice.spec.model import SpecModel

#: druid.lookup.lookupTier's default: the tier every broker loads unless configured otherwise
DEFAULT_TIER = "__default"


def _text(value: Any) -> Any:
    """Jackson reads a JSON number or boolean where a Map<String, String> wants text; so does Sluice."""
    return str(value).lower() if isinstance(value, bool) else str(value) if isinstance(value, int | float) else value


class MapLookupExtractorFactory(SpecModel):
    type: Literal["map"]
    map: dict[str, Annotated[str | None, BeforeValidator(_text)]]
    #: a hint that no two keys map to the same value; queries answer the same either way
    is_one_to_one: bool = False


def _poll_period(value: Any) -> timedelta:
    """Druid's Period field: ISO-8601 text (`PT10M`) or milliseconds; 0 (the default) loads once."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return timedelta(milliseconds=value)
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"expected an ISO-8601 period such as PT10M or milliseconds, got {value!r}")


class JdbcExtractionNamespace(SpecModel):
    """`SELECT keyColumn, valueColumn FROM table [WHERE filter]`, read again every `pollPeriod`."""

    type: Literal["jdbc"]
    connector_config: SqlConnectorConfig
    table: str = Field(min_length=1)
    key_column: str = Field(min_length=1)
    value_column: str = Field(min_length=1)
    #: Druid reads only rows changed since the last poll by this column; Sluice reads the whole table each poll
    ts_column: str | None = None
    #: a SQL condition in the database's own dialect, as Druid passes it on
    filter: str | None = None
    poll_period: Annotated[timedelta, BeforeValidator(_poll_period)] = timedelta(0)
    jitter_seconds: int | None = Field(default=None, ge=0)
    load_timeout_seconds: int | None = Field(default=None, ge=1)
    max_heap_percentage: int | None = None

    @field_validator("table")
    @classmethod
    def _at_most_schema_dot_table(cls, value: str) -> str:
        if value.count(".") > 1 or any(not part for part in value.split(".")):
            raise ValueError(f"expected a table name, or schema.table, got {value!r}")
        return value


class CachedNamespaceLookupExtractorFactory(SpecModel):
    type: Literal["cachedNamespace"]
    extraction_namespace: JdbcExtractionNamespace
    #: how long a broker waits for the first load (milliseconds); 0: don't wait
    first_cache_timeout: int = Field(default=60_000, ge=0)
    injective: bool = False


LookupExtractorFactory = Annotated[
    MapLookupExtractorFactory | CachedNamespaceLookupExtractorFactory, Field(discriminator="type")]


class LookupExtractorFactoryContainer(SpecModel):
    """One lookup as the coordinator holds it; `version` orders its updates (see `replaces`)."""

    version: str | None = None
    lookup_extractor_factory: LookupExtractorFactory


def replaces(version: str | None, existing: str | None) -> bool:
    """Druid's LookupExtractorFactoryMapContainer.replaces: a spec replaces another only with a greater version, in
    string order (Java's String.compareTo), nulls first; two nulls replace nothing."""
    if version is None or existing is None:
        return version is not None
    return version > existing


_FACTORIES = ("map", "cachedNamespace")
_NAMESPACES = ("jdbc",)


def parse_lookup(payload: Any, path: tuple[str, ...] = ()) -> LookupExtractorFactoryContainer:
    """A lookup spec as posted; SpecError names the field (`lookupExtractorFactory.extractionNamespace.table`), prefixed
    with `path` (tier and name) when the spec came within a tier map."""
    _check_types(payload, path)
    try:
        return LookupExtractorFactoryContainer.model_validate(payload)
    except ValidationError as error:
        raise from_validation_error(error, payload, path) from None


def _check_types(payload: Any, path: tuple[str, ...]) -> None:
    """The factory and namespace types Sluice serves, refused by name before pydantic lists every union member, and
    the map's values."""
    where = ".".join(path)
    factory = payload.get("lookupExtractorFactory") if isinstance(payload, dict) else None
    if not isinstance(factory, dict):
        return
    if factory.get("type") not in _FACTORIES:
        raise SpecError(_join(where, "lookupExtractorFactory.type"),
                        f"Sluice serves lookups of type {' or '.join(_FACTORIES)}, not {factory.get('type')!r}")
    mapping = factory.get("map")
    if factory["type"] == "map" and isinstance(mapping, dict):
        # checked here: pydantic's error path would read the `map` tag as the `map` field
        for key, value in mapping.items():
            if isinstance(value, dict | list):
                raise SpecError(_join(where, f"lookupExtractorFactory.map.{key}"),
                                f"expected a text value, got {type(value).__name__}")
    namespace = factory.get("extractionNamespace")
    if factory["type"] == "cachedNamespace" and isinstance(namespace, dict) and namespace.get("type") not in _NAMESPACES:
        raise SpecError(_join(where, "lookupExtractorFactory.extractionNamespace.type"),
                        f"Sluice reads the {' or '.join(_NAMESPACES)} extraction namespace, not "
                        f"{namespace.get('type')!r}")


def _join(prefix: str, field: str) -> str:
    return f"{prefix}.{field}" if prefix else field


def parse_tiers(payload: Any) -> dict[str, dict[str, LookupExtractorFactoryContainer]]:
    """The body of POST /lookups/config: `{tier: {name: spec}}`; every spec must carry a version."""
    if not isinstance(payload, dict) or not all(isinstance(tier, dict) for tier in payload.values()):
        raise SpecError("", "expected a JSON object of tiers, each an object of lookup names to lookup specs")
    return {tier: {name: parse_versioned(spec, tier, name, (tier, name)) for name, spec in lookups.items()}
            for tier, lookups in payload.items()}


def parse_versioned(payload: Any, tier: str, name: str,
                    path: tuple[str, ...] = ()) -> LookupExtractorFactoryContainer:
    """A spec for an update: Druid takes none without a version (the null version is only 0.10's legacy)."""
    spec = parse_lookup(payload, path)
    if spec.version is None:
        raise SpecError(_join(".".join(path), "version"), f"lookup [{tier}]:[{name}] does not have version.")
    return spec
