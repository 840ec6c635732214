"""What one step of the main agent reads from the bundled store: its window, in one read transaction."""

from __future__ import annotations

import sqlite3

from ..provider import StepWindow
from . import admission, history, reactions, sessions


def window(
    connection: sqlite3.Connection, main: str, session_id: str, waiting: int, recent: int, changes: int
) -> StepWindow | None:
    """The session's step window from one snapshot (pending inputs, recent messages, reaction changes), or
    None when no input waits (then nothing else is read)."""
    connection.execute("BEGIN")
    try:
        sessions.require(connection, session_id, main)
        pending = admission.pending_inputs(connection, session_id, waiting)
        if not pending:
            return None
        found, mark = reactions.changes(connection, session_id, changes)
        return StepWindow(pending, history.context(connection, session_id, recent), found, mark)
    finally:
        connection.execute("COMMIT")
