"""A task's or supervisor's `context` (Druid's ingestion/tasks.md "Context parameters").

The keys Druid documents for every task are typed and checked here, with Druid's defaults; any other key (a
supervisor's metric `tags`, an extension's) is kept as given, since Druid passes context through unread too.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictInt

from sluice.spec.model import SpecModel
from sluice.spec.tuning import defaults_only

#: Druid's taskLockTimeout default: how long a task waits for a lock another task holds
LOCK_TIMEOUT_MS = 300_000


def _text_int(value: Any) -> Any:
    """Druid reads a context number from a JSON number or its text (QueryContexts.getAsInt): "50" is 50."""
    return int(value) if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value) else value


def _text_bool(value: Any) -> Any:
    """Druid reads a context boolean from a JSON boolean or its text (QueryContexts.getAsBoolean)."""
    return value.strip().lower() == "true" if isinstance(value, str) and value.strip().lower() in ("true", "false") \
        else value


#: a context number or boolean as Druid reads one: the JSON value or its text, nothing else (not `true` for 1)
ContextInt = Annotated[StrictInt, BeforeValidator(_text_int)]
ContextBool = Annotated[StrictBool, BeforeValidator(_text_bool)]


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
