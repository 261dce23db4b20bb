"""ISO-8601 periods as Druid writes them in specs (`PT1H`, `PT3600S`, `P1D`)."""

from __future__ import annotations

import re
from datetime import timedelta

_PERIOD = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_period(text: str) -> timedelta:
    """A fixed-length period; months and years have no fixed length and are rejected here."""
    match = _PERIOD.match(text.strip().upper()) if isinstance(text, str) else None
    if not match or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"expected an ISO-8601 period such as PT1H or PT10M, got {text!r}")
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return timedelta(**parts)


def format_period(value: timedelta) -> str:
    """Druid's serialized form: whole seconds, e.g. `PT3600S`."""
    seconds = value.total_seconds()
    return f"PT{int(seconds)}S" if seconds == int(seconds) else f"PT{seconds}S"
