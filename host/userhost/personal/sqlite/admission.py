"""Input admission in the bundled store: input receipts, the attachments admission bound, and the read stage
the agent's context records (spec/schema/receipts/input.schema.json).

Each function runs on a connection of the database: the writes on the writer's, inside the transaction that
commits them, so the request-ID and client-input-ID rules are checked against the state they write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.models import AttachmentMetadata, InputReceipt

from ...services import Caller
from ..provider import Admission, ContextMessage, StoredAttachment, Submission
from ..refusals import ClientInputIdTaken, RequestIdConflict
from ..stamps import micros, rfc3339
from . import sessions
from .messages import append_at


def admit(connection: sqlite3.Connection, main: str, submission: Submission, now: datetime) -> Admission:
    """Admit the input into its session's history with its receipt, or return the receipt its request ID
    already has when everything admission binds matches. RequestIdConflict when the request ID bound another
    input; ClientInputIdTaken when the client input ID names another input of the session; MainSessionMissing
    or SessionNotFound when the session is not in the store."""
    receipt_id = sessions.new_id("rcp")
    stamp = rfc3339(now)
    admitted_by = None if submission.admitted_by is None else orjson.dumps(submission.admitted_by).decode()
    # The receipt goes first, at the sequence its message will take: its unique request ID and client input
    # ID are the admission rules' checks, made by the insert itself (a statement fewer each), and the
    # session's own foreign key is the check that the session exists.
    try:
        inserted = connection.execute(
            "INSERT INTO input_receipts VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, "
            "(SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE session_id = ?4), NULL, ?) "
            "ON CONFLICT (request_id) DO NOTHING ON CONFLICT (session_id, client_input_id) DO NOTHING "
            "RETURNING history_seq",
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
                admitted_by,
            ),
        ).fetchone()
    except sqlite3.IntegrityError:
        sessions.require(connection, submission.session_id, main)
        raise
    if inserted is None:
        return _admitted_before(connection, submission)
    seq = append_at(connection, submission.session_id, "user", "text", submission.text, stamp, micros(now))
    assert seq == inserted[0], (seq, inserted)
    attachments = [
        (staged.attachment_id, staged.filename, staged.media_type, staged.size, staged.sha256)
        for staged in submission.attachments
    ]
    if attachments:
        connection.executemany(
            "INSERT INTO attachments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    staged.attachment_id,
                    receipt_id,
                    position,
                    submission.session_id,
                    seq,
                    staged.filename,
                    staged.media_type,
                    staged.size,
                    staged.sha256,
                    str(staged.path),
                )
                for position, staged in enumerate(submission.attachments)
            ],
        )
    receipt = _receipt_of(
        (receipt_id, 1, submission.session_id, submission.plugin_id, submission.client_input_id,
         submission.request_id, submission.text_sha256, stamp, stamp, seq, None),
        attachments,
    )  # fmt: skip
    return Admission(receipt, replayed=False)


def _admitted_before(connection: sqlite3.Connection, submission: Submission) -> Admission:
    """The outcome of a submission whose receipt insert met an existing one: the replay of the request ID's
    receipt, RequestIdConflict, or ClientInputIdTaken."""
    found = connection.execute(
        "SELECT binding_digest FROM input_receipts WHERE request_id = ?", (submission.request_id,)
    ).fetchone()
    if found is None:
        raise ClientInputIdTaken(
            f"client input {submission.client_input_id} already names another input of the session"
        )
    if found[0] != submission.binding_digest:
        raise RequestIdConflict(f"request {submission.request_id} was already used for another input")
    receipt = receipt_where(connection, "request_id = ?", submission.request_id)
    assert receipt is not None
    return Admission(receipt, replayed=True)


def receipts(
    connection: sqlite3.Connection, main: str, session_id: str, client_input_ids: Sequence[str]
) -> list[InputReceipt]:
    """The session's receipts of these client input IDs, in their order; IDs without one are left out."""
    sessions.require(connection, session_id, main)
    found = []
    for client_input_id in client_input_ids:
        receipt = receipt_where(
            connection, "session_id = ? AND client_input_id = ?", session_id, client_input_id
        )
        if receipt is not None:
            found.append(receipt)
    return found


