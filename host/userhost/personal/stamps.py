"""How the Personal store and its services write moments: RFC 3339 in UTC with microseconds, and
microseconds since the epoch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp with microseconds, as the store writes them (`2026-03-01T12:00:00.000000Z`)."""
    # isoformat, not strftime: a third of the time, on every write of the store, and a four-digit year always.
    return moment.astimezone(UTC).isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


def micros(moment: datetime) -> int:
    """Microseconds since the epoch."""
    # Subtracting aware datetimes never overflows (converting one near year 1 or 9999 to UTC can).
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
