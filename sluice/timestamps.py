"""Instants as Druid writes them: ISO-8601, UTC, milliseconds, `Z`."""

from __future__ import annotations

from datetime import datetime, timezone


def parse_timestamp(text: str) -> datetime:
    """Parse an ISO-8601 instant; a value without offset is UTC, as Druid's default time zone."""
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def format_timestamp(value: datetime) -> str:
    """Format an instant as Joda prints it in Druid: UTC, milliseconds, ``Z`` suffix.

    Lexicographic order of these strings is chronological order, which is why the metadata
    tables can compare ``start``/``end`` columns as strings (Druid does the same).
    """
    return value.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