def pending_inputs(connection: sqlite3.Connection, session_id: str, limit: int) -> list[ContextMessage]:
    """The oldest `limit` admitted inputs without `read_at`, oldest first."""
    rows = connection.execute(
        "SELECT m.seq, m.role, m.text, r.client_input_id FROM input_receipts r JOIN messages m "
        "ON m.session_id = r.session_id AND m.seq = r.history_seq WHERE r.session_id = ? "
        "AND r.read_at IS NULL ORDER BY r.history_seq LIMIT ?",
        (session_id, limit),
    ).fetchall()
    return list(map(ContextMessage._make, rows))


def record_read(
    connection: sqlite3.Connection, session_id: str, included: Sequence[tuple[str, int]], now: datetime
) -> list[str]:
    """Set `read_at` on the receipts of these exact (client input ID, history sequence) pairs that have none
    yet; the client input IDs it set."""
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


def known_attachments(connection: sqlite3.Connection, attachment_ids: Sequence[str]) -> set[str]:
    """Those of these attachment IDs that a receipt names."""
    found = set()
    for attachment_id in attachment_ids:
        row = connection.execute(
            "SELECT 1 FROM attachments WHERE attachment_id = ?", (attachment_id,)
        ).fetchone()
        if row is not None:
            found.add(attachment_id)
    return found


def attachment(
    connection: sqlite3.Connection, session_id: str, attachment_id: str
) -> StoredAttachment | None:
    """The session's attachment record and where its bytes are, or None."""
    row = connection.execute(
        "SELECT attachment_id, filename, media_type, size, sha256, file FROM attachments "
        "WHERE attachment_id = ? AND session_id = ?",
        (attachment_id, session_id),
    ).fetchone()
    if row is None:
        return None
    return StoredAttachment(attachment_metadata(row[:5]), Path(row[5]))


def input_attachment(
    connection: sqlite3.Connection, session_id: str, client_input_id: str, attachment_id: str
) -> StoredAttachment | None:
    """An attachment of one input of the session, or None."""
    row = connection.execute(
        "SELECT a.attachment_id, a.filename, a.media_type, a.size, a.sha256, a.file FROM attachments a "
        "JOIN input_receipts r ON r.receipt_id = a.receipt_id "
        "WHERE a.attachment_id = ? AND r.session_id = ? AND r.client_input_id = ?",
        (attachment_id, session_id, client_input_id),
    ).fetchone()
    if row is None:
        return None
    return StoredAttachment(attachment_metadata(row[:5]), Path(row[5]))


def receipt_where(connection: sqlite3.Connection, where: str, *arguments: Any) -> InputReceipt | None:
    """The receipt the condition on `input_receipts` finds, with its attachments' metadata."""
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


def attachment_metadata(row: Sequence[Any]) -> AttachmentMetadata:
    """An attachment's metadata from its (ID, filename, media type, size, digest) row."""
    attachment_id, filename, media_type, size, sha256 = row
    return AttachmentMetadata(
        attachment_id=attachment_id, filename=filename, media_type=media_type, size=size, sha256=sha256
    )


def _receipt_of(row: Sequence[Any], attachments: Sequence[Sequence[Any]]) -> InputReceipt:
    """A receipt from its row (the columns of `receipt_where`) and its attachments' metadata rows."""
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
            "attachments": [attachment_metadata(attachment).to_wire() for attachment in attachments],
            "created_at": created_at,
            "accepted": accepted_at is not None,
            "accepted_at": accepted_at,
            "in_history": history_seq is not None,
            "history_seq": history_seq,
            "read_at": read_at,
        }
    )


def admitted_by(connection: sqlite3.Connection, session_id: str, client_input_id: str) -> Caller | None:
    """The transport that admitted an input, as its receipt recorded it."""
    row = connection.execute(
        "SELECT admitted_by FROM input_receipts WHERE session_id = ? AND client_input_id = ?",
        (session_id, client_input_id),
    ).fetchone()
    return None if row is None or row[0] is None else Caller(**orjson.loads(row[0]))
