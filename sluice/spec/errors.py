"""Spec errors carry the JSON path of the offending field, because that is what a user can act on."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from pydantic import ValidationError
from pydantic.alias_generators import to_camel


class SpecError(ValueError):
    """An ingestion spec Sluice cannot run: rendered as HTTP 400 `{"error": "<path>: <message>"}`."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def join_path(parts: Iterable[str | int]) -> str:
    """`("spec", "metricsSpec", 0, "fieldName")` -> `spec.metricsSpec[0].fieldName`."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def path_in_payload(payload: Any, loc: Sequence[str | int]) -> list[str | int]:
    """Keep only the parts of a pydantic `loc` that exist in the submitted JSON.

    pydantic inserts union tags and validator labels into `loc`; walking the payload alongside it
    drops them so the path names the user's field, e.g. `metricsSpec[0].fieldName`.
    """
    path: list[str | int] = []
    node = payload
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(node, dict) and part == node.get("type"):
            continue  # the tag of a discriminated union (a filter's "and", "bound"…), not a field
        elif isinstance(node, dict) and isinstance(part, str) and not _is_label(part):
            path.append(to_camel(part))  # a missing field: name it as the user would write it
            node = None
    return path


def _is_label(part: str) -> bool:
    return "[" in part or "(" in part or part.startswith("function-")


def from_validation_error(err: ValidationError, payload: Any, prefix: Sequence[str | int] = ()) -> SpecError:
    """The first pydantic error as a SpecError naming the field path in the user's JSON."""
    first = err.errors()[0]
    path = join_path([*prefix, *path_in_payload(payload, first["loc"])])
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):  # the field to change is the tag
        path += "." + str((first.get("ctx") or {}).get("discriminator", "type")).strip("'")
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "Sluice does not support this field (yet); remove it or see the README's spec reference"
    elif message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    return SpecError(path, message)
