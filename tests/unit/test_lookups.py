"""Lookups without servers: spec JSON in → the spec or the field named in the error; stored versions and an
update in → the new document or a refusal; keys in → Druid's extraction answers; the coordinator's document and a
clock in → what a broker serves."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sluice.broker.errors import SqlError
from sluice.broker.native.queries import parse_query
from sluice.lookups.coordinator import (
    LookupConflict,
    LookupNotFound,
    with_update,
    without_lookup,
    without_tier,
)
from sluice.lookups.references import LookupExtractor, LookupLoadError, LookupReferences
from sluice.lookups.specs import (
    JdbcExtractionNamespace,
    parse_lookup,
    parse_tiers,
    parse_versioned,
    replaces,
)
from sluice.spec.errors import SpecError


def map_spec(version: str | None, mapping: dict[str, Any]) -> dict[str, Any]:
    return {"version": version, "lookupExtractorFactory": {"type": "map", "map": mapping}}


def jdbc_spec(version: str, database: Path, **namespace: Any) -> dict[str, Any]:
    return {"version": version, "lookupExtractorFactory": {"type": "cachedNamespace", "extractionNamespace": {
        "type": "jdbc", "connectorConfig": {"connectURI": f"jdbc:sqlite:{database}"}, "table": "t",
        "keyColumn": "k", "valueColumn": "v", **namespace}}}


# ------------------------------------------------------------------------------------------------------ specs


def test_a_map_spec_reads_numbers_as_text_as_jackson_does() -> None:
    spec = parse_lookup(map_spec("v1", {"1": 2, "t": True, "n": None}))
    assert spec.lookup_extractor_factory.map == {"1": "2", "t": "true", "n": None}  # type: ignore[union-attr]


def test_a_jdbc_spec_takes_druids_fields_and_poll_period_forms() -> None:
    spec = parse_lookup(jdbc_spec("v1", Path("/x.db"), pollPeriod="PT10M", tsColumn="ts", filter="a = 1",
                                  jitterSeconds=5, loadTimeoutSeconds=60))
    namespace = spec.lookup_extractor_factory.extraction_namespace  # type: ignore[union-attr]
    assert isinstance(namespace, JdbcExtractionNamespace)
    assert (namespace.poll_period, namespace.filter, namespace.connector_config.connect_uri) == \
        (timedelta(minutes=10), "a = 1", "jdbc:sqlite:/x.db")
    assert parse_lookup(jdbc_spec("v1", Path("/x.db"), pollPeriod=1500)).lookup_extractor_factory \
        .extraction_namespace.poll_period == timedelta(milliseconds=1500)  # type: ignore[union-attr]


@pytest.mark.parametrize(("payload", "path", "message"), [
    ({"version": "v1", "lookupExtractorFactory": {"type": "cachedNamespace", "extractionNamespace": {"type": "uri"}}},
     "lookupExtractorFactory.extractionNamespace.type", "Sluice reads the jdbc extraction namespace, not 'uri'"),
    ({"version": "v1", "lookupExtractorFactory": {"type": "kafka"}},
     "lookupExtractorFactory.type", "Sluice serves lookups of type map or cachedNamespace, not 'kafka'"),
    ({"version": "v1"}, "lookupExtractorFactory", "Field required"),
    (map_spec("v1", {"k": {"nested": 1}}), "lookupExtractorFactory.map.k", "expected a text value, got dict"),
    (jdbc_spec("v1", Path("/x.db"), table="a.b.c"), "lookupExtractorFactory.extractionNamespace.table",
     "expected a table name, or schema.table, got 'a.b.c'"),
    (jdbc_spec("v1", Path("/x.db"), pollPeriod="P1M"), "lookupExtractorFactory.extractionNamespace.pollPeriod",
     "contains months or years, which vary in length"),
    (jdbc_spec("v1", Path("/x.db"), keyColumn=""), "lookupExtractorFactory.extractionNamespace.keyColumn",
     "at least 1 character"),
    ({**jdbc_spec("v1", Path("/x.db")), "extra": 1}, "extra", "Sluice does not support this field"),
])
def test_a_spec_sluice_cannot_serve_names_the_field(payload: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_lookup(payload)
    assert caught.value.path == path
    assert message in caught.value.message


def test_an_update_needs_a_version_and_a_tier_map_prefixes_tier_and_name() -> None:
    with pytest.raises(SpecError, match=r"^version: lookup \[t\]:\[n\] does not have version\.$"):
        parse_versioned(map_spec(None, {}), "t", "n")
    with pytest.raises(SpecError) as caught:
        parse_tiers({"t": {"n": map_spec("v1", {"k": ["a"]})}})
    assert caught.value.path == "t.n.lookupExtractorFactory.map.k"
    with pytest.raises(SpecError, match="expected a JSON object of tiers"):
        parse_tiers({"t": ["n"]})


# ------------------------------------------------------------------------------------------------------ versions


@pytest.mark.parametrize(("new", "existing", "replaces_it"), [
    ("v2", "v1", True),
    ("v1", "v1", False),  # equal: refused, as Druid
    ("v0", "v1", False),
    ("v10", "v9", False),  # string order, not numeric
    ("2026-01-02", "2026-01-01T23:00", True),
    ("v1", None, True),  # nulls first
    (None, "v1", False),
    (None, None, False),
])
def test_versions_order_updates_as_druids_replaces(new: str | None, existing: str | None, replaces_it: bool) -> None:
    assert replaces(new, existing) is replaces_it


def test_an_update_adds_and_replaces_but_never_deletes() -> None:
    stored = {"a": {"x": map_spec("v1", {}), "y": map_spec("v1", {})}}
    updated = with_update(stored, {"a": {"x": map_spec("v2", {"k": "v"})}, "b": {"z": map_spec("v1", {})}})
    assert updated == {"a": {"x": map_spec("v2", {"k": "v"}), "y": map_spec("v1", {})}, "b": {"z": map_spec("v1", {})}}
    assert stored["a"]["x"] == map_spec("v1", {})  # the input is left as it was
    assert with_update(None, {}) == {}  # Druid's initialization by posting {}
    with pytest.raises(LookupConflict, match=r"^given update for lookup \[a\]:\[x\] can't replace existing spec"):
        with_update(stored, {"a": {"x": map_spec("v1", {"k": "other"})}})


def test_deleting_a_tiers_last_lookup_deletes_the_tier() -> None:
    stored = {"a": {"x": map_spec("v1", {})}, "b": {"y": map_spec("v1", {}), "z": map_spec("v1", {})}}
    assert without_lookup(stored, "a", "x") == {"b": stored["b"]}
    assert without_lookup(stored, "b", "y") == {"a": stored["a"], "b": {"z": map_spec("v1", {})}}
    assert without_tier(stored, "b") == {"a": stored["a"]}
    for delete in (lambda: without_lookup(stored, "a", "nope"), lambda: without_lookup(None, "a", "x"),
                   lambda: without_tier(stored, "c")):
        with pytest.raises(LookupNotFound):
            delete()


# ------------------------------------------------------------------------------------------------------ extraction


@pytest.mark.parametrize(("key", "retain", "replace", "expected"), [
    ("a", False, None, "A"),
    ("zz", False, None, None),
    ("zz", True, None, "zz"),
    ("zz", False, "missing", "missing"),
    (None, False, "missing", "missing"),
    (None, True, None, None),
    ("empty", False, "missing", ""),  # an empty value is a value (SQL-compatible mode)
])
def test_lookup_extraction_as_druid(key: str | None, retain: bool, replace: str | None, expected: str | None) -> None:
    assert LookupExtractor({"a": "A", "empty": ""}).apply(key, retain, replace) == expected


# ------------------------------------------------------------------------------------------------------ brokers


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_broker_serves_a_new_version_after_its_poll_and_not_before() -> None:
    document = {"__default": {"x": map_spec("v1", {"a": "1"})}, "other": {"y": map_spec("v1", {})}}
    clock = Clock()
    references = LookupReferences(lambda: document, poll_s=5, clock=clock)
    first = references.get("x")
    assert first is not None and first.map == {"a": "1"}
    assert references.get("y") is None  # another tier's
    document = {"__default": {"x": map_spec("v2", {"a": "2"})}}
    assert references.get("x") is first
    clock.now = 5
    assert references.get("x").map == {"a": "2"}  # type: ignore[union-attr]
    document = {}
    clock.now = 10
    assert references.get("x") is None


def test_a_jdbc_lookup_is_read_again_every_poll_period_and_keeps_its_map_when_a_read_fails(tmp_path: Path) -> None:
    database = tmp_path / "lookup.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE t (k TEXT, v TEXT, keep INTEGER)")
        connection.executemany("INSERT INTO t VALUES (?, ?, ?)", [("a", "1", 1), ("b", "2", 0), (None, "x", 1)])
    clock = Clock()
    spec = jdbc_spec("v1", database, pollPeriod="PT1M", filter="keep = 1")
    references = LookupReferences(lambda: {"__default": {"x": spec}}, clock=clock)
    assert references.get("x").map == {"a": "1"}  # type: ignore[union-attr]  # the NULL key skipped
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE t SET v = '10' WHERE k = 'a'")
    clock.now = 59
    assert references.get("x").map == {"a": "1"}  # type: ignore[union-attr]
    clock.now = 60
    assert references.get("x").map == {"a": "10"}  # type: ignore[union-attr]
    with sqlite3.connect(database) as connection:
        connection.execute("DROP TABLE t")
    clock.now = 120
    assert references.get("x").map == {"a": "10"}  # type: ignore[union-attr]


def test_a_jdbc_lookup_that_cannot_be_read_at_all_says_why(tmp_path: Path) -> None:
    references = LookupReferences(lambda: {"__default": {"x": jdbc_spec("v1", tmp_path / "none.db")}})
    with pytest.raises(LookupLoadError, match=r"^Lookup \[x\] cannot be loaded from its database: .*no such table"):
        references.get("x")


# ------------------------------------------------------------------------------------------------------ native


@pytest.mark.parametrize(("dimension", "message"), [
    ({"type": "lookup", "dimension": "d", "name": "x", "lookup": {"type": "map", "map": {}}},
     "dimensions[0].lookup: exactly one of lookup (a map given inline) and name (a registered lookup) must be set"),
    ({"type": "extraction", "dimension": "d", "extractionFn": {"type": "upper"}},
     ("dimensions[0].extractionFn: Input tag 'upper' found using 'type' does not match any of the expected tags: "
     "'registeredLookup', 'lookup'")),
    ({"dimension": "d", "extractionFn": {"type": "registeredLookup", "lookup": "x"}},
     "dimensions[0].extractionFn: Sluice does not support this field"),
    ({"type": "regex", "dimension": "d"},
     "dimensions[0]: expected a dimension spec of type default, extraction or lookup"),
])
def test_native_dimension_specs_name_what_is_wrong(dimension: dict[str, Any], message: str) -> None:
    with pytest.raises(SqlError) as caught:
        parse_query({"queryType": "groupBy", "dataSource": "w", "intervals": ["2015/2016"], "dimensions": [dimension]})
    assert caught.value.error_message == f"Invalid native query: {message}"
