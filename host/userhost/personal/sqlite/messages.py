"""Messages of the bundled store's sessions: how one is saved and read, and how timestamps are written.

Messages are saved in order: within a session both the history sequence and the row id grow with each
message, and so do timestamps (a clock that steps back saves the previous message's time), which is what lets
search walk its index newest first and turn time bounds into a row range.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..stamps import micros, rfc3339
from . import search_index

MESSAGE_COLUMNS = (
    "m.id, m.seq, m.role, m.kind, m.hidden, m.truncated, m.read_only, m.background, m.text, m.created_at, "
    "m.question_id, s.kind, m.approval_id"
)
"""The columns of a message row (`m`, joined with its session `s`) as `message` and the history read them."""


def message(connection: sqlite3.Connection, session_id: str, seq: int) -> Sequence[Any] | None:
    """The session's message `seq` as a row of MESSAGE_COLUMNS, or None."""
    row: Sequence[Any] | None = connection.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s USING (session_id) "
        "WHERE m.session_id = ? AND m.seq = ?",
        (session_id, seq),
    ).fetchone()
    return row


def append_message(
    connection: sqlite3.Connection, session_id: str, role: str, text: str, now: datetime, kind: str = "text"
) -> int:
    """Save one message at the session's next sequence (search indexes it with the batch it completes or a
    later one, `search_index`); its sequence."""
    return append_at(connection, session_id, role, kind, text, rfc3339(now), micros(now))


def append_at(
    connection: sqlite3.Connection, session_id: str, role: str, kind: str, text: str, at: str, stamp: int
) -> int:
    """`append_message` of a moment given both ways (`at` is `stamp` in RFC 3339), for a writer that
    records the same moment elsewhere."""
    # One statement: the session's last message gives the sequence and the time floor as the row is
    # inserted (a writer's statements each hand the interpreter lock back and forth with the event loop).
    row_id, seq = connection.execute(
        "INSERT INTO messages (session_id, seq, role, kind, text, created_at, created_us) "
        "SELECT ?1, coalesce(last.seq, 0) + 1, ?2, ?3, ?4, "
        "CASE WHEN last.created_us > ?6 THEN last.created_at ELSE ?5 END, "
        "CASE WHEN last.created_us > ?6 THEN last.created_us ELSE ?6 END "
        "FROM (SELECT 1) LEFT JOIN (SELECT seq, created_us, created_at FROM messages WHERE session_id = ?1 "
        "ORDER BY seq DESC LIMIT 1) AS last RETURNING id, seq",
        (session_id, role, kind, text, at, stamp),
    ).fetchone()
    search_index.appended(connection, row_id)
    return int(seq)
