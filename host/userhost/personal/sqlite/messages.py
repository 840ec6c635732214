"""Messages of the bundled store's sessions: how one is saved and how timestamps are written."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp with microseconds, as the store writes them."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def micros(moment: datetime) -> int:
    """Microseconds since the epoch."""
    # Subtracting aware datetimes never overflows (converting one near year 1 or 9999 to UTC can).
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def append_message(
    connection: sqlite3.Connection,
    session_id: str,
    role: str,
    text: str,
    now: datetime,
    kind: str = "text",
    *,
    indexed: bool,
) -> int:
    """Save one message at the session's next sequence, its text indexed for search when `indexed` (the
    main conversation's visible messages); its sequence."""
    last = connection.execute(
        "SELECT seq, created_us, created_at FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    seq = 1 if last is None else last[0] + 1
    stamp, at = micros(now), rfc3339(now)
    if last is not None and last[1] is not None and last[1] > stamp:
        stamp, at = last[1], last[2]  # timestamps never run backwards within a session
    row_id = connection.execute(
        "INSERT INTO messages (session_id, seq, role, kind, text, created_at, created_us) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (session_id, seq, role, kind, text, at, stamp),
    ).lastrowid
    if indexed:
        connection.execute("INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", (row_id, text.casefold()))
    return seq
