"""What a broker knows of the tasks that hold unpublished rows, and all it knows: each running task lists, per
unpublished sequence, the persist files it has written (`RealtimeView`), on its chat API at
`{CHAT_PREFIX}/{task id}/realtime`. Tasks and the broker meet here, not in each other's modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Druid's chat handler path of a task (the peon's control API)
CHAT_PREFIX = "/druid/worker/v1/chat"


@dataclass(frozen=True)
class RealtimeView:
    """What a running streaming task has persisted of one unpublished sequence, and from where that sequence reads:
    what the broker needs to query the rows before they are published (see sluice/broker/realtime.py). A task has
    one per unpublished sequence, since its sequences are committed one by one."""

    data_source: str
    #: replicas share it (`<baseSequenceName>_<sequenceId>`), so it names one range of one task group
    sequence_name: str
    start_offsets: dict[int, int]
    #: records of the sequence read so far, to pick the replica that read furthest into it
    progress: int
    files: tuple[str, ...]
    #: string dimensions whose files hold a multi-value as its JSON array text (a persist's rows are typed before it
    #: knows which dimensions hold several values; the merge at publish makes them lists): the broker reads them so
    multi_values: tuple[str, ...] = ()
    #: the peon that serves it (`host:port`, as sys.servers names it), set by a broker that asked the peon over HTTP;
    #: None for a task of the broker's own node
    server: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"dataSource": self.data_source, "sequenceName": self.sequence_name,
                "startOffsets": {str(p): o for p, o in self.start_offsets.items()}, "progress": self.progress,
                "files": list(self.files), "multiValues": list(self.multi_values)}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> RealtimeView:
        return cls(payload["dataSource"], payload["sequenceName"],
                   {int(p): int(o) for p, o in payload["startOffsets"].items()}, int(payload["progress"]),
                   tuple(payload["files"]), tuple(payload.get("multiValues", ())))
