"""The bundled `session.domain` provider: one SQLite file in the space's state folder.

Every write is one function run by the database's single writer inside the group's transaction, so each
rule that needs the stored state (request IDs, revisions, eligibility) is checked in the same transaction
that writes. Messages are saved in order: within a session both the history sequence and the row id grow
with each message, and so do timestamps (a clock that steps back saves the previous message's time), which
is what lets search walk its index newest first and turn time bounds into a row range.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from wuu.generated.catalog import USERHOST_MAX_REACTION_REQUEST_RECEIPTS
from wuu.generated.models import (
    AttachmentMetadata,
    HistoryMessage,
    InputReceipt,
    MessageReactionSnapshot,
    ReactionActor,
    ReactionRequestReceipt,
    ReactionState,
    UserHostErrorCode,
)

from ...errors import UserHostError
from ..provider import (
    Admission,
    ContextMessage,
    ReactionChange,
    ReactionWrite,
    StoredAttachment,
    Submission,
    TaskLedger,
)
from .database import Database
from .messages import append_message, rfc3339
from .tasks import SqliteTaskLedger

STORE_FILE = "personal.sqlite"
UNSEEN_LOCATORS = 1024
"""Reaction locators kept for the agent's next step; older unseen ones are superseded by newer ones."""
EXCERPT_CHARS = 120
SHORT_QUERY = 3
"""Queries shorter than this (in characters) cannot use the trigram index and scan the history instead."""

# The public conversation projection: visible text, never hidden reasoning or execution-tool records.
VISIBLE = "m.kind = 'text' AND m.hidden = 0"
MESSAGE_COLUMNS = (
    "m.id, m.seq, m.role, m.kind, m.hidden, m.truncated, m.read_only, m.background, m.text, m.created_at, "
    "m.question_id, s.kind"
)


class StoreError(Exception):
    """The store cannot serve this user space (it belongs to another, or it is damaged)."""


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _contains(text: str | None, needle: str | None) -> bool:
    return text is not None and needle is not None and needle.casefold() in text.casefold()


