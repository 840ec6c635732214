"""Approval cards in the bundled store (spec/schema/userhost/approvals.schema.json): a card, its anchor in the
main conversation, the decision, the execution claim and the receipt, each written before anything acts on it.

A card moves forward only: `waiting` -> `approved` | `denied` | `expired` | `cancelled`; `approved` -> `running`
(the execution claim) | `stale` | `cancelled`; `running` -> `succeeded` | `failed` | `unknown`. Every
move adds one to its revision. A claim still `running` when the store opens is `unknown`: its outcome is not
known, and it is never run again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from wuu.generated.models import ApprovalCard, ApprovalStatus

from ..approval_ledger import NewCard, StoredCard
from ..refusals import CardNotFound, RequestIdConflict, StaleRevision
from ..stamps import rfc3339
from . import requests, sessions
from .messages import append_message

CARD_COLUMNS = (
    "card_id, session_id, message_seq, source, task_id, action, digest, preview, summary, status, revision, "
    "created_at, expires_at, decision, review, receipt"
)
MOVES: Mapping[str, frozenset[str]] = {
    "waiting": frozenset({"approved", "denied", "expired", "cancelled"}),
    "approved": frozenset({"running", "stale", "cancelled", "unauthorized"}),
    "running": frozenset({"succeeded", "failed", "unknown"}),
}
"""The statuses each status can move to; the others are final."""


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _card(row: Sequence[Any]) -> ApprovalCard:
    (card_id, session_id, seq, source, task_id, action, digest, preview, summary, status, revision, created_at,
     expires_at, decision, review, receipt) = row  # fmt: skip
    wire: dict[str, Any] = {
        "card_id": card_id,
        "session_id": session_id,
        "message_seq": seq,
        "source": source,
        "action": orjson.loads(action),
        "digest": digest,
        "revision": revision,
        "status": status,
        "summary": summary,
        "preview": orjson.loads(preview),
        "created_at": created_at,
        "expires_at": expires_at,
    }
    if task_id is not None:
        wire["task_id"] = task_id
    for key, value in (("decision", decision), ("review", review), ("receipt", receipt)):
        if value is not None:
            wire[key] = orjson.loads(value)
    return ApprovalCard.model_validate(wire)


def _row(connection: sqlite3.Connection, card_id: str) -> Sequence[Any]:
    row: Sequence[Any] | None = connection.execute(
        f"SELECT {CARD_COLUMNS} FROM approval_cards WHERE card_id = ?", (card_id,)
    ).fetchone()
    if row is None:
        raise CardNotFound(f"no card {card_id}")
    return row


def card(connection: sqlite3.Connection, card_id: str) -> StoredCard:
    """The card with its precondition and request. CardNotFound."""
    row = _row(connection, card_id)
    extra = connection.execute(
        "SELECT precondition, request_text FROM approval_cards WHERE card_id = ?", (card_id,)
    ).fetchone()
    return StoredCard(_card(row), orjson.loads(extra[0]), extra[1])


def by_call(
    connection: sqlite3.Connection, session_id: str, call_id: str, action: Mapping[str, Any]
) -> StoredCard | None:
    """The card a tool call already made, or None. RequestIdConflict when the call made another action."""
    found = connection.execute(
        "SELECT card_id, action FROM approval_cards WHERE session_id = ? AND call_id = ?",
        (session_id, call_id),
    ).fetchone()
    if found is None:
        return None
    if found[1] != _json(action):
        raise RequestIdConflict(f"tool call {call_id} was already made with another action")
    return card(connection, found[0])


def create(
    connection: sqlite3.Connection, main: str, card_id: str, new: NewCard, now: datetime
) -> tuple[StoredCard, bool]:
    """Save a waiting card and its anchor message in the main conversation; with the card, whether the same
    tool call had already saved it (`by_call`)."""
    sessions.require(connection, new.session_id, main)
    found = by_call(connection, new.session_id, new.call_id, new.action)
    if found is not None:
        return found, True
    seq = append_message(connection, new.session_id, "assistant", new.summary, now)
    connection.execute(
        "UPDATE messages SET approval_id = ? WHERE session_id = ? AND seq = ?", (card_id, new.session_id, seq)
    )
    stamp = rfc3339(now)
    connection.execute(
        "INSERT INTO approval_cards (card_id, session_id, call_id, message_seq, source, task_id, action, digest, "
        "precondition, preview, summary, request_text, status, revision, created_at, expires_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'waiting', 1, ?, ?, ?)",
        (
            card_id,
            new.session_id,
            new.call_id,
            seq,
            new.source,
            new.task_id,
            _json(new.action),
            new.digest,
            orjson.dumps(new.precondition, option=orjson.OPT_SORT_KEYS).decode(),  # "null" when missing
            _json(new.preview),
            new.summary,
            new.request_text,
            stamp,
            None if new.expires_at is None else rfc3339(new.expires_at),
            stamp,
        ),
    )
    return card(connection, card_id), False


def listed(
    connection: sqlite3.Connection, main: str, session_id: str, card_ids: Sequence[str] | None, limit: int
) -> list[ApprovalCard]:
    """The named cards in order (CardNotFound for an unknown one), or without names the waiting cards, oldest
    first."""
    sessions.require(connection, session_id, main)
    if card_ids is None:
        rows = connection.execute(
            f"SELECT {CARD_COLUMNS} FROM approval_cards WHERE session_id = ? AND status = 'waiting' "
            "ORDER BY id LIMIT ?",
            (session_id, limit),
        ).fetchall()
        return [_card(row) for row in rows]
    cards = [_card(_row(connection, card_id)) for card_id in card_ids]
    for found in cards:
        if found.session_id != session_id:
            raise CardNotFound(f"no card {found.card_id} in session {session_id}")
    return cards


def in_status(connection: sqlite3.Connection, status: ApprovalStatus) -> list[str]:
    """The IDs of the cards in `status`, oldest first."""
    rows = connection.execute(
        "SELECT card_id FROM approval_cards WHERE status = ? ORDER BY id", (status.value,)
    ).fetchall()
    return [row[0] for row in rows]


def move(
    connection: sqlite3.Connection,
    card_id: str,
    to: ApprovalStatus,
    now: datetime,
    *,
    decision: Mapping[str, Any] | None = None,
    review: Mapping[str, Any] | None = None,
    receipt: Mapping[str, Any] | None = None,
    lease: Mapping[str, Any] | None = None,
) -> ApprovalCard | None:
    """Move the card to `to` (recording a decision, review, receipt or the execution claim's authorization
    lease with it) if its status allows it; the moved card, or None when it had already moved elsewhere (a
    decision, expiry or cancellation came first)."""
    status = connection.execute("SELECT status FROM approval_cards WHERE card_id = ?", (card_id,)).fetchone()
    if status is None:
        raise CardNotFound(f"no card {card_id}")
    if to.value not in MOVES.get(status[0], frozenset()):
        return None
    stamp = rfc3339(now)
    connection.execute(
        "UPDATE approval_cards SET status = ?, revision = revision + 1, updated_at = ?, "
        "decision = coalesce(?, decision), review = coalesce(?, review), receipt = coalesce(?, receipt), "
        "lease = coalesce(?, lease), claimed_at = CASE WHEN ? THEN ? ELSE claimed_at END WHERE card_id = ?",
        (
            to.value,
            stamp,
            _json(decision),
            _json(review),
            _json(receipt),
            _json(lease),
            to == ApprovalStatus.RUNNING,
            stamp,
            card_id,
        ),
    )
    return _card(_row(connection, card_id))


def record_review(
    connection: sqlite3.Connection, card_id: str, review: Mapping[str, Any], now: datetime
) -> None:
    """Save the automatic review's outcome on a card that stays waiting for its owner (its status and so its
    revision are unchanged)."""
    connection.execute(
        "UPDATE approval_cards SET review = ?, updated_at = ? WHERE card_id = ? AND status = 'waiting'",
        (_json(review), rfc3339(now), card_id),
    )


def decide(
    connection: sqlite3.Connection,
    main: str,
    session_id: str,
    card_id: str,
    digest: str,
    expected_revision: int,
    decision: Mapping[str, Any],
    request_id: str,
    now: datetime,
) -> tuple[ApprovalCard, bool]:
    """The owner's decision on a waiting card at the exact digest and revision; with the card, whether this
    was a retry of a saved decision (the card is returned as it is now). CardNotFound; StaleRevision when the
    digest or revision is not the card's current one, or it waits no longer; RequestIdConflict."""
    sessions.require(connection, session_id, main)
    params = {"card_id": card_id, "digest": digest, "expected_revision": expected_revision, **decision}
    if requests.replayed(connection, request_id, "approvals.decide", params):
        return _card(_row(connection, card_id)), True
    current = _card(_row(connection, card_id))
    if current.session_id != session_id:
        raise CardNotFound(f"no card {card_id} in session {session_id}")
    if current.digest != digest:
        raise StaleRevision(f"card {card_id} has digest {current.digest}, not {digest}")
    if current.revision != expected_revision or current.status != ApprovalStatus.WAITING:
        raise StaleRevision(
            f"card {card_id} is {current.status.value} at revision {current.revision}, "
            f"not waiting at revision {expected_revision}"
        )
    to = ApprovalStatus.APPROVED if decision["verdict"] == "allow" else ApprovalStatus.DENIED
    moved = move(connection, card_id, to, now, decision={**decision, "decided_at": rfc3339(now)})
    assert moved is not None
    if to == ApprovalStatus.DENIED:
        outcome_message(connection, moved, f"Not done, you denied it: {moved.summary}", now)
    requests.save(connection, request_id, "approvals.decide", params, card_id, now)
    return moved, False


