"""A task's or supervisor's `context` (Druid's ingestion/tasks.md "Context parameters").

The keys Druid documents for every task are typed and checked here, with Druid's defaults; any other key (a
supervisor's metric `tags`, an extension's) is kept as given, since Druid passes context through unread too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictInt

from sluice.spec.model import SpecModel
from sluice.spec.tuning import defaults_only

T = TypeVar("T")

#: Druid's taskLockTimeout default: how long a task waits for a lock another task holds
LOCK_TIMEOUT_MS = 300_000


def as_int(value: Any) -> int:
    """A context number as Druid's QueryContexts.getAsInt reads it: a JSON number (its whole part) or the text of a
    whole number ("50"); ValueError otherwise (a boolean is not a number)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    raise ValueError(f"must be a number, got {value!r}")


def as_bool(value: Any) -> bool:
    """A context boolean as Druid's QueryContexts.getAsBoolean reads it: a JSON boolean or its text ("true");
    ValueError otherwise (1 is not true)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"must be a boolean, got {value!r}")


def context_value(context: Mapping[str, Any] | None, key: str, default: T, read: Callable[[Any], T]) -> T:
    """`key` of a query or task context read by `read` (as_int, as_bool), `default` when absent or null; ValueError
    with Druid's message naming the parameter otherwise."""
    value = (context or {}).get(key)
    if value is None:
        return default
    try:
        return read(value)
    except ValueError as e:
        raise ValueError(f"Query context parameter [{key}] {e}") from None


def _lenient(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """For a pydantic field: the value `read` makes of it, or the value unchanged for the field's own error."""
    def parse(value: Any) -> Any:
        try:
            return read(value)
        except ValueError:
            return value
    return parse


#: a context number or boolean as Druid reads one: the JSON value or its text, nothing else (not `true` for 1)
ContextInt = Annotated[StrictInt, BeforeValidator(_lenient(as_int))]
ContextBool = Annotated[StrictBool, BeforeValidator(_lenient(as_bool))]


class TaskContext(SpecModel):
    model_config = ConfigDict(extra="allow")

    #: the task's lock priority; None: its type's default (Druid's: 75 realtime, 50 batch, 25 compaction, 0 other)
    priority: ContextInt | None = None
    task_lock_timeout: ContextInt = Field(LOCK_TIMEOUT_MS, ge=0)
    force_time_chunk_lock: ContextBool = True
    #: accepted: Sluice's segment allocation always follows the lineage of the partitions it extends
    use_lineage_based_segment_allocation: ContextBool = True
    store_empty_columns: ContextBool = True
    use_concurrent_locks: ContextBool = False
    task_lock_type: Literal["EXCLUSIVE", "SHARED", "REPLACE", "APPEND"] | None = None
    use_shared_lock: ContextBool = False
    #: SQL's REPLACE: `all` (OVERWRITE ALL) or the intervals it overwrites
    sql_replace_time_chunks: str | None = None

    _defaults = defaults_only({
        "force_time_chunk_lock": (True, "Sluice locks whole time chunks; Druid's segment locks are not supported"),
        "store_empty_columns": (True, "every dimension of dimensionsSpec is a column of the segments, empty or not"),
    })

    def to_json(self) -> dict[str, Any]:
        """The context as it was given (Druid's defaults are not written into a stored task)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def extra(self, key: str) -> Any:
        """A key Druid does not document for every task, as given (None when absent)."""
        return (self.model_extra or {}).get(key)