class SqliteSessionDomain:
    """The bundled provider. Open it with `SqliteSessionDomain.open(state_dir, user_space_id, domain)`."""

    def __init__(self, database: Database, main_session_id: str) -> None:
        self.database = database
        self.main_session_id = main_session_id

    @classmethod
    async def open(
        cls, state: Path, user_space_id: str, product_domain: str, now: datetime
    ) -> SqliteSessionDomain:
        """Open the space's store, creating it with its main conversation on first use. StoreError when
        the file belongs to another space or domain; StoreVersionError when a newer build wrote it."""

        def setup(connection: sqlite3.Connection) -> None:
            row = connection.execute("SELECT user_space_id, product_domain FROM space").fetchone()
            if row is None:
                main = _new_id("ses_main")
                created = rfc3339(now)
                connection.execute(
                    "INSERT INTO space VALUES (1, ?, ?, ?, ?)", (user_space_id, product_domain, main, created)
                )
                connection.execute("INSERT INTO sessions VALUES (?, 'main', ?)", (main, created))
            elif tuple(row) != (user_space_id, product_domain):
                raise StoreError(
                    f"{state / STORE_FILE} belongs to user space {row[0]!r}, domain {row[1]!r}, "
                    f"not {user_space_id!r}, {product_domain!r}"
                )

        database = await Database.open(state / STORE_FILE, setup, _prepare)
        (main,) = await database.read(lambda c: c.execute("SELECT main_session_id FROM space").fetchone())
        return cls(database, main)

    async def close(self) -> None:
        await self.database.close()

    def task_ledger(self) -> TaskLedger:
        return SqliteTaskLedger(self.database, self.main_session_id)

    # --- sessions --------------------------------------------------------------------------------

    async def main_session(self) -> str:
        main = self.main_session_id
        await self.database.read(lambda c: _require(c, main, main))
        return main

    async def owns(self, session_id: str) -> bool:
        def read(connection: sqlite3.Connection) -> bool:
            row = connection.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
            return row is not None

        return await self.database.read(read)

    # --- input ------------------------------------------------------------------------------------

    async def admit(self, submission: Submission, now: datetime) -> Admission:
        def write(connection: sqlite3.Connection) -> Admission:
            _require(connection, submission.session_id, self.main_session_id)
            found = connection.execute(
                "SELECT binding_digest FROM input_receipts WHERE request_id = ?", (submission.request_id,)
            ).fetchone()
            if found is not None:
                if found[0] != submission.binding_digest:
                    raise UserHostError(
                        UserHostErrorCode.REQUEST_ID_CONFLICT,
                        f"request {submission.request_id} was already used for another input",
                    )
                receipt = _receipt_where(connection, "request_id = ?", submission.request_id)
                assert receipt is not None
                return Admission(receipt, replayed=True)
            used = connection.execute(
                "SELECT 1 FROM input_receipts WHERE session_id = ? AND client_input_id = ?",
                (submission.session_id, submission.client_input_id),
            ).fetchone()
            if used is not None:
                raise UserHostError(
                    UserHostErrorCode.INVALID_PARAMS,
                    f"client input {submission.client_input_id} already names another input of the session",
                    "user_input.client_input_id",
                )
            indexed = submission.session_id == self.main_session_id
            seq = append_message(
                connection, submission.session_id, "user", submission.text, now, indexed=indexed
            )
            receipt_id = _new_id("rcp")
            stamp = rfc3339(now)
            connection.execute(
                "INSERT INTO input_receipts VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    receipt_id,
                    submission.request_id,
                    submission.binding_digest,
                    submission.session_id,
                    submission.plugin_id,
                    submission.client_input_id,
                    submission.text_sha256,
                    stamp,
                    stamp,
                    seq,
                ),
            )
            attachments = [
                (staged.attachment_id, staged.filename, staged.media_type, staged.size, staged.sha256)
                for staged in submission.attachments
            ]
            connection.executemany(
                "INSERT INTO attachments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        metadata[0],
                        receipt_id,
                        position,
                        submission.session_id,
                        seq,
                        *metadata[1:],
                        str(staged.path),
                    )
                    for position, (metadata, staged) in enumerate(
                        zip(attachments, submission.attachments, strict=True)
                    )
                ],
            )
            receipt = _receipt_of(
                (receipt_id, 1, submission.session_id, submission.plugin_id, submission.client_input_id,
                 submission.request_id, submission.text_sha256, stamp, stamp, seq, None),
                attachments,
            )  # fmt: skip
            return Admission(receipt, replayed=False)

        return await self.database.write(write)

    async def receipt(self, request_id: str) -> InputReceipt | None:
        return await self.database.read(lambda c: _receipt_where(c, "request_id = ?", request_id))

    async def receipts(self, session_id: str, client_input_ids: Sequence[str]) -> list[InputReceipt]:
        def read(connection: sqlite3.Connection) -> list[InputReceipt]:
            _require(connection, session_id, self.main_session_id)
            found = []
            for client_input_id in client_input_ids:
                receipt = _receipt_where(
                    connection, "session_id = ? AND client_input_id = ?", session_id, client_input_id
                )
                if receipt is not None:
                    found.append(receipt)
            return found

        return await self.database.read(read)

    async def append_assistant(self, session_id: str, text: str, now: datetime, kind: str = "text") -> int:
        indexed = kind == "text" and session_id == self.main_session_id
        return await self.database.write(
            lambda c: append_message(c, session_id, "assistant", text, now, kind, indexed=indexed)
        )

    async def pending_inputs(self, session_id: str, limit: int) -> list[ContextMessage]:
        def read(connection: sqlite3.Connection) -> list[ContextMessage]:
            rows = connection.execute(
                "SELECT m.seq, m.role, m.text, r.client_input_id FROM input_receipts r JOIN messages m "
                "ON m.session_id = r.session_id AND m.seq = r.history_seq WHERE r.session_id = ? "
                "AND r.read_at IS NULL ORDER BY r.history_seq LIMIT ?",
                (session_id, limit),
            )
            return [ContextMessage(*row) for row in rows]

        return await self.database.read(read)

    async def context(self, session_id: str, limit: int) -> list[ContextMessage]:
        def read(connection: sqlite3.Connection) -> list[ContextMessage]:
            rows = connection.execute(
                "SELECT m.seq, m.role, m.text, r.client_input_id FROM messages m LEFT JOIN input_receipts r "
                f"ON r.session_id = m.session_id AND r.history_seq = m.seq WHERE m.session_id = ? AND {VISIBLE} "
                "ORDER BY m.seq DESC LIMIT ?",
                (session_id, limit),
            ).fetchall()
            return [
                ContextMessage(seq, role, text, client_input_id) for seq, role, text, client_input_id in rows
            ][::-1]

        return await self.database.read(read)

    async def record_read(
        self, session_id: str, included: Sequence[tuple[str, int]], now: datetime
    ) -> list[str]:
        def write(connection: sqlite3.Connection) -> list[str]:
            recorded = []
            for client_input_id, seq in included:
                changed = connection.execute(
                    "UPDATE input_receipts SET read_at = ?, revision = revision + 1 WHERE session_id = ? "
                    "AND client_input_id = ? AND history_seq = ? AND read_at IS NULL",
                    (rfc3339(now), session_id, client_input_id, seq),
                ).rowcount
                if changed:
                    recorded.append(client_input_id)
            return recorded

        return await self.database.write(write)

    # --- history ----------------------------------------------------------------------------------

    async def history(self, session_id: str, before_seq: int | None, limit: int) -> list[HistoryMessage]:
        def read(connection: sqlite3.Connection) -> list[HistoryMessage]:
            _require(connection, session_id, self.main_session_id)
            rows = connection.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s USING (session_id) "
                f"WHERE m.session_id = ? AND m.seq < ? AND {VISIBLE} ORDER BY m.seq DESC LIMIT ?",
                (session_id, before_seq or 2**63 - 1, limit),
            ).fetchall()
            return _history_messages(connection, session_id, rows)

        return await self.database.read(read)

    async def search(
        self,
        session_id: str,
        query: str,
        time_min_us: int | None,
        time_max_us: int | None,
        before_seq: int | None,
        limit: int,
    ) -> list[HistoryMessage]:
        def read(connection: sqlite3.Connection) -> list[HistoryMessage]:
            _require(connection, session_id, self.main_session_id)
            low, high = _id_range(connection, session_id, time_min_us, time_max_us, before_seq)
            if low > high:
                return []
            bounds, arguments = "", [session_id, low, high]
            if time_min_us is not None or time_max_us is not None:
                bounds = " AND m.created_us IS NOT NULL AND m.created_us >= ? AND m.created_us < ?"
                arguments += [time_min_us or -(2**63), time_max_us or 2**63 - 1]
            if len(query.casefold()) < SHORT_QUERY or "\x00" in query:  # FTS5 query strings end at a NUL
                sql = (
                    f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s USING (session_id) "
                    # `+`: walk the rows by id, newest first, and stop at the page's end (the session's
                    # index would fetch every row of the session and sort them).
                    f"WHERE +m.session_id = ? AND m.id BETWEEN ? AND ? AND {VISIBLE}{bounds} "
                    "AND wuu_contains(m.text, ?) ORDER BY m.id DESC LIMIT ?"
                )
                rows = connection.execute(sql, [*arguments, query, limit]).fetchall()
            else:
                phrase = '"' + query.casefold().replace('"', '""') + '"'
                sql = (
                    f"SELECT {MESSAGE_COLUMNS} FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                    "JOIN sessions s USING (session_id) WHERE messages_fts MATCH ? AND m.session_id = ? "
                    f"AND f.rowid BETWEEN ? AND ?{bounds} ORDER BY f.rowid DESC LIMIT ?"
                )
                rows = connection.execute(sql, [phrase, *arguments, limit]).fetchall()
            return _history_messages(connection, session_id, rows)

        return await self.database.read(read)

    async def known_attachments(self, attachment_ids: Sequence[str]) -> set[str]:
        def read(connection: sqlite3.Connection) -> set[str]:
            found = set()
            for attachment_id in attachment_ids:
                row = connection.execute(
                    "SELECT 1 FROM attachments WHERE attachment_id = ?", (attachment_id,)
                ).fetchone()
                if row is not None:
                    found.add(attachment_id)
            return found

        return await self.database.read(read)

    async def attachment(self, session_id: str, attachment_id: str) -> StoredAttachment | None:
        def read(connection: sqlite3.Connection) -> StoredAttachment | None:
            row = connection.execute(
                "SELECT attachment_id, filename, media_type, size, sha256, file FROM attachments "
                "WHERE attachment_id = ? AND session_id = ?",
                (attachment_id, session_id),
            ).fetchone()
            if row is None:
                return None
            return StoredAttachment(_attachment_metadata(row[:5]), Path(row[5]))

        return await self.database.read(read)

    # --- reactions ---------------------------------------------------------------------------------

    async def react(
        self,
        actor: ReactionActor,
        session_id: str,
        message_seq: int,
        emoji: str | None,
        expected_revision: int | None,
        request_id: str,
        now: datetime,
    ) -> ReactionWrite:
        def write(connection: sqlite3.Connection) -> ReactionWrite:
            _require(connection, session_id, self.main_session_id)
            retained = connection.execute(
                "SELECT request_id, session_id, message_seq, actor, emoji, expected_revision, revision, "
                "applied_at FROM reaction_receipts WHERE request_id = ?",
                (request_id,),
            ).fetchone()
            if retained is not None:
                if tuple(retained[1:5]) != (session_id, message_seq, actor.value, emoji):
                    raise UserHostError(
                        UserHostErrorCode.REQUEST_ID_CONFLICT,
                        f"request {request_id} was already used for another reaction",
                    )
                return ReactionWrite(
                    _reaction_state(connection, session_id, message_seq), _receipt(retained), True
                )
            message = connection.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s USING (session_id) "
                "WHERE m.session_id = ? AND m.seq = ?",
                (session_id, message_seq),
            ).fetchone()
            if message is None or not _eligible(message, actor):
                raise UserHostError(
                    UserHostErrorCode.NOT_REACTION_TARGET,
                    f"message {message_seq} is not a reaction target for the {actor.value}",
                )
            state = _reaction_state(connection, session_id, message_seq)
            if expected_revision is not None and expected_revision != state.revision:
                raise UserHostError(
                    UserHostErrorCode.STALE_REVISION,
                    f"message {message_seq} is at reaction revision {state.revision}, not {expected_revision}",
                )
            # The locator is reserved before the reaction is written, and marked done after it.
            locator = None
            if actor is ReactionActor.OWNER:
                locator = connection.execute(
                    "INSERT INTO reaction_locators (session_id, message_seq) VALUES (?, ?)",
                    (session_id, message_seq),
                ).lastrowid
            revision = state.revision + 1
            column = actor.value  # `owner` or `agent`: a fixed column name, not input
            connection.execute(
                "INSERT INTO reactions (session_id, message_seq, revision) VALUES (?, ?, 0) "
                "ON CONFLICT DO NOTHING",
                (session_id, message_seq),
            )
            connection.execute(
                f"UPDATE reactions SET {column} = ?, revision = ? WHERE session_id = ? AND message_seq = ?",
                (emoji, revision, session_id, message_seq),
            )
            stamp = rfc3339(now)
            checked = state.revision if expected_revision is None else expected_revision
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
            return ReactionWrite(_reaction_state(connection, session_id, message_seq), receipt, False)

        return await self.database.write(write)

    async def reactions(self, session_id: str, message_seqs: Sequence[int]) -> list[MessageReactionSnapshot]:
        def read(connection: sqlite3.Connection) -> list[MessageReactionSnapshot]:
            _require(connection, session_id, self.main_session_id)
            snapshots = []
            for seq in message_seqs:
                message = connection.execute(
                    f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s USING (session_id) "
                    "WHERE m.session_id = ? AND m.seq = ?",
                    (session_id, seq),
                ).fetchone()
                if message is not None:
                    snapshots.append(
                        MessageReactionSnapshot(
                            message_seq=seq,
                            reaction_eligible=_eligible(message, ReactionActor.OWNER),
                            reactions=_reaction_state(connection, session_id, seq),
                        )
                    )
            return snapshots

        return await self.database.read(read)

    async def reaction_changes(self, session_id: str, limit: int) -> tuple[list[ReactionChange], int]:
        def read(connection: sqlite3.Connection) -> tuple[list[ReactionChange], int]:
            connection.execute("BEGIN")  # the changes and the mark from one snapshot
            try:
                return changes_and_mark(connection)
            finally:
                connection.execute("COMMIT")

        def changes_and_mark(connection: sqlite3.Connection) -> tuple[list[ReactionChange], int]:
            seen = _seen(connection, session_id)
            rows = connection.execute(
                "SELECT l.message_seq, max(l.id) AS latest, r.owner, m.text FROM reaction_locators l "
                "JOIN messages m ON m.session_id = l.session_id AND m.seq = l.message_seq "
                "LEFT JOIN reactions r ON r.session_id = l.session_id AND r.message_seq = l.message_seq "
                "WHERE l.session_id = ? AND l.done = 1 AND l.id > ? GROUP BY l.message_seq "
                "ORDER BY latest DESC LIMIT ?",
                (session_id, seen, limit),
            ).fetchall()
            changes = [ReactionChange(seq, owner, text[:EXCERPT_CHARS]) for seq, _, owner, text in rows]
            (mark,) = connection.execute(
                "SELECT coalesce(max(id), ?) FROM reaction_locators WHERE session_id = ? AND done = 1",
                (seen, session_id),
            ).fetchone()
            return changes, mark

        return await self.database.read(read)

    async def reaction_changes_seen(self, session_id: str, mark: int) -> None:
        def write(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO reaction_marks VALUES (?, ?) ON CONFLICT (session_id) "
                "DO UPDATE SET seen = max(seen, excluded.seen)",
                (session_id, mark),
            )
            connection.execute(
                "DELETE FROM reaction_locators WHERE session_id = ? AND done = 1 AND id <= ?",
                (session_id, mark),
            )

        await self.database.write(write)


