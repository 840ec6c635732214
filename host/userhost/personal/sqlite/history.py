"""The history of the bundled store: reading the visible messages of a session page by page, searching them,
and the recent window an agent's context starts from (spec/schema/userhost/personal.schema.json).

Search uses the trigram index of the main conversation's visible text, newest row first, within the row
range its cursor and time bounds allow; the few newest rows the index does not hold yet (`search_index`) are
scanned, and so is the whole range for a query too short for trigrams.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from wuu.generated.models import HistoryMessage, ReactionActor

from ..provider import ContextMessage
from . import reactions, sessions
from .admission import attachment_metadata
from .messages import MESSAGE_COLUMNS
from .projection import VISIBLE
from .search_index import indexed_through

SHORT_QUERY = 3
"""Queries shorter than this (in characters) cannot use the trigram index and scan the history instead."""


def page(
    connection: sqlite3.Connection, main: str, session_id: str, before_seq: int | None, limit: int
) -> list[HistoryMessage]:
    """Up to `limit` visible messages older than `before_seq`, newest first."""
    sessions.require(connection, session_id, main)
    rows = connection.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s USING (session_id) "
        f"WHERE m.session_id = ? AND m.seq < ? AND {VISIBLE} ORDER BY m.seq DESC LIMIT ?",
        (session_id, before_seq or 2**63 - 1, limit),
    ).fetchall()
    return _history_messages(connection, session_id, rows)


def search(
    connection: sqlite3.Connection,
    main: str,
    session_id: str,
    query: str,
    time_min_us: int | None,
    time_max_us: int | None,
    before_seq: int | None,
    limit: int,
) -> list[HistoryMessage]:
    """Up to `limit` visible messages containing `query` (case-insensitively) older than `before_seq`, newest
    first; with a time bound, only messages with a known timestamp inside the bounds."""
    sessions.require(connection, session_id, main)
    low, high = _id_range(connection, session_id, time_min_us, time_max_us, before_seq)
    if low > high:
        return []
    bounds, bound_values = "", []
    if time_min_us is not None or time_max_us is not None:
        bounds = " AND m.created_us IS NOT NULL AND m.created_us >= ? AND m.created_us < ?"
        bound_values = [time_min_us or -(2**63), time_max_us or 2**63 - 1]
    # The index holds the rows up to its mark; the rows past it, the newest, are scanned and come first. A
    # query too short for trigrams scans the whole range.
    short = len(query.casefold()) < SHORT_QUERY or "\x00" in query  # FTS5 query strings end at a NUL
    mark = low - 1 if short else indexed_through(connection)
    rows: list[Any] = []
    if high > mark:
        sql = (
            f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s USING (session_id) "
            # `+`: walk the rows by id, newest first, and stop at the page's end (the session's index would
            # fetch every row of the session and sort them).
            f"WHERE +m.session_id = ? AND m.id BETWEEN ? AND ? AND {VISIBLE}{bounds} "
            "AND wuu_contains(m.text, ?) ORDER BY m.id DESC LIMIT ?"
        )
        arguments = [session_id, max(low, mark + 1), high, *bound_values, query, limit]
        rows = connection.execute(sql, arguments).fetchall()
    if len(rows) < limit and low <= mark:
        phrase = '"' + query.casefold().replace('"', '""') + '"'
        sql = (
            f"SELECT {MESSAGE_COLUMNS} FROM messages_fts f JOIN messages m ON m.id = f.rowid "
            "JOIN sessions s USING (session_id) WHERE messages_fts MATCH ? AND m.session_id = ? "
            f"AND f.rowid BETWEEN ? AND ?{bounds} ORDER BY f.rowid DESC LIMIT ?"
        )
        arguments = [phrase, session_id, low, min(high, mark), *bound_values, limit - len(rows)]
        rows += connection.execute(sql, arguments).fetchall()
    return _history_messages(connection, session_id, rows)


def context(connection: sqlite3.Connection, session_id: str, limit: int) -> list[ContextMessage]:
    """The newest `limit` visible messages, oldest first, with the client input ID of each admitted input."""
    rows = connection.execute(
        "SELECT m.seq, m.role, m.text, r.client_input_id FROM messages m LEFT JOIN input_receipts r "
        f"ON r.session_id = m.session_id AND r.history_seq = m.seq WHERE m.session_id = ? AND {VISIBLE} "
        "ORDER BY m.seq DESC LIMIT ?",
        (session_id, limit),
    ).fetchall()
    return list(map(ContextMessage._make, reversed(rows)))


def prepare(connection: sqlite3.Connection) -> None:
    """`wuu_contains(text, needle)`: Unicode case-insensitive substring, for queries too short for the index."""
    connection.create_function("wuu_contains", 2, _contains, deterministic=True)


def _contains(text: str | None, needle: str | None) -> bool:
    return text is not None and needle is not None and needle.casefold() in text.casefold()


def _history_messages(
    connection: sqlite3.Connection, session_id: str, rows: Sequence[Sequence[Any]]
) -> list[HistoryMessage]:
    messages = []
    for row in rows:
        _, seq, role, _, _, _, _, _, text, created_at, question_id, _, approval_id = row
        attachments = connection.execute(
            "SELECT attachment_id, filename, media_type, size, sha256 FROM attachments "
            "WHERE session_id = ? AND message_seq = ? ORDER BY position",
            (session_id, seq),
        ).fetchall()
        message: dict[str, Any] = {
            "message_seq": seq,
            "role": role,
            "text": text,
            "created_at": created_at,
            "reaction_eligible": reactions.eligible(row, ReactionActor.OWNER),
            "reactions": reactions.state(connection, session_id, seq).to_wire(),
            "attachments": [attachment_metadata(attachment).to_wire() for attachment in attachments],
        }
        if question_id is not None:
            message["question_id"] = question_id
        if approval_id is not None:
            message["approval_id"] = approval_id
        messages.append(HistoryMessage.model_validate(message))
    return messages


def _id_range(
    connection: sqlite3.Connection,
    session_id: str,
    time_min_us: int | None,
    time_max_us: int | None,
    before_seq: int | None,
) -> tuple[int, int]:
    """The row ids a search can match: below the page's cursor, and (timestamps growing with row ids
    within a session) between the first message at or after `time_min` and the last one before `time_max`."""
    low, high = 0, 2**63 - 1
    if before_seq is not None:
        row = connection.execute(
            "SELECT id FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1",
            (session_id, before_seq),
        ).fetchone()
        if row is None:
            return 1, 0
        high = row[0]
    if time_min_us is not None:
        row = connection.execute(
            "SELECT id FROM messages WHERE session_id = ? AND created_us >= ? ORDER BY created_us, id LIMIT 1",
            (session_id, time_min_us),
        ).fetchone()
        if row is None:
            return 1, 0
        low = max(low, row[0])
    if time_max_us is not None:
        row = connection.execute(
            "SELECT id FROM messages WHERE session_id = ? AND created_us < ? "
            "ORDER BY created_us DESC, id DESC LIMIT 1",
            (session_id, time_max_us),
        ).fetchone()
        if row is None:
            return 1, 0
        high = min(high, row[0])
    return low, high
