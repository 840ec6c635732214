"""The delivery receipts of task replies in the bundled store: `pending → submitted → delivered | failed`,
the reply turn each submission runs under, retry and stop (spec/schema/receipts/task_delivery.schema.json).

Each write runs on the database's writer, checked against the stored state in the transaction that writes,
so a stop and a delivery cannot both settle one reply.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from wuu.generated.models import TaskDeliveryKind, TaskDeliveryReceipt

from ..provider import TaskRecord, TaskStateError
from ..stamps import rfc3339
from .messages import append_message
from .sessions import new_id

DELIVERY_COLUMNS = (
    "delivery_id, task_id, requirements_version, execution_attempt, request_id, kind, session_id, status, "
    "turn_id, history_seq, failure_code, revision, updated_at"
)


def of_task(connection: sqlite3.Connection, task_id: str) -> list[TaskDeliveryReceipt]:
    """The task's delivery receipts, oldest first."""
    rows = connection.execute(
        f"SELECT {DELIVERY_COLUMNS} FROM task_deliveries WHERE task_id = ? ORDER BY created", (task_id,)
    ).fetchall()
    return [_receipt(row) for row in rows]


def pending(connection: sqlite3.Connection) -> list[str]:
    """The deliveries waiting to be submitted, oldest first."""
    return [
        row[0]
        for row in connection.execute(
            "SELECT delivery_id FROM task_deliveries WHERE status = 'pending' ORDER BY created"
        )
    ]


def submit(
    connection: sqlite3.Connection, delivery_id: str, now: datetime
) -> tuple[TaskDeliveryReceipt, str] | None:
    """pending → submitted under a fresh turn ID (durable before the reply turn runs): the receipt and the
    task's text; None when the delivery is no longer pending."""
    changed = connection.execute(
        "UPDATE task_deliveries SET status = 'submitted', turn_id = ?, revision = revision + 1, "
        "updated_at = ? WHERE delivery_id = ? AND status = 'pending'",
        (new_id("turn"), rfc3339(now), delivery_id),
    ).rowcount
    if not changed:
        return None
    receipt = delivery_where(connection, "delivery_id = ?", delivery_id)
    (text,) = connection.execute(
        "SELECT text FROM task_deliveries WHERE delivery_id = ?", (delivery_id,)
    ).fetchone()
    assert receipt is not None
    return receipt, text


def settle(
    connection: sqlite3.Connection, main: str, delivery_id: str, turn_id: str, text: str | None, now: datetime
) -> TaskDeliveryReceipt:
    """End the reply turn `turn_id`: with `text`, the reply appears in the main conversation `main` and the
    delivery is delivered (unless a stop asked for its cancellation meanwhile: then it fails with `cancelled`
    and nothing appears); with None, the turn failed (`delivery_failed`). TaskStateError `stale_turn` when
    the turn is not the delivery's turn in flight."""
    row = connection.execute(
        "SELECT status, turn_id, cancel_requested, question_id FROM task_deliveries WHERE delivery_id = ?",
        (delivery_id,),
    ).fetchone()
    if row is None or row[0] != "submitted" or row[1] != turn_id:
        raise TaskStateError("stale_turn", f"turn {turn_id} is not the delivery's turn in flight")
    stamp = rfc3339(now)
    if row[2] or text is None:
        connection.execute(
            "UPDATE task_deliveries SET status = 'failed', failure_code = ?, cancel_requested = 0, "
            "revision = revision + 1, updated_at = ? WHERE delivery_id = ?",
            ("cancelled" if row[2] else "delivery_failed", stamp, delivery_id),
        )
    else:
        seq = append_message(connection, main, "assistant", text, now)
        if row[3] is not None:
            connection.execute(
                "UPDATE messages SET question_id = ? WHERE session_id = ? AND seq = ?", (row[3], main, seq)
            )
        connection.execute(
            "UPDATE task_deliveries SET status = 'delivered', history_seq = ?, revision = revision + 1, "
            "updated_at = ? WHERE delivery_id = ?",
            (seq, stamp, delivery_id),
        )
    receipt = delivery_where(connection, "delivery_id = ?", delivery_id)
    assert receipt is not None
    return receipt


