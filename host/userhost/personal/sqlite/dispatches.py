"""Dispatched background tasks in the bundled store (spec/schema/userhost/tasks.schema.json): the task, its hidden
session and its run record created in one transaction, the run's moves, and the completion that checks the
run's evidence in the transaction that saves the result."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from wuu.generated.models import TaskDeliveryKind

from ..dispatch_ledger import CardOutcome, Dispatch, NewDispatch, RunStatus, TaskState
from ..provider import TaskStateError
from ..stamps import rfc3339
from . import tasks
from .messages import append_message

DISPATCH_COLUMNS = (
    "task_id, instructions, origin_input, model, provider, grant_id, grant_expires_at, execution_attempt, "
    "run_status, run_note"
)


def dispatch(connection: sqlite3.Connection, new: NewDispatch, now: datetime) -> tuple[Dispatch, bool]:
    """The task, its session with the instructions as its first user message, and its queued run."""
    found = dispatched(connection, new.request_id)
    if found is not None:
        return found, True
    if tasks.task_where(connection, "request_id = ?", new.request_id) is not None:
        raise TaskStateError(
            "request_id_conflict", f"request {new.request_id} names a task that was not dispatched"
        )
    stamp = rfc3339(now)
    connection.execute("INSERT INTO sessions VALUES (?, 'task', ?)", (new.session_id, stamp))
    connection.execute(
        "INSERT INTO tasks VALUES (?, NULL, ?, ?, 1, 1, 'running', 0, NULL, 1, ?)",
        (new.task_id, new.session_id, new.request_id, stamp),
    )
    append_message(connection, new.session_id, "user", new.instructions, now)
    connection.execute(
        f"INSERT INTO task_dispatches ({DISPATCH_COLUMNS}, cards_after, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, 1, 'queued', NULL, 0, ?)",
        (
            new.task_id,
            new.instructions,
            new.origin_input,
            new.model,
            new.provider,
            new.grant_id,
            new.grant_expires_at,
            stamp,
        ),
    )
    made = dispatch_of(connection, new.task_id)
    assert made is not None
    return made, False


def dispatched(connection: sqlite3.Connection, request_id: str) -> Dispatch | None:
    row = connection.execute("SELECT task_id FROM tasks WHERE request_id = ?", (request_id,)).fetchone()
    return None if row is None else dispatch_of(connection, row[0])


def dispatch_of(connection: sqlite3.Connection, task_id: str) -> Dispatch | None:
    row = connection.execute(
        f"SELECT {DISPATCH_COLUMNS} FROM task_dispatches WHERE task_id = ?", (task_id,)
    ).fetchone()
    return None if row is None else _dispatch(connection, row)


def active(connection: sqlite3.Connection) -> list[Dispatch]:
    rows = connection.execute(
        f"SELECT {DISPATCH_COLUMNS} FROM task_dispatches WHERE run_status IN ('queued', 'running', 'awaiting') "
        "ORDER BY updated_at, task_id"
    ).fetchall()
    return [_dispatch(connection, row) for row in rows]


def move_run(
    connection: sqlite3.Connection,
    task_id: str,
    attempt: int,
    allowed: frozenset[str],
    to: RunStatus,
    note: str | None,
    now: datetime,
) -> bool:
    marks = ",".join("?" * len(allowed))
    moved = connection.execute(
        f"UPDATE task_dispatches SET run_status = ?, run_note = coalesce(?, run_note), updated_at = ? "
        f"WHERE task_id = ? AND execution_attempt = ? AND run_status IN ({marks})",
        (to, note, rfc3339(now), task_id, attempt, *sorted(allowed)),
    )
    return moved.rowcount == 1


def cards(connection: sqlite3.Connection, task_id: str) -> list[CardOutcome]:
    """The cards of the task's current execution attempt (those made since its dispatch or its resume)."""
    rows = connection.execute(
        "SELECT card_id, status, summary FROM approval_cards WHERE task_id = ? AND id > "
        "(SELECT cards_after FROM task_dispatches WHERE task_id = ?) ORDER BY id",
        (task_id, task_id),
    ).fetchall()
    return [CardOutcome(*row) for row in rows]


