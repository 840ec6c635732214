"""Memories in the bundled store (spec/schema/userhost/memory.schema.json): a memory's row and one row per
version, each version with its own attribution.

A correction adds a version and never changes an earlier one. Forgetting sets every version's text to NULL in
the same transaction that marks the memory forgotten; with the store's `secure_delete`, the bytes the texts
occupied are zeroed in the file, and the ledger then checkpoints the write-ahead log (the store's next open
does, when a crash came between).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from wuu.generated.models import MemoryRecord

from ..memory_ledger import Attribution, MemoryForgotten, MemoryNotFound
from ..stamps import rfc3339


def _status(connection: sqlite3.Connection, memory_id: str) -> str:
    row = connection.execute("SELECT status FROM memories WHERE memory_id = ?", (memory_id,)).fetchone()
    if row is None:
        raise MemoryNotFound(f"no memory {memory_id}")
    return str(row[0])


def _active(connection: sqlite3.Connection, memory_id: str) -> None:
    if _status(connection, memory_id) == "forgotten":
        raise MemoryForgotten(f"{memory_id} is forgotten")


def _next_touch(connection: sqlite3.Connection) -> int:
    return int(connection.execute("SELECT coalesce(max(touched), 0) + 1 FROM memories").fetchone()[0])


def _add_version(
    connection: sqlite3.Connection,
    memory_id: str,
    version: int,
    text: str,
    attribution: Attribution,
    now: datetime,
) -> None:
    connection.execute(
        "INSERT INTO memory_versions (memory_id, version, text, author, session_id, task_id, message_seq, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            memory_id,
            version,
            text,
            attribution.by.value,
            attribution.session_id,
            attribution.task_id,
            attribution.message_seq,
            rfc3339(now),
        ),
    )


def save(
    connection: sqlite3.Connection, memory_id: str, text: str, attribution: Attribution, now: datetime
) -> MemoryRecord:
    """Save a new memory at version 1."""
    connection.execute(
        "INSERT INTO memories (memory_id, status, version, touched) VALUES (?, 'active', 1, ?)",
        (memory_id, _next_touch(connection)),
    )
    _add_version(connection, memory_id, 1, text, attribution, now)
    return record(connection, memory_id)


def correct(
    connection: sqlite3.Connection, memory_id: str, text: str, attribution: Attribution, now: datetime
) -> MemoryRecord:
    """Add the next version to an active memory. MemoryNotFound, MemoryForgotten."""
    _active(connection, memory_id)
    connection.execute(
        "UPDATE memories SET version = version + 1, touched = ? WHERE memory_id = ?",
        (_next_touch(connection), memory_id),
    )
    version = int(
        connection.execute("SELECT version FROM memories WHERE memory_id = ?", (memory_id,)).fetchone()[0]
    )
    _add_version(connection, memory_id, version, text, attribution, now)
    return record(connection, memory_id)


def forget(connection: sqlite3.Connection, memory_id: str, now: datetime) -> MemoryRecord:
    """Forget an active memory: the texts of all its versions become NULL. MemoryNotFound, MemoryForgotten."""
    _active(connection, memory_id)
    connection.execute("UPDATE memory_versions SET text = NULL WHERE memory_id = ?", (memory_id,))
    connection.execute(
        "UPDATE memories SET status = 'forgotten', forgotten_at = ? WHERE memory_id = ?",
        (rfc3339(now), memory_id),
    )
    return record(connection, memory_id)


def query(connection: sqlite3.Connection, needle: str, limit: int) -> list[MemoryRecord]:
    """The active memories whose current text contains `needle` (Unicode case folding; every one for an empty
    needle), the most recently changed first, at most `limit`."""
    rows = connection.execute(
        "SELECT m.memory_id FROM memories m JOIN memory_versions v "
        "ON v.memory_id = m.memory_id AND v.version = m.version "
        "WHERE m.status = 'active' AND wuu_contains(v.text, ?) ORDER BY m.touched DESC LIMIT ?",
        (needle, limit),
    ).fetchall()
    return [record(connection, row[0]) for row in rows]


def record(connection: sqlite3.Connection, memory_id: str) -> MemoryRecord:
    """One memory with its versions, oldest first. MemoryNotFound."""
    row = connection.execute(
        "SELECT status, version, forgotten_at FROM memories WHERE memory_id = ?", (memory_id,)
    ).fetchone()
    if row is None:
        raise MemoryNotFound(f"no memory {memory_id}")
    status, current, forgotten_at = row
    versions = [
        _version(version)
        for version in connection.execute(
            "SELECT version, text, author, session_id, task_id, message_seq, created_at FROM memory_versions "
            "WHERE memory_id = ? ORDER BY version",
            (memory_id,),
        )
    ]
    wire: dict[str, Any] = {
        "memory_id": memory_id,
        "status": status,
        "version": current,
        "versions": versions,
    }
    if status == "active":
        wire["text"] = versions[-1]["text"]
    else:
        wire["forgotten_at"] = forgotten_at
    return MemoryRecord.model_validate(wire)


def _version(row: Sequence[Any]) -> dict[str, Any]:
    version, text, author, session_id, task_id, message_seq, created_at = row
    attribution: dict[str, Any] = {"by": author, "session_id": session_id, "message_seq": message_seq}
    if task_id is not None:
        attribution["task_id"] = task_id
    wire: dict[str, Any] = {"version": version, "attribution": attribution, "created_at": created_at}
    if text is not None:
        wire["text"] = text
    return wire
