"""Druid's resources, actions and permissions (`org.apache.druid.server.security`).

A permission names a resource by a regular expression that must match the whole name; WRITE does not imply READ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, Iterable


class ResourceType(StrEnum):
    DATASOURCE = "DATASOURCE"
    VIEW = "VIEW"
    CONFIG = "CONFIG"
    STATE = "STATE"
    SYSTEM_TABLE = "SYSTEM_TABLE"
    QUERY_CONTEXT = "QUERY_CONTEXT"
    EXTERNAL = "EXTERNAL"


class Action(StrEnum):
    READ = "READ"
    WRITE = "WRITE"


@dataclass(frozen=True)
class Resource:
    name: str
    type: ResourceType

    @classmethod
    def datasource(cls, name: str) -> Resource:
        return cls(name, ResourceType.DATASOURCE)


#: servers, tasks' runtime state, leadership, metrics: what Druid's StateResourceFilter guards
STATE = Resource("STATE", ResourceType.STATE)
#: the security API itself
SECURITY = Resource("security", ResourceType.CONFIG)
#: what Druid's ConfigResourceFilter authorizes: the coordinator's dynamic configs (compaction, lookups)
CONFIG = Resource("CONFIG", ResourceType.CONFIG)
#: reading from outside Druid (EXTERN, batch input sources in SQL ingestion)
EXTERNAL = Resource("EXTERNAL", ResourceType.EXTERNAL)


@dataclass(frozen=True)
class ResourceAction:
    resource: Resource
    action: Action

    def to_json(self) -> dict[str, Any]:
        return {"resource": {"name": self.resource.name, "type": self.resource.type.value}, "action": self.action.value}


class InvalidPermission(ValueError):
    pass


@dataclass(frozen=True)
class Permission:
    """A ResourceAction whose resource name is a pattern."""

    resource_action: ResourceAction

    @classmethod
    def from_json(cls, document: Any) -> Permission:
        """Druid's `{"resource": {"name": <regex>, "type": ...}, "action": ...}`; InvalidPermission says what is
        wrong."""
        if not isinstance(document, dict) or not isinstance(document.get("resource"), dict):
            raise InvalidPermission(f"Invalid permission [{document}]: expected "
                                    '{"resource": {"name": ..., "type": ...}, "action": ...}')
        resource = document["resource"]
        name, type_, action = resource.get("name"), resource.get("type"), document.get("action")
        if not isinstance(name, str):
            raise InvalidPermission(f"Invalid permission [{document}]: resource.name must be a string")
        if type_ not in ResourceType.__members__:
            raise InvalidPermission(f"Invalid permission [{document}]: resource.type must be one of "
                                    f"{', '.join(ResourceType)}")
        if action not in Action.__members__:
            raise InvalidPermission(f"Invalid permission [{document}]: action must be READ or WRITE")
        try:
            re.compile(name)
        except re.error as error:
            raise InvalidPermission(f"Invalid permission, resource name regex[{name}] does not compile: {error}") \
                from None
        return cls(ResourceAction(Resource(name, ResourceType(type_)), Action(action)))

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        return re.compile(self.resource_action.resource.name)

    def permits(self, wanted: ResourceAction) -> bool:
        mine = self.resource_action
        return (mine.action is wanted.action and mine.resource.type is wanted.resource.type
                and self._pattern.fullmatch(wanted.resource.name) is not None)

    def to_json(self) -> dict[str, Any]:
        return self.resource_action.to_json()


def permits(permissions: Iterable[Permission], wanted: ResourceAction) -> bool:
    return any(permission.permits(wanted) for permission in permissions)


#: what Druid's initial admin and druid_system roles get: every action on every resource
SUPERUSER_PERMISSIONS = tuple(Permission(ResourceAction(Resource(".*", type_), action))
                              for type_ in ResourceType for action in Action)
