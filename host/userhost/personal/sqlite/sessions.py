"""The space and its sessions in the bundled store: the space record a store is created with, and the check
that a session exists. Each function runs on a connection of the database (the writer's or the reader's)."""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from ..refusals import MainSessionMissing, SessionNotFound
from ..stamps import rfc3339


class StoreError(Exception):
    """The store cannot serve this user space (it belongs to another, or it is damaged)."""


def new_id(prefix: str) -> str:
    """A fresh ID under `prefix`: the clock in milliseconds (48 bits, which last until the year 10889), then
    48 random bits: 24 hex digits. IDs made later sort later, so a table or index keyed by them grows at its
    end: a write dirties the pages the previous ones did, not a page anywhere in the tree, and each page a
    commit writes costs it time."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(6).hex()}"


def create_or_check_space(
    connection: sqlite3.Connection, path: Path, user_space_id: str, product_domain: str, now: datetime
) -> None:
    """Record the space with its main conversation in a new store; StoreError when the store at `path`
    belongs to another space or domain."""
    row = connection.execute("SELECT user_space_id, product_domain FROM space").fetchone()
    if row is None:
        main = new_id("ses_main")
        created = rfc3339(now)
        connection.execute(
            "INSERT INTO space VALUES (1, ?, ?, ?, ?)", (user_space_id, product_domain, main, created)
        )
        connection.execute("INSERT INTO sessions VALUES (?, 'main', ?)", (main, created))
    elif tuple(row) != (user_space_id, product_domain):
        raise StoreError(
            f"{path} belongs to user space {row[0]!r}, domain {row[1]!r}, not {user_space_id!r}, {product_domain!r}"
        )


def main_session_id(connection: sqlite3.Connection) -> str:
    """The ID the space recorded for its main conversation."""
    (main,) = connection.execute("SELECT main_session_id FROM space").fetchone()
    return str(main)


def exists(connection: sqlite3.Connection, session_id: str) -> bool:
    """Whether the session is in the store."""
    return (
        connection.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        is not None
    )


def require(connection: sqlite3.Connection, session_id: str, main: str) -> None:
    """Refuse unless the session exists: MainSessionMissing for the main conversation `main` (never
    recreated), SessionNotFound for another."""
    if not exists(connection, session_id):
        if session_id == main:
            raise MainSessionMissing(
                f"the main conversation {main} is missing from the store; it is not recreated"
            )
        raise SessionNotFound(f"no session {session_id}")
