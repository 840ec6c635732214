"""The writes of the send floors (`send_floor.py`), in a module of their own: the store's writer process is
sent each write by reference, and a script's own functions belong to `__main__`, which the writer cannot
import."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from wuu.host.userhost.personal.provider import Submission
from wuu.host.userhost.personal.sqlite import admission

BODY = "x" * 200


def row(connection: sqlite3.Connection, number: int) -> dict[str, Any]:
    """The raw baseline's write: one 200-byte row."""
    connection.execute("INSERT INTO receipts VALUES (?, ?)", (f"r{number}", BODY))
    return {"receipt": number}


def admit(connection: sqlite3.Connection, main: str, submission: Submission, now: datetime) -> dict[str, Any]:
    """The store's own admission of `submission`, answered as the host's result is."""
    admitted = admission.admit(connection, main, submission, now)
    return {"receipt": admitted.receipt.to_wire(), "replayed": admitted.replayed}
