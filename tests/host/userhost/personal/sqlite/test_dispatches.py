"""Dispatched tasks in the bundled store on a bare SQLite file (spec/schema/userhost/tasks.schema.json): the task,
its hidden session and its queued run made in one step and once per request ID, completion only on the evidence
of the run's cards, and recovery after a restart that never runs an agent again once it made a card."""

from __future__ import annotations

import pytest

from wuu.host.userhost.personal.dispatch_ledger import NewDispatch
from wuu.host.userhost.personal.provider import TaskStateError
from wuu.host.userhost.personal.sqlite import approvals, dispatches

from .conftest import Store
from .test_approvals import new_card

NEW = NewDispatch(
    "task_1", "ses_task_1", "task-req-1", "/write notes/x.txt\nx", None, "stand-in", "native",
    "grant_1", "2026-03-01T13:00:00.000000Z",
)  # fmt: skip
OPEN = frozenset({"queued", "running", "awaiting"})


def test_a_dispatch_is_made_once_per_request_id(store: Store) -> None:
    made, existed = dispatches.dispatch(store.connection, NEW, store.clock())
    again, existed_again = dispatches.dispatch(store.connection, NEW, store.clock())
    assert (existed, existed_again) == (False, True) and again == made
    assert (made.run_status, made.task.status, made.task.session_id) == ("queued", "running", "ses_task_1")
    first = store.connection.execute("SELECT role, text FROM messages WHERE session_id = 'ses_task_1'")
    assert first.fetchall() == [("user", NEW.instructions)]


def test_completion_needs_every_card_of_the_run_to_have_succeeded(store: Store) -> None:
    dispatches.dispatch(store.connection, NEW, store.clock())
    with pytest.raises(TaskStateError) as refused:
        dispatches.complete(store.connection, "task_1", 1, "done", store.clock())
    assert refused.value.reason == "no_execution_evidence"  # the run was never taken
    dispatches.move_run(store.connection, "task_1", 1, OPEN, "awaiting", None, store.clock())
    card, _ = approvals.create(
        store.connection,
        store.main,
        "card_" + "1" * 32,
        new_card(store, source="task", task_id="task_1"),
        store.clock(),
    )
    with pytest.raises(TaskStateError):
        dispatches.complete(store.connection, "task_1", 1, "done", store.clock())  # its card still waits
    for status in ("approved", "running", "succeeded"):
        approvals.move(store.connection, card.card.card_id, approvals.ApprovalStatus(status), store.clock())
    assert dispatches.complete(store.connection, "task_1", 1, "done", store.clock())
    done = dispatches.dispatch_of(store.connection, "task_1")
    assert done is not None and (done.run_status, done.task.status) == ("succeeded", "completed")


def test_a_run_cut_by_a_restart_awaits_its_cards_or_runs_again_without_any(store: Store) -> None:
    dispatches.dispatch(store.connection, NEW, store.clock())
    other = NewDispatch(
        **{**NEW.__dict__, "task_id": "task_2", "session_id": "ses_task_2", "request_id": "req-2"}
    )
    dispatches.dispatch(store.connection, other, store.clock())
    for task_id in ("task_1", "task_2"):
        dispatches.move_run(store.connection, task_id, 1, OPEN, "running", None, store.clock())
    approvals.create(
        store.connection,
        store.main,
        "card_" + "1" * 32,
        new_card(store, source="task", task_id="task_1"),
        store.clock(),
    )
    assert sorted(dispatches.recover(store.connection, store.clock())) == ["task_1", "task_2"]
    runs = {d.task.task_id: d.run_status for d in dispatches.active(store.connection)}
    assert runs == {"task_1": "awaiting", "task_2": "queued"}
