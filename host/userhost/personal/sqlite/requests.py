"""The business request IDs of approval and rule writes in the bundled store: a retry of a saved write (the same
request ID, method and params) is recognised and answered with its target's current state instead of being
applied twice; the same request ID with anything else is a RequestIdConflict."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from ..refusals import RequestIdConflict
from ..stamps import rfc3339


def _digest(method: str, params: Mapping[str, Any]) -> str:
    encoded = orjson.dumps({"method": method, "params": params}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(encoded).hexdigest()


def replayed(
    connection: sqlite3.Connection, request_id: str, method: str, params: Mapping[str, Any]
) -> str | None:
    """The target (a card or rule ID) of the saved write this request retries, or None when the request ID is
    new. RequestIdConflict when the request ID was used for another write."""
    row = connection.execute(
        "SELECT params_digest, target FROM approval_requests WHERE request_id = ?", (request_id,)
    ).fetchone()
    if row is None:
        return None
    if row[0] != _digest(method, params):
        raise RequestIdConflict(f"request {request_id} was used for another write")
    target: str = row[1]
    return target


def save(
    connection: sqlite3.Connection,
    request_id: str,
    method: str,
    params: Mapping[str, Any],
    target: str,
    now: datetime,
) -> None:
    """Record a write's request ID, in the transaction of the write itself."""
    connection.execute(
        "INSERT INTO approval_requests (request_id, method, params_digest, target, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (request_id, method, _digest(method, params), target, rfc3339(now)),
    )
