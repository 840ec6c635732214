"""Reactions in the bundled store: the owner's and the agent's emoji on a message, compare-and-set on its
revision, idempotent by request ID with a bounded set of retained request receipts, and the locators of
the owner's changes the agent has not yet seen (spec/schema/receipts/reactions.schema.json).

Each function runs on a connection of the database: `react` and `changes_seen` on the writer's, inside the
transaction that commits them, so eligibility, the revision and the request ID are checked against the
state they write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from wuu.generated.catalog import USERHOST_MAX_REACTION_REQUEST_RECEIPTS
from wuu.generated.models import (
    MessageReactionSnapshot,
    ReactionActor,
    ReactionRequestReceipt,
    ReactionState,
)

from ..provider import ReactionChange, ReactionWrite
from ..refusals import NotReactionTarget, RequestIdConflict, StaleRevision
from ..stamps import rfc3339
from . import sessions
from .messages import message

UNSEEN_LOCATORS = 1024
"""Reaction locators kept for the agent's next step; older unseen ones are superseded by newer ones."""
EXCERPT_CHARS = 120


def react(
    connection: sqlite3.Connection,
    main: str,
    actor: ReactionActor,
    session_id: str,
    message_seq: int,
    emoji: str | None,
    expected_revision: int | None,
    request_id: str,
    now: datetime,
) -> ReactionWrite:
    """Set (or with None clear) the actor's reaction, revision-checked unless `expected_revision` is None; a
    known request ID replays its receipt. RequestIdConflict when the request ID was used for another
    reaction, NotReactionTarget when the actor may not react to the message, StaleRevision when the message
    is at another revision."""
    sessions.require(connection, session_id, main)
    retained = connection.execute(
        "SELECT request_id, session_id, message_seq, actor, emoji, expected_revision, revision, "
        "applied_at FROM reaction_receipts WHERE request_id = ?",
        (request_id,),
    ).fetchone()
    if retained is not None:
        if tuple(retained[1:5]) != (session_id, message_seq, actor.value, emoji):
            raise RequestIdConflict(f"request {request_id} was already used for another reaction")
        return ReactionWrite(state(connection, session_id, message_seq), _receipt(retained), True)
    found = message(connection, session_id, message_seq)
    if found is None or not eligible(found, actor):
        raise NotReactionTarget(f"message {message_seq} is not a reaction target for the {actor.value}")
    current = state(connection, session_id, message_seq)
    if expected_revision is not None and expected_revision != current.revision:
        raise StaleRevision(
            f"message {message_seq} is at reaction revision {current.revision}, not {expected_revision}"
        )
    # The locator is reserved before the reaction is written, and marked done after it.
    locator = None
    if actor is ReactionActor.OWNER:
        locator = connection.execute(
            "INSERT INTO reaction_locators (session_id, message_seq) VALUES (?, ?)", (session_id, message_seq)
        ).lastrowid
    revision = current.revision + 1
    column = actor.value  # `owner` or `agent`: a fixed column name, not input
    connection.execute(
        "INSERT INTO reactions (session_id, message_seq, revision) VALUES (?, ?, 0) ON CONFLICT DO NOTHING",
        (session_id, message_seq),
    )
    connection.execute(
        f"UPDATE reactions SET {column} = ?, revision = ? WHERE session_id = ? AND message_seq = ?",
        (emoji, revision, session_id, message_seq),
    )
    stamp = rfc3339(now)
    checked = current.revision if expected_revision is None else expected_revision
    connection.execute(
        "INSERT INTO reaction_receipts (request_id, session_id, message_seq, actor, emoji, "
        "expected_revision, revision, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (request_id, session_id, message_seq, actor.value, emoji, checked, revision, stamp),
    )
    connection.execute(
        "DELETE FROM reaction_receipts WHERE session_id = ? AND message_seq = ? AND id NOT IN "
        "(SELECT id FROM reaction_receipts WHERE session_id = ? AND message_seq = ? "
        "ORDER BY id DESC LIMIT ?)",
        (session_id, message_seq, session_id, message_seq, USERHOST_MAX_REACTION_REQUEST_RECEIPTS),
    )
    if locator is not None:
        connection.execute("UPDATE reaction_locators SET done = 1 WHERE id = ?", (locator,))
        connection.execute(
            "DELETE FROM reaction_locators WHERE session_id = ? AND id <= ?",
            (session_id, locator - UNSEEN_LOCATORS),
        )
    receipt = ReactionRequestReceipt.model_validate(
        {
            "request_id": request_id,
            "session_id": session_id,
            "message_seq": message_seq,
            "actor": actor.value,
            "emoji": emoji,
            "expected_revision": checked,
            "revision": revision,
            "applied_at": stamp,
        }
    )
    return ReactionWrite(state(connection, session_id, message_seq), receipt, False)