# --- the statements' helpers (run on the writer's or the reader's thread) -----------------------------


def _require(connection: sqlite3.Connection, session_id: str, main: str) -> None:
    """UserHostError unless the session exists: `main_session_missing` for the main conversation (never
    recreated), `not_found` for another."""
    if connection.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchone() is None:
        if session_id == main:
            raise UserHostError(
                UserHostErrorCode.MAIN_SESSION_MISSING,
                f"the main conversation {main} is missing from the store; it is not recreated",
            )
        raise UserHostError(UserHostErrorCode.NOT_FOUND, f"no session {session_id}")


def _receipt_where(connection: sqlite3.Connection, where: str, *arguments: Any) -> InputReceipt | None:
    row = connection.execute(
        "SELECT receipt_id, revision, session_id, plugin_id, client_input_id, request_id, text_sha256, "
        f"created_at, accepted_at, history_seq, read_at FROM input_receipts WHERE {where}",
        arguments,
    ).fetchone()
    if row is None:
        return None
    attachments = connection.execute(
        "SELECT attachment_id, filename, media_type, size, sha256 FROM attachments WHERE receipt_id = ? "
        "ORDER BY position",
        (row[0],),
    ).fetchall()
    return _receipt_of(row, attachments)


def _receipt_of(row: Sequence[Any], attachments: Sequence[Sequence[Any]]) -> InputReceipt:
    """A receipt from its row (the columns of `_receipt_where`) and its attachments' metadata rows."""
    receipt_id, revision, session_id, plugin_id, client_input_id, request_id, text_sha256 = row[:7]
    created_at, accepted_at, history_seq, read_at = row[7:]
    return InputReceipt.model_validate(
        {
            "receipt_id": receipt_id,
            "revision": revision,
            "session_id": session_id,
            "plugin_id": plugin_id,
            "client_input_id": client_input_id,
            "request_id": request_id,
            "text_sha256": text_sha256,
            "attachments": [_attachment_metadata(attachment).to_wire() for attachment in attachments],
            "created_at": created_at,
            "accepted": accepted_at is not None,
            "accepted_at": accepted_at,
            "in_history": history_seq is not None,
            "history_seq": history_seq,
            "read_at": read_at,
        }
    )


