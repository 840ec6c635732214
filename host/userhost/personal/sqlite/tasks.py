"""Hidden tasks in the bundled store: their creation by dispatch request ID, the waiting-user question, the
saved outcome, explicit resume and the stop that reaches every descendant
(spec/schema/receipts/task_delivery.schema.json, spec/schema/userhost/questions.schema.json).

Each function runs on the database's writer, checked against the stored state in the transaction that
writes, so the races those schemas rule out resolve by commit order: an answer and a result submitted at
once cannot both apply to a waiting task.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from wuu.generated.models import TaskDeliveryKind, UserQuestionStatus

from ..provider import Decision, StopOutcome, TaskRecord, TaskStateError
from ..stamps import rfc3339
from .deliveries import new_delivery
from .sessions import new_id

REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""A business request ID (the receipts' `request_id` rule)."""
TASK_COLUMNS = (
    "task_id, parent_id, session_id, request_id, requirements_version, execution_attempt, status, "
    "cancel_requested, outcome, revision"
)


def create(
    connection: sqlite3.Connection, request_id: str, parent_id: str | None, now: datetime
) -> TaskRecord:
    """A new hidden task with its own session, requirements version 1 and attempt 1; the existing task when
    its dispatch `request_id` is known (automatic recovery keeps the request identity). TaskStateError
    `invalid_request_id`, or `not_found` / `cancelled` for a parent that is unknown or stopped."""
    found = task_where(connection, "request_id = ?", request_id)
    if found is not None:
        return found
    if not REQUEST_ID.fullmatch(request_id):
        raise TaskStateError("invalid_request_id", f"{request_id!r} is not a business request ID")
    if parent_id is not None:
        parent = task_where(connection, "task_id = ?", parent_id)
        if parent is None:
            raise TaskStateError("not_found", f"no parent task {parent_id}")
        if parent.cancel_requested:  # the stop's intent covers descendant work started later
            raise TaskStateError("cancelled", f"parent task {parent_id} was stopped")
    task_id, session_id, stamp = new_id("task"), new_id("ses_task"), rfc3339(now)
    connection.execute("INSERT INTO sessions VALUES (?, 'task', ?)", (session_id, stamp))
    connection.execute(
        "INSERT INTO tasks VALUES (?, ?, ?, ?, 1, 1, 'running', 0, NULL, 1, ?)",
        (task_id, parent_id, session_id, request_id, stamp),
    )
    task = task_where(connection, "task_id = ?", task_id)
    assert task is not None
    return task


def ask(connection: sqlite3.Connection, task_id: str, text: str, now: datetime) -> tuple[str, str]:
    """The running task waits for the owner: a question and its own delivery. (question, delivery)."""
    task = _live(connection, task_id, ("running", "waiting_user"))
    question_id = new_id("q")
    connection.execute(
        "INSERT INTO questions (question_id, task_id, text) VALUES (?, ?, ?)", (question_id, task_id, text)
    )
    _set_task(connection, task, "waiting_user", None, now)
    return question_id, new_delivery(connection, task, TaskDeliveryKind.QUESTION, text, question_id, now)


def finish(
    connection: sqlite3.Connection, task_id: str, kind: TaskDeliveryKind, text: str, now: datetime
) -> str:
    """Persist the task's result (completion evidence) or failure and queue its reply; the delivery. A task
    waiting for the owner's answer cannot complete (TaskStateError `waiting_user`)."""
    allowed = ("running",) if kind is TaskDeliveryKind.RESULT else ("running", "waiting_user")
    task = _live(connection, task_id, allowed)
    _set_task(connection, task, "completed" if kind is TaskDeliveryKind.RESULT else "failed", text, now)
    return new_delivery(connection, task, kind, text, None, now)


def resume(connection: sqlite3.Connection, task_id: str, now: datetime) -> TaskRecord:
    """An explicit resume: a new requirements version and execution attempt, running again."""
    if task_where(connection, "task_id = ?", task_id) is None:
        raise TaskStateError("not_found", f"no task {task_id}")
    connection.execute(
        "UPDATE tasks SET requirements_version = requirements_version + 1, "
        "execution_attempt = execution_attempt + 1, status = 'running', cancel_requested = 0, "
        "outcome = NULL, revision = revision + 1, updated_at = ? WHERE task_id = ?",
        (rfc3339(now), task_id),
    )
    resumed = task_where(connection, "task_id = ?", task_id)
    assert resumed is not None
    return resumed


def stop(connection: sqlite3.Connection, task_id: str, now: datetime) -> StopOutcome:
    """Persist cancellation intent for the task and its descendants (never its siblings), and cancel their
    undelivered replies: pending ones fail with `cancelled`, submitted ones are marked pending cancellation;
    delivered replies and saved outcomes are unchanged."""
    if task_where(connection, "task_id = ?", task_id) is None:
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


def task_where(connection: sqlite3.Connection, where: str, *arguments: Any) -> TaskRecord | None:
    """The task the condition on `tasks` finds, with the owner's saved decisions on its questions."""
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
    task = task_where(connection, "task_id = ?", task_id)
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


def _ids(connection: sqlite3.Connection, sql: str, arguments: Sequence[Any]) -> list[str]:
    return [row[0] for row in connection.execute(sql, tuple(arguments))]