def retry(connection: sqlite3.Connection, delivery_id: str, now: datetime) -> TaskDeliveryReceipt:
    """An explicit delivery retry: it first checks the original receipt. Delivered: recovered as it is.
    Submitted: refused (`outcome_unknown`), an unknown outcome blocks another attempt. Failed: pending
    again, to retry only the reply (refused, `cancelled`, when a stop cancelled it). Pending: unchanged."""
    receipt = delivery_where(connection, "delivery_id = ?", delivery_id)
    if receipt is None:
        raise TaskStateError("not_found", f"no delivery {delivery_id}")
    if receipt.status.value == "submitted":
        raise TaskStateError(
            "outcome_unknown", f"turn {receipt.turn_id} was submitted and its outcome is unknown"
        )
    if receipt.status.value == "failed":
        stopped = connection.execute(
            "SELECT cancel_requested FROM tasks WHERE task_id = ?", (receipt.task_id,)
        ).fetchone()[0]
        if stopped and receipt.failure_code == "cancelled":
            raise TaskStateError(
                "cancelled", f"task {receipt.task_id} was stopped: its reply stays cancelled"
            )
        connection.execute(
            "UPDATE task_deliveries SET status = 'pending', turn_id = NULL, failure_code = NULL, "
            "revision = revision + 1, updated_at = ? WHERE delivery_id = ?",
            (rfc3339(now), delivery_id),
        )
        receipt = delivery_where(connection, "delivery_id = ?", delivery_id)
        assert receipt is not None
    return receipt


def stop_reply(connection: sqlite3.Connection, turn_id: str, now: datetime) -> TaskDeliveryReceipt:
    """Stop the main-conversation reply of exactly this turn: a submitted reply is marked for cancellation;
    a turn that already ended is left as it is (a late or retried stop never reaches a newer reply, which has
    another turn ID). TaskStateError `not_found` for an unknown turn."""
    receipt = delivery_where(connection, "turn_id = ?", turn_id)
    if receipt is None:
        raise TaskStateError("not_found", f"no reply turn {turn_id}")
    if receipt.status.value == "submitted":
        connection.execute(
            "UPDATE task_deliveries SET cancel_requested = 1, revision = revision + 1, updated_at = ? "
            "WHERE turn_id = ? AND cancel_requested = 0",
            (rfc3339(now), turn_id),
        )
        receipt = delivery_where(connection, "turn_id = ?", turn_id)
        assert receipt is not None
    return receipt


def new_delivery(
    connection: sqlite3.Connection,
    task: TaskRecord,
    kind: TaskDeliveryKind,
    text: str,
    question_id: str | None,
    now: datetime,
) -> str:
    """Queue a pending delivery of the task's `text` to the main conversation; its ID."""
    delivery_id = new_id("dlv")
    (order,) = connection.execute("SELECT coalesce(max(created), 0) + 1 FROM task_deliveries").fetchone()
    main = connection.execute("SELECT main_session_id FROM space").fetchone()[0]
    connection.execute(
        "INSERT INTO task_deliveries VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', NULL, NULL, NULL, 0, ?, ?, 1, ?, ?)",
        (
            delivery_id,
            task.task_id,
            task.requirements_version,
            task.execution_attempt,
            task.request_id,
            kind.value,
            main,
            text,
            question_id,
            rfc3339(now),
            order,
        ),
    )
    return delivery_id


def delivery_where(connection: sqlite3.Connection, where: str, *arguments: Any) -> TaskDeliveryReceipt | None:
    """The receipt the condition on `task_deliveries` finds."""
    row = connection.execute(
        f"SELECT {DELIVERY_COLUMNS} FROM task_deliveries WHERE {where}", arguments
    ).fetchone()
    return None if row is None else _receipt(row)


def _receipt(row: Sequence[Any]) -> TaskDeliveryReceipt:
    keys = DELIVERY_COLUMNS.split(", ")
    return TaskDeliveryReceipt.model_validate(dict(zip(keys, row, strict=True)))