def _attachment_metadata(row: Sequence[Any]) -> AttachmentMetadata:
    attachment_id, filename, media_type, size, sha256 = row
    return AttachmentMetadata(
        attachment_id=attachment_id, filename=filename, media_type=media_type, size=size, sha256=sha256
    )


def _eligible(message: Sequence[Any], actor: ReactionActor) -> bool:
    """Whether the actor may react to the message: the owner to a saved assistant message, the agent to a
    saved original user message, of the main conversation, neither hidden, truncated, read-only nor
    background."""
    _, _, role, kind, hidden, truncated, read_only, background, _, _, _, session_kind = message
    wanted = "assistant" if actor is ReactionActor.OWNER else "user"
    plain = kind == "text" and not (hidden or truncated or read_only or background)
    return role == wanted and plain and session_kind == "main"


def _reaction_state(connection: sqlite3.Connection, session_id: str, message_seq: int) -> ReactionState:
    row = connection.execute(
        "SELECT owner, agent, revision FROM reactions WHERE session_id = ? AND message_seq = ?",
        (session_id, message_seq),
    ).fetchone()
    if row is None:
        return ReactionState(revision=0)
    owner, agent, revision = row
    state: dict[str, Any] = {"revision": revision}
    if owner is not None:
        state["owner"] = owner
    if agent is not None:
        state["agent"] = agent
    return ReactionState.model_validate(state)


