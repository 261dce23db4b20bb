"""Druid's SQL-based ingestion API: POST /druid/v2/sql/task runs an INSERT or REPLACE statement as a task."""

from __future__ import annotations

from fastapi import APIRouter

from sluice.overlord.task_queue import TaskQueue


def sql_task_router(queue: TaskQueue) -> APIRouter:
    return APIRouter()
