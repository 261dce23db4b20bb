"""What a task needs from the process it runs in (Druid's TaskToolbox)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sluice.emitter import NoopEmitter, ServiceEmitter
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage
from sluice.spec.supervisor import KafkaIOConfig
from sluice.stream.kafka import KafkaStream
from sluice.task.actions import TaskActionClient


@dataclass
class TaskToolbox:
    """What a task needs from the process it runs in (Druid's TaskToolbox)."""

    spark: Any
    metadata: MetadataStore
    deep_storage: DeepStorage
    task_dir: Path
    stream_factory: Callable[[KafkaIOConfig], KafkaStream]
    #: how the task reaches the overlord: locks, segment ids, publishing, checkpoints (it reads the metadata
    #: store, for its committed offsets and segments, but writes it only through these)
    actions: TaskActionClient
    emitter: ServiceEmitter = field(default_factory=lambda: ServiceEmitter("druid/peon", "localhost", NoopEmitter()))
    poll_interval: float = 0.5
