"""A task's or supervisor's `context` (Druid's ingestion/tasks.md "Context parameters").

The keys Druid documents for every task are typed and checked here, with Druid's defaults; any other key (a
supervisor's metric `tags`, an extension's) is kept as given, since Druid passes context through unread too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt

from sluice.spec.model import SpecModel
from sluice.spec.tuning import defaults_only

#: Druid's taskLockTimeout default: how long a task waits for a lock another task holds
LOCK_TIMEOUT_MS = 300_000


class TaskContext(SpecModel):
    model_config = ConfigDict(extra="allow")

    #: the task's lock priority; None: its type's default (Druid's: 75 realtime, 50 batch, 25 compaction, 0 other)
    priority: StrictInt | None = None
    task_lock_timeout: StrictInt = Field(LOCK_TIMEOUT_MS, ge=0)
    force_time_chunk_lock: StrictBool = True
    #: accepted: Sluice's segment allocation always follows the lineage of the partitions it extends
    use_lineage_based_segment_allocation: StrictBool = True
    store_empty_columns: StrictBool = True
    use_concurrent_locks: StrictBool = False
    task_lock_type: Literal["EXCLUSIVE", "SHARED", "REPLACE", "APPEND"] | None = None
    use_shared_lock: StrictBool = False
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