def snapshots(
    connection: sqlite3.Connection, main: str, session_id: str, message_seqs: Sequence[int]
) -> list[MessageReactionSnapshot]:
    """The current reactions of the session's saved messages among these, in their order."""
    sessions.require(connection, session_id, main)
    found = []
    for seq in message_seqs:
        row = message(connection, session_id, seq)
        if row is not None:
            found.append(
                MessageReactionSnapshot(
                    message_seq=seq,
                    reaction_eligible=eligible(row, ReactionActor.OWNER),
                    reactions=state(connection, session_id, seq),
                )
            )
    return found


def changes(connection: sqlite3.Connection, session_id: str, limit: int) -> tuple[list[ReactionChange], int]:
    """The owner's reaction changes the agent has not seen, coalesced per message, newest first, at most
    `limit`; and the locator mark that covers them. Run it inside a read transaction, so that both come from
    one snapshot."""
    seen = _seen(connection, session_id)
    rows = connection.execute(
        "SELECT l.message_seq, max(l.id) AS latest, r.owner, m.text FROM reaction_locators l "
        "JOIN messages m ON m.session_id = l.session_id AND m.seq = l.message_seq "
        "LEFT JOIN reactions r ON r.session_id = l.session_id AND r.message_seq = l.message_seq "
        "WHERE l.session_id = ? AND l.done = 1 AND l.id > ? GROUP BY l.message_seq "
        "ORDER BY latest DESC LIMIT ?",
        (session_id, seen, limit),
    ).fetchall()
    found = [ReactionChange(seq, owner, text[:EXCERPT_CHARS]) for seq, _, owner, text in rows]
    (mark,) = connection.execute(
        "SELECT coalesce(max(id), ?) FROM reaction_locators WHERE session_id = ? AND done = 1",
        (seen, session_id),
    ).fetchone()
    return found, mark


def changes_seen(connection: sqlite3.Connection, session_id: str, mark: int) -> None:
    """The agent has seen the changes up to `mark`: their locators go, and the mark never moves back."""
    connection.execute(
        "INSERT INTO reaction_marks VALUES (?, ?) ON CONFLICT (session_id) "
        "DO UPDATE SET seen = max(seen, excluded.seen)",
        (session_id, mark),
    )
    connection.execute(
        "DELETE FROM reaction_locators WHERE session_id = ? AND done = 1 AND id <= ?", (session_id, mark)
    )


def eligible(row: Sequence[Any], actor: ReactionActor) -> bool:
    """Whether the actor may react to the message (a row of MESSAGE_COLUMNS): the owner to a saved assistant
    message, the agent to a saved original user message, of the main conversation, neither hidden,
    truncated, read-only nor background."""
    _, _, role, kind, hidden, truncated, read_only, background, _, _, _, session_kind, _ = row
    wanted = "assistant" if actor is ReactionActor.OWNER else "user"
    plain = kind == "text" and not (hidden or truncated or read_only or background)
    return role == wanted and plain and session_kind == "main"


def state(connection: sqlite3.Connection, session_id: str, message_seq: int) -> ReactionState:
    """The message's current reactions and revision (revision 0 before the first)."""
    row = connection.execute(
        "SELECT owner, agent, revision FROM reactions WHERE session_id = ? AND message_seq = ?",
        (session_id, message_seq),
    ).fetchone()
    if row is None:
        return ReactionState(revision=0)
    owner, agent, revision = row
    found: dict[str, Any] = {"revision": revision}
    if owner is not None:
        found["owner"] = owner
    if agent is not None:
        found["agent"] = agent
    return ReactionState.model_validate(found)


def _receipt(row: Sequence[Any]) -> ReactionRequestReceipt:
    keys = ("request_id", "session_id", "message_seq", "actor", "emoji", "expected_revision", "revision")
    return ReactionRequestReceipt.model_validate({**dict(zip(keys, row, strict=False)), "applied_at": row[7]})


def _seen(connection: sqlite3.Connection, session_id: str) -> int:
    row = connection.execute("SELECT seen FROM reaction_marks WHERE session_id = ?", (session_id,)).fetchone()
    return 0 if row is None else int(row[0])
