"""The roles a Sluice process can run (kept apart from node.py so the CLI can name them cheaply)."""

from __future__ import annotations

from enum import Enum

from sluice.discovery import BROKER, OVERLORD, WORKER


class Role(str, Enum):
    ALL_IN_ONE = "all-in-one"
    OVERLORD = OVERLORD
    WORKER = WORKER
    BROKER = BROKER