def complete(connection: sqlite3.Connection, task_id: str, attempt: int, text: str, now: datetime) -> str:
    """The result, saved only on the run's evidence: its run still open and every card it made succeeded."""
    found = dispatch_of(connection, task_id)
    if found is None or found.execution_attempt != attempt or found.run_status not in ("running", "awaiting"):
        raise TaskStateError("no_execution_evidence", f"task {task_id} has no open run of attempt {attempt}")
    unsuccessful = [card for card in cards(connection, task_id) if card.status != "succeeded"]
    if unsuccessful:
        listed = ", ".join(f"{card.card_id} {card.status}" for card in unsuccessful)
        raise TaskStateError(
            "no_execution_evidence", f"task {task_id}'s effects did not all succeed: {listed}"
        )
    delivery = tasks.finish(connection, task_id, TaskDeliveryKind.RESULT, text, now)
    move_run(connection, task_id, attempt, frozenset({"running", "awaiting"}), "succeeded", None, now)
    return delivery


def fail(
    connection: sqlite3.Connection, task_id: str, attempt: int, run: RunStatus, text: str, now: datetime
) -> str | None:
    """The run ends `run`; the task fails with `text` unless it was stopped (its replies are cancelled then)."""
    move_run(connection, task_id, attempt, frozenset({"queued", "running", "awaiting"}), run, text, now)
    task = tasks.task_where(connection, "task_id = ?", task_id)
    if task is None or task.cancel_requested or task.status not in ("running", "waiting_user"):
        return None
    return tasks.finish(connection, task_id, TaskDeliveryKind.FAILURE, text, now)


def redispatch(
    connection: sqlite3.Connection, task_id: str, version: int, grant_id: str, expires_at: str, now: datetime
) -> Dispatch:
    """An explicit resume of a dispatched task at requirements version `version`: the task's next requirements
    version and execution attempt, under the new grant, with a queued run. TaskStateError `stale_revision` when
    the task is no longer at `version` (another resume came first)."""
    found = dispatch_of(connection, task_id)
    if found is None:
        raise TaskStateError("not_found", f"task {task_id} was not dispatched")
    if found.task.requirements_version != version:
        raise TaskStateError(
            "stale_revision", f"task {task_id} is at requirements version {found.task.requirements_version}"
        )
    resumed = tasks.resume(connection, task_id, now)
    connection.execute(
        "UPDATE task_dispatches SET grant_id = ?, grant_expires_at = ?, execution_attempt = ?, "
        "run_status = 'queued', run_note = NULL, cards_after = (SELECT coalesce(max(id), 0) FROM approval_cards), "
        "updated_at = ? WHERE task_id = ?",
        (grant_id, expires_at, resumed.execution_attempt, rfc3339(now), task_id),
    )
    made = dispatch_of(connection, task_id)
    assert made is not None
    return made


def recover(connection: sqlite3.Connection, now: datetime) -> list[str]:
    """Runs left `running` by a host that stopped: awaiting their cards, or queued again without any."""
    running = [
        row[0]
        for row in connection.execute("SELECT task_id FROM task_dispatches WHERE run_status = 'running'")
    ]
    for task_id in running:
        made = cards(connection, task_id)
        connection.execute(
            "UPDATE task_dispatches SET run_status = ?, updated_at = ? WHERE task_id = ?",
            ("awaiting" if made else "queued", rfc3339(now), task_id),
        )
    return running


def _dispatch(connection: sqlite3.Connection, row: Sequence[Any]) -> Dispatch:
    task_id, instructions, origin, model, provider, grant_id, expires_at, attempt, run_status, run_note = row
    found = tasks.task_where(connection, "task_id = ?", task_id)
    assert found is not None
    task = TaskState(
        found.task_id, found.session_id, found.request_id, found.requirements_version, found.execution_attempt,
        found.status, found.cancel_requested,
    )  # fmt: skip
    return Dispatch(
        task, instructions, origin, model, provider, grant_id, expires_at, attempt, run_status, run_note
    )