def _receipt(row: Sequence[Any]) -> ReactionRequestReceipt:
    keys = ("request_id", "session_id", "message_seq", "actor", "emoji", "expected_revision", "revision")
    return ReactionRequestReceipt.model_validate({**dict(zip(keys, row, strict=False)), "applied_at": row[7]})


def _seen(connection: sqlite3.Connection, session_id: str) -> int:
    row = connection.execute("SELECT seen FROM reaction_marks WHERE session_id = ?", (session_id,)).fetchone()
    return 0 if row is None else int(row[0])


def _history_messages(
    connection: sqlite3.Connection, session_id: str, rows: Sequence[Sequence[Any]]
) -> list[HistoryMessage]:
    messages = []
    for row in rows:
        _, seq, role, _, _, _, _, _, text, created_at, question_id, _ = row
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
            "reaction_eligible": _eligible(row, ReactionActor.OWNER),
            "reactions": _reaction_state(connection, session_id, seq).to_wire(),
            "attachments": [_attachment_metadata(attachment).to_wire() for attachment in attachments],
        }
        if question_id is not None:
            message["question_id"] = question_id
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


def _prepare(connection: sqlite3.Connection) -> None:
    """`wuu_contains(text, needle)`: Unicode case-insensitive substring, for queries too short for the index."""
    connection.create_function("wuu_contains", 2, _contains, deterministic=True)
