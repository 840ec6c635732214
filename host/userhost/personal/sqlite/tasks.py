"""The bundled store's tasks: hidden task executions, the delivery receipts of their replies to the main
conversation, waiting-user questions and push registrations (spec/schema/receipts/task_delivery.schema.json,
spec/schema/userhost/questions.schema.json, push.schema.json).

Each transition is one write of the database's single writer, checked against the stored state in the
same transaction, so the races those schemas rule out resolve by commit order: an answer and a result
submitted at once cannot both apply to a waiting task, and a stop and a delivery cannot both settle one
reply.
"""

from __future__ import annotations

import re
import secrets
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from wuu.generated.models import (
    PushProvider,
    PushRegisterResult,
    TaskDeliveryKind,
    TaskDeliveryReceipt,
    UserHostErrorCode,
    UserQuestionStatus,
)

from ...errors import UserHostError
from ..provider import Decision, QuestionDecision, StopOutcome, TaskRecord, TaskStateError
from .database import Database
from .messages import append_message, rfc3339

DELIVERY_COLUMNS = (
    "delivery_id, task_id, requirements_version, execution_attempt, request_id, kind, session_id, status, "
    "turn_id, history_seq, failure_code, revision, updated_at"
)
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""A business request ID (the receipts' `request_id` rule)."""
TASK_COLUMNS = (
    "task_id, parent_id, session_id, request_id, requirements_version, execution_attempt, status, "
    "cancel_requested, outcome, revision"
)


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class SqliteTaskLedger:
    """The task ledger of one space's store."""

    def __init__(self, database: Database, main_session_id: str) -> None:
        self.database = database
        self.main_session_id = main_session_id

    # --- tasks ------------------------------------------------------------------------------------

    async def create(self, request_id: str, parent_id: str | None, now: datetime) -> TaskRecord:
        """A new hidden task with its own session, requirements version 1 and attempt 1; the existing task
        when its dispatch `request_id` is known (automatic recovery keeps the request identity)."""

        def write(connection: sqlite3.Connection) -> TaskRecord:
            found = _task_where(connection, "request_id = ?", request_id)
            if found is not None:
                return found
            if not REQUEST_ID.fullmatch(request_id):
                raise TaskStateError("invalid_request_id", f"{request_id!r} is not a business request ID")
            if parent_id is not None:
                parent = _task_where(connection, "task_id = ?", parent_id)
                if parent is None:
                    raise TaskStateError("not_found", f"no parent task {parent_id}")
                if parent.cancel_requested:  # the stop's intent covers descendant work started later
                    raise TaskStateError("cancelled", f"parent task {parent_id} was stopped")
            task_id, session_id, stamp = _id("task"), _id("ses_task"), rfc3339(now)
            connection.execute("INSERT INTO sessions VALUES (?, 'task', ?)", (session_id, stamp))
            connection.execute(
                "INSERT INTO tasks VALUES (?, ?, ?, ?, 1, 1, 'running', 0, NULL, 1, ?)",
                (task_id, parent_id, session_id, request_id, stamp),
            )
            task = _task_where(connection, "task_id = ?", task_id)
            assert task is not None
            return task

        return await self.database.write(write)

    async def task(self, task_id: str) -> TaskRecord | None:
        return await self.database.read(lambda c: _task_where(c, "task_id = ?", task_id))

    async def ask(self, task_id: str, text: str, now: datetime) -> tuple[str, str]:
        """The running task waits for the owner: a question and its own delivery. (question, delivery)."""

        def write(connection: sqlite3.Connection) -> tuple[str, str]:
            task = _live(connection, task_id, ("running", "waiting_user"))
            question_id = _id("q")
            connection.execute(
                "INSERT INTO questions (question_id, task_id, text) VALUES (?, ?, ?)",
                (question_id, task_id, text),
            )
            _set_task(connection, task, "waiting_user", None, now)
            return question_id, _new_delivery(
                connection, task, TaskDeliveryKind.QUESTION, text, question_id, now
            )

        return await self.database.write(write)

    async def finish(self, task_id: str, kind: TaskDeliveryKind, text: str, now: datetime) -> str:
        """Persist the task's result (completion evidence) or failure and queue its reply; the delivery.
        A task waiting for the owner's answer cannot complete (`waiting_user`)."""

        def write(connection: sqlite3.Connection) -> str:
            allowed = ("running",) if kind is TaskDeliveryKind.RESULT else ("running", "waiting_user")
            task = _live(connection, task_id, allowed)
            _set_task(
                connection, task, "completed" if kind is TaskDeliveryKind.RESULT else "failed", text, now
            )
            return _new_delivery(connection, task, kind, text, None, now)

        return await self.database.write(write)

    async def resume(self, task_id: str, now: datetime) -> TaskRecord:
        """An explicit resume: a new requirements version and execution attempt, running again."""

        def write(connection: sqlite3.Connection) -> TaskRecord:
            task = _task_where(connection, "task_id = ?", task_id)
            if task is None:
                raise TaskStateError("not_found", f"no task {task_id}")
            connection.execute(
                "UPDATE tasks SET requirements_version = requirements_version + 1, "
                "execution_attempt = execution_attempt + 1, status = 'running', cancel_requested = 0, "
                "outcome = NULL, revision = revision + 1, updated_at = ? WHERE task_id = ?",
                (rfc3339(now), task_id),
            )
            resumed = _task_where(connection, "task_id = ?", task_id)
            assert resumed is not None
            return resumed

        return await self.database.write(write)

    async def stop(self, task_id: str, now: datetime) -> StopOutcome:
        """Persist cancellation intent for the task and its descendants (never its siblings), and cancel
        their undelivered replies: pending ones fail with `cancelled`, submitted ones are marked pending
        cancellation; delivered replies and saved outcomes are unchanged."""

        def write(connection: sqlite3.Connection) -> StopOutcome:
            if _task_where(connection, "task_id = ?", task_id) is None:
                raise TaskStateError("not_found", f"no task {task_id}")
            tasks = [
                row[0]
                for row in connection.execute(
                    "WITH RECURSIVE tree(id) AS (SELECT ? UNION SELECT t.task_id FROM tasks t JOIN tree "
                    "ON t.parent_id = tree.id) SELECT id FROM tree ORDER BY id",
                    (task_id,),
                )
            ]
            stamp = rfc3339(now)
            marks = ",".join("?" * len(tasks))
            connection.execute(
                f"UPDATE tasks SET cancel_requested = 1, revision = revision + 1, updated_at = ? "
                f"WHERE task_id IN ({marks}) AND cancel_requested = 0",
                (stamp, *tasks),
            )
            cancelled = _ids(
                connection,
                f"SELECT delivery_id FROM task_deliveries WHERE task_id IN ({marks}) AND status = 'pending'",
                tasks,
            )
            connection.execute(
                f"UPDATE task_deliveries SET status = 'failed', failure_code = 'cancelled', "
                f"revision = revision + 1, updated_at = ? WHERE task_id IN ({marks}) AND status = 'pending'",
                (stamp, *tasks),
            )
            in_flight = _ids(
                connection,
                f"SELECT delivery_id FROM task_deliveries WHERE task_id IN ({marks}) AND status = 'submitted'",
                tasks,
            )
            connection.execute(
                f"UPDATE task_deliveries SET cancel_requested = 1, revision = revision + 1, updated_at = ? "
                f"WHERE task_id IN ({marks}) AND status = 'submitted' AND cancel_requested = 0",
                (stamp, *tasks),
            )
            return StopOutcome(tuple(tasks), tuple(cancelled), tuple(in_flight))

        return await self.database.write(write)

    # --- deliveries -------------------------------------------------------------------------------

    async def delivery(self, delivery_id: str) -> TaskDeliveryReceipt | None:
        return await self.database.read(lambda c: _delivery_where(c, "delivery_id = ?", delivery_id))

    async def deliveries(self, task_id: str) -> list[TaskDeliveryReceipt]:
        def read(connection: sqlite3.Connection) -> list[TaskDeliveryReceipt]:
            rows = connection.execute(
                f"SELECT {DELIVERY_COLUMNS} FROM task_deliveries WHERE task_id = ? ORDER BY created",
                (task_id,),
            ).fetchall()
            return [_receipt(row) for row in rows]

        return await self.database.read(read)

    async def pending(self) -> list[str]:
        """The deliveries waiting to be submitted, oldest first."""
        return await self.database.read(
            lambda c: _ids(
                c, "SELECT delivery_id FROM task_deliveries WHERE status = 'pending' ORDER BY created", []
            )
        )

    async def submit(self, delivery_id: str, now: datetime) -> tuple[TaskDeliveryReceipt, str] | None:
        """pending → submitted under a fresh turn ID (durable before the reply turn runs): the receipt and
        the task's text; None when the delivery is no longer pending."""

        def write(connection: sqlite3.Connection) -> tuple[TaskDeliveryReceipt, str] | None:
            changed = connection.execute(
                "UPDATE task_deliveries SET status = 'submitted', turn_id = ?, revision = revision + 1, "
                "updated_at = ? WHERE delivery_id = ? AND status = 'pending'",
                (_id("turn"), rfc3339(now), delivery_id),
            ).rowcount
            if not changed:
                return None
            receipt = _delivery_where(connection, "delivery_id = ?", delivery_id)
            (text,) = connection.execute(
                "SELECT text FROM task_deliveries WHERE delivery_id = ?", (delivery_id,)
            ).fetchone()
            assert receipt is not None
            return receipt, text

        return await self.database.write(write)

    async def settle(
        self, delivery_id: str, turn_id: str, text: str | None, now: datetime
    ) -> TaskDeliveryReceipt:
        """End the reply turn `turn_id`: with `text`, the reply appears in the main conversation and the
        delivery is delivered (unless a stop asked for its cancellation meanwhile: then it fails with
        `cancelled` and nothing appears); with None, the turn failed (`delivery_failed`)."""

        def write(connection: sqlite3.Connection) -> TaskDeliveryReceipt:
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
                seq = append_message(connection, self.main_session_id, "assistant", text, now, indexed=True)
                if row[3] is not None:
                    connection.execute(
                        "UPDATE messages SET question_id = ? WHERE session_id = ? AND seq = ?",
                        (row[3], self.main_session_id, seq),
                    )
                connection.execute(
                    "UPDATE task_deliveries SET status = 'delivered', history_seq = ?, revision = revision + 1, "
                    "updated_at = ? WHERE delivery_id = ?",
                    (seq, stamp, delivery_id),
                )
            receipt = _delivery_where(connection, "delivery_id = ?", delivery_id)
            assert receipt is not None
            return receipt

        return await self.database.write(write)

    async def retry(self, delivery_id: str, now: datetime) -> TaskDeliveryReceipt:
        """An explicit delivery retry: it first checks the original receipt. Delivered: recovered as it is.
        Submitted: refused (`outcome_unknown`), an unknown outcome blocks another attempt. Failed: pending
        again, to retry only the reply. Pending: unchanged."""

        def write(connection: sqlite3.Connection) -> TaskDeliveryReceipt:
            receipt = _delivery_where(connection, "delivery_id = ?", delivery_id)
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
                receipt = _delivery_where(connection, "delivery_id = ?", delivery_id)
                assert receipt is not None
            return receipt

        return await self.database.write(write)

    async def stop_reply(self, turn_id: str, now: datetime) -> TaskDeliveryReceipt:
        """Stop the main-conversation reply of exactly this turn: a submitted reply is marked for
        cancellation; a turn that already ended is left as it is (a late or retried stop never reaches a
        newer reply, which has another turn ID)."""

        def write(connection: sqlite3.Connection) -> TaskDeliveryReceipt:
            receipt = _delivery_where(connection, "turn_id = ?", turn_id)
            if receipt is None:
                raise TaskStateError("not_found", f"no reply turn {turn_id}")
            if receipt.status.value == "submitted":
                connection.execute(
                    "UPDATE task_deliveries SET cancel_requested = 1, revision = revision + 1, updated_at = ? "
                    "WHERE turn_id = ? AND cancel_requested = 0",
                    (rfc3339(now), turn_id),
                )
                receipt = _delivery_where(connection, "turn_id = ?", turn_id)
                assert receipt is not None
            return receipt

        return await self.database.write(write)

    # --- questions --------------------------------------------------------------------------------

    async def decide(
        self, question_id: str, status: UserQuestionStatus, answer: str | None, request_id: str, now: datetime
    ) -> QuestionDecision:
        """Save the owner's decision and update the original task (waiting → running once none of its
        questions is open). Idempotent by `request_id`; `question_already_decided` for another decision."""

        def write(connection: sqlite3.Connection) -> QuestionDecision:
            row = connection.execute(
                "SELECT task_id, status, answer, request_id, decided_at FROM questions WHERE question_id = ?",
                (question_id,),
            ).fetchone()
            if row is None:
                raise UserHostError(UserHostErrorCode.NOT_FOUND, f"no question {question_id}")
            task_id, saved, saved_answer, saved_request, decided_at = row
            used = connection.execute(
                "SELECT question_id FROM questions WHERE request_id = ?", (request_id,)
            ).fetchone()
            if used is not None and (
                used[0] != question_id or (saved, saved_answer) != (status.value, answer)
            ):
                raise UserHostError(
                    UserHostErrorCode.REQUEST_ID_CONFLICT,
                    f"request {request_id} was used for another decision",
                )
            if saved is not None:
                if saved_request == request_id:
                    return QuestionDecision(question_id, task_id, UserQuestionStatus(saved), decided_at, True)
                raise UserHostError(
                    UserHostErrorCode.QUESTION_ALREADY_DECIDED, f"question {question_id} is already {saved}"
                )
            stamp = rfc3339(now)
            connection.execute(
                "UPDATE questions SET status = ?, answer = ?, request_id = ?, decided_at = ? WHERE question_id = ?",
                (status.value, answer, request_id, stamp, question_id),
            )
            still_open = connection.execute(
                "SELECT 1 FROM questions WHERE task_id = ? AND status IS NULL", (task_id,)
            ).fetchone()
            connection.execute(
                "UPDATE tasks SET status = CASE WHEN status = 'waiting_user' AND ? THEN 'running' ELSE status END, "
                "revision = revision + 1, updated_at = ? WHERE task_id = ?",
                (still_open is None, stamp, task_id),
            )
            return QuestionDecision(question_id, task_id, status, stamp, False)

        return await self.database.write(write)

    # --- push ---------------------------------------------------------------------------------------

    async def register_push(
        self, device_id: str, provider: PushProvider, app_id: str, token: str, now: datetime
    ) -> PushRegisterResult:
        """Save the device's registration for `app_id`, replacing the device's previous one for it."""

        def write(connection: sqlite3.Connection) -> PushRegisterResult:
            registration_id, stamp = _id("push"), rfc3339(now)
            connection.execute(
                "DELETE FROM push_registrations WHERE device_id = ? AND app_id = ?", (device_id, app_id)
            )
            connection.execute(
                "INSERT INTO push_registrations VALUES (?, ?, ?, ?, ?, ?)",
                (registration_id, device_id, provider.value, app_id, token, stamp),
            )
            return PushRegisterResult(
                registration_id=registration_id, device_id=device_id, provider=provider, registered_at=stamp
            )

        return await self.database.write(write)

    async def unregister_push(self, device_id: str, registration_id: str) -> bool:
        """Remove the device's registration; False when the device has no such registration."""

        def write(connection: sqlite3.Connection) -> bool:
            return bool(
                connection.execute(
                    "DELETE FROM push_registrations WHERE registration_id = ? AND device_id = ?",
                    (registration_id, device_id),
                ).rowcount
            )

        return await self.database.write(write)


# --- helpers (on the writer's or the reader's thread) ----------------------------------------------------


def _ids(connection: sqlite3.Connection, sql: str, arguments: Sequence[Any]) -> list[str]:
    return [row[0] for row in connection.execute(sql, tuple(arguments))]


def _task_where(connection: sqlite3.Connection, where: str, *arguments: Any) -> TaskRecord | None:
    row = connection.execute(f"SELECT {TASK_COLUMNS} FROM tasks WHERE {where}", arguments).fetchone()
    if row is None:
        return None
    decisions = tuple(
        Decision(question_id, UserQuestionStatus(status), answer, decided_at)
        for question_id, status, answer, decided_at in connection.execute(
            "SELECT question_id, status, answer, decided_at FROM questions WHERE task_id = ? AND status "
            "IS NOT NULL ORDER BY decided_at, question_id",
            (row[0],),
        )
    )
    task_id, parent_id, session_id, request_id, version, attempt, status, cancel, outcome, revision = row
    return TaskRecord(
        task_id,
        parent_id,
        session_id,
        request_id,
        version,
        attempt,
        status,
        bool(cancel),
        outcome,
        revision,
        decisions,
    )


def _live(connection: sqlite3.Connection, task_id: str, allowed: Sequence[str]) -> TaskRecord:
    """The task, if it is in one of the `allowed` states and no stop asked for its cancellation."""
    task = _task_where(connection, "task_id = ?", task_id)
    if task is None:
        raise TaskStateError("not_found", f"no task {task_id}")
    if task.cancel_requested:
        raise TaskStateError("cancelled", f"task {task_id} was stopped")
    if task.status not in allowed:
        reason = "waiting_user" if task.status == "waiting_user" else "not_running"
        raise TaskStateError(reason, f"task {task_id} is {task.status}")
    return task


def _set_task(
    connection: sqlite3.Connection, task: TaskRecord, status: str, outcome: str | None, now: datetime
) -> None:
    connection.execute(
        "UPDATE tasks SET status = ?, outcome = coalesce(?, outcome), revision = revision + 1, updated_at = ? "
        "WHERE task_id = ?",
        (status, outcome, rfc3339(now), task.task_id),
    )


def _new_delivery(
    connection: sqlite3.Connection,
    task: TaskRecord,
    kind: TaskDeliveryKind,
    text: str,
    question_id: str | None,
    now: datetime,
) -> str:
    delivery_id = _id("dlv")
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


def _delivery_where(
    connection: sqlite3.Connection, where: str, *arguments: Any
) -> TaskDeliveryReceipt | None:
    row = connection.execute(
        f"SELECT {DELIVERY_COLUMNS} FROM task_deliveries WHERE {where}", arguments
    ).fetchone()
    return None if row is None else _receipt(row)


def _receipt(row: Sequence[Any]) -> TaskDeliveryReceipt:
    keys = DELIVERY_COLUMNS.split(", ")
    return TaskDeliveryReceipt.model_validate(dict(zip(keys, row, strict=True)))
