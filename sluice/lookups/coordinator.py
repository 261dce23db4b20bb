"""Druid's LookupCoordinatorManager: the lookups of every tier as one document in the metadata store's config table
(`druid_config`, under Druid's key `lookupsConfig`), changed as one compare-and-swap with its audit entry.

The rules are pure functions over the document (`{tier: {name: spec as posted}}`): an update adds or replaces
lookups and never deletes one; a lookup is replaced only by a spec of a greater version; deleting a tier's last
lookup deletes the tier.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sluice.lookups.specs import replaces
from sluice.metadata.store import AuditInfo, MetadataStore

#: Druid's LookupCoordinatorManager.LOOKUP_CONFIG_KEY
LOOKUP_CONFIG_KEY = "lookupsConfig"

#: tier → lookup name → the spec JSON as posted
Lookups = dict[str, dict[str, dict[str, Any]]]


class LookupConflict(ValueError):
    """An update whose version does not exceed the stored one's."""


class LookupNotFound(LookupError):
    pass


def with_update(current: Lookups | None, update: Mapping[str, Mapping[str, dict[str, Any]]]) -> Lookups:
    """`current` with every lookup of `update` added or replaced; LookupConflict when a version does not grow."""
    result = {tier: dict(lookups) for tier, lookups in (current or {}).items()}
    for tier, lookups in update.items():
        existing = result.setdefault(tier, {})
        for name, spec in lookups.items():
            if name in existing and not replaces(spec.get("version"), existing[name].get("version")):
                raise LookupConflict(
                    f"given update for lookup [{tier}]:[{name}] can't replace existing spec [version "
                    f"{existing[name].get('version')!r}]: the new version must be greater (in string order)")
            existing[name] = spec
    return result


def without_tier(current: Lookups | None, tier: str) -> Lookups:
    if current is None or tier not in current:
        raise LookupNotFound(f"tier [{tier}] not found")
    return {name: lookups for name, lookups in current.items() if name != tier}


def without_lookup(current: Lookups | None, tier: str, name: str) -> Lookups:
    if current is None or name not in current.get(tier, {}):
        raise LookupNotFound(f"lookup [{name}] not found in tier [{tier}]")
    result = {t: dict(lookups) for t, lookups in current.items()}
    del result[tier][name]
    if not result[tier]:
        del result[tier]
    return result


def read_lookups(metadata: MetadataStore) -> Lookups | None:
    """The stored document; None until lookups were first configured (Druid's coordinator then answers 404)."""
    return metadata.get_config(LOOKUP_CONFIG_KEY)


def change_lookups(metadata: MetadataStore, change: Callable[[Lookups | None], Lookups], audit: AuditInfo) -> Lookups:
    """Replace the document with `change(current)` in one transaction with its audit entry; `change` may raise to
    leave it as it is."""
    return metadata.update_config(LOOKUP_CONFIG_KEY, change, audit)
