"""Druid's coordinator data-management API (/druid/coordinator/v1/datasources/…): marking segments unused or used,
and the kill shortcut. Served by the overlord role, which holds the task queue."""

from __future__ import annotations

from fastapi import APIRouter

from sluice.metadata.store import MetadataStore
from sluice.overlord.task_queue import TaskQueue


def coordinator_router(metadata: MetadataStore, queue: TaskQueue) -> APIRouter:
    return APIRouter(prefix="/druid/coordinator/v1")
