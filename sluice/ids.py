"""Names that become paths: task ids and dataSource names, checked as Druid's `IdUtils.validateId` checks them.

A task id names its directory under the work dir and a dataSource names the first folder of its segments in deep
storage, so an id like `../../tmp/x` would write outside both. Druid's rules refuse that (no `/`, no leading `.`),
and also whitespace other than a space and the control and surrogate characters ZooKeeper cannot hold; Sluice adds
the length of its metadata columns. `path_under` is the second line of defence where such a name meets a root.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

#: the metadata store's id and dataSource columns are VARCHAR(255)
MAX_ID_BYTES = 255

_WHITESPACE_BUT_SPACE = re.compile(r"[^\S ]")
#: Druid's ranges (its check's bounds are exclusive): control characters, surrogates and private use; and what Java
#: sees as surrogate pairs, characters outside the basic multilingual plane. NUL too, which Druid's check lets pass
#: and a file name cannot hold.
_ILLEGAL = re.compile("[\x00-\x1e\x80-\x9e\ud801-\uf8fe\ufff1-\ufffe\U00010000-\U0010ffff]")


def validate_id(thing: str, value: object) -> str:
    """`value` if it is a valid `thing` ("task ID", "dataSource"); else ValueError with Druid's message."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{thing} cannot be null or empty. Please provide a {thing}.")
    if value.startswith("."):
        raise ValueError(f"{thing} cannot start with the '.' character.")
    if "/" in value:
        raise ValueError(f"{thing} cannot contain the '/' character.")
    if _WHITESPACE_BUT_SPACE.search(value):
        raise ValueError(f"{thing} cannot contain whitespace character except space.")
    if match := _ILLEGAL.search(value):
        raise ValueError(f"{thing} cannot contain character #{ord(match.group())} (at position {match.start()}).")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        raise ValueError(f"{thing} cannot be longer than {MAX_ID_BYTES} bytes.")
    return value


def path_under(root: Path, *parts: str) -> Path:
    """`root / parts`, refused (ValueError) unless it resolves to a path inside `root`."""
    base, path = root.resolve(), root.joinpath(*parts).resolve()
    if path == base or not path.is_relative_to(base):
        raise ValueError(f"{'/'.join(parts)!r} is not a name inside {root}")
    return path


def checked(thing: str) -> AfterValidator:
    """A pydantic field's check by `validate_id`: `Annotated[str, checked("dataSource")]`."""
    return AfterValidator(partial(validate_id, thing))


#: a spec's dataSource field, checked as Druid's DataSchema checks it
DataSourceName = Annotated[str, checked("dataSource")]