def expire(connection: sqlite3.Connection, now: datetime) -> list[ApprovalCard]:
    """Expire the cards still waiting at their `expires_at` (background-task cards); the expired."""
    stamp = rfc3339(now)
    rows = connection.execute(
        "SELECT card_id FROM approval_cards WHERE expires_at IS NOT NULL AND expires_at <= ? "
        "AND status = 'waiting'",
        (stamp,),
    ).fetchall()
    expired = [move(connection, row[0], ApprovalStatus.EXPIRED, now) for row in rows]
    return [found for found in expired if found is not None]


def recover(connection: sqlite3.Connection, now: datetime) -> list[ApprovalCard]:
    """At start-up: every claim still `running` has an unknown outcome, and is never run again; the
    conversation is told, as of any settled card."""
    unknown = []
    for card_id in in_status(connection, ApprovalStatus.RUNNING):
        digest, claimed_at = connection.execute(
            "SELECT digest, claimed_at FROM approval_cards WHERE card_id = ?", (card_id,)
        ).fetchone()
        receipt = {
            "card_id": card_id,
            "digest": digest,
            "outcome": "unknown",
            "started_at": claimed_at,
            "finished_at": None,
            "is_error": True,
            "text": "the host stopped while the action ran: its outcome is unknown, and it is not run again",
        }
        moved = move(connection, card_id, ApprovalStatus.UNKNOWN, now, receipt=receipt)
        if moved is not None:
            outcome_message(connection, moved, f"Outcome unknown: {moved.summary}", now)
            unknown.append(moved)
    return unknown


def outcome_message(connection: sqlite3.Connection, found: ApprovalCard, text: str, now: datetime) -> int:
    """Save the visible message that tells a settled card's outcome in the main conversation; its sequence."""
    seq = append_message(connection, found.session_id, "assistant", text, now)
    connection.execute(
        "UPDATE messages SET approval_id = ? WHERE session_id = ? AND seq = ?",
        (found.card_id, found.session_id, seq),
    )
    return seq
