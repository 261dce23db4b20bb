"""Instants as Druid writes them: ISO-8601, UTC, milliseconds, `Z`; and as Druid keeps them, epoch millis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


def to_millis(value: datetime) -> int:
    """Whole epoch milliseconds (floored, as Joda-Time keeps them); a datetime without a zone is UTC, as DuckDB
    and Spark return them."""
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    delta = aware - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def to_datetime(millis: int) -> datetime:
    """Epoch milliseconds as a UTC datetime."""
    return EPOCH + timedelta(milliseconds=millis)
