"""The task, delivery and question rules of the store (`sqlite/tasks.py`, `deliveries.py`, `questions.py`),
on a bare connection: dispatch idempotency, what a waiting or stopped task may do, the reply's delivery
states, and one decision per question."""

from __future__ import annotations

import pytest

from wuu.generated.models import TaskDeliveryKind, UserQuestionStatus
from wuu.host.userhost.personal.provider import TaskStateError
from wuu.host.userhost.personal.refusals import QuestionAlreadyDecided, QuestionNotFound, RequestIdConflict
from wuu.host.userhost.personal.sqlite import deliveries, questions, tasks

from .conftest import Store

RESULT, FAILURE = TaskDeliveryKind.RESULT, TaskDeliveryKind.FAILURE
ANSWERED, DISMISSED = UserQuestionStatus.ANSWERED, UserQuestionStatus.DISMISSED


def refused(reason: str) -> pytest.RaisesExc[TaskStateError]:
    return pytest.raises(TaskStateError, match=f"^{reason}: ")


def test_a_dispatch_request_id_creates_one_task(store: Store) -> None:
    first = tasks.create(store.connection, "dispatch-1", None, store.clock())
    again = tasks.create(store.connection, "dispatch-1", None, store.clock())
    assert again == first
    assert (first.status, first.requirements_version, first.execution_attempt) == ("running", 1, 1)
    assert first.session_id != store.main
    with refused("invalid_request_id"):
        tasks.create(store.connection, "not an id", None, store.clock())
    with refused("not_found"):
        tasks.create(store.connection, "dispatch-2", "task_unknown", store.clock())
    assert store.count("tasks") == 1


def test_a_waiting_task_cannot_complete_but_may_fail(store: Store) -> None:
    task = tasks.create(store.connection, "dispatch-1", None, store.clock())
    tasks.ask(store.connection, task.task_id, "Which city?", store.clock())
    with refused("waiting_user"):
        tasks.finish(store.connection, task.task_id, RESULT, "Booked", store.clock())
    tasks.finish(store.connection, task.task_id, FAILURE, "No answer", store.clock())
    ended = tasks.task_where(store.connection, "task_id = ?", task.task_id)
    assert ended is not None and (ended.status, ended.outcome) == ("failed", "No answer")
    with refused("not_running"):
        tasks.finish(store.connection, task.task_id, FAILURE, "again", store.clock())


def test_a_stop_reaches_descendants_and_their_replies_but_no_sibling(store: Store) -> None:
    parent = tasks.create(store.connection, "parent", None, store.clock())
    child = tasks.create(store.connection, "child", parent.task_id, store.clock())
    sibling = tasks.create(store.connection, "sibling", None, store.clock())
    pending = tasks.finish(store.connection, child.task_id, RESULT, "done", store.clock())
    untouched = tasks.finish(store.connection, sibling.task_id, RESULT, "done", store.clock())
    outcome = tasks.stop(store.connection, parent.task_id, store.clock())
    assert set(outcome.tasks) == {parent.task_id, child.task_id}
    assert (outcome.cancelled, outcome.pending_cancellation) == ((pending,), ())
    assert deliveries.pending(store.connection) == [untouched]
    with refused("cancelled"):
        tasks.create(store.connection, "grandchild", child.task_id, store.clock())
    with refused("cancelled"):
        tasks.ask(store.connection, parent.task_id, "still there?", store.clock())
    with refused("cancelled"):
        deliveries.retry(store.connection, pending, store.clock())
    resumed = tasks.resume(store.connection, parent.task_id, store.clock())
    assert (resumed.status, resumed.cancel_requested, resumed.execution_attempt) == ("running", False, 2)


def test_a_reply_is_delivered_once_by_the_turn_in_flight(store: Store) -> None:
    task = tasks.create(store.connection, "dispatch-1", None, store.clock())
    delivery = tasks.finish(store.connection, task.task_id, RESULT, "Booked", store.clock())
    submitted = deliveries.submit(store.connection, delivery, store.clock())
    assert submitted is not None
    receipt, text = submitted
    assert (receipt.status.value, text) == ("submitted", "Booked")
    assert deliveries.submit(store.connection, delivery, store.clock()) is None
    with refused("outcome_unknown"):
        deliveries.retry(store.connection, delivery, store.clock())
    with refused("stale_turn"):
        deliveries.settle(store.connection, store.main, delivery, "turn_other", "Booked", store.clock())
    assert receipt.turn_id is not None
    settled = deliveries.settle(
        store.connection, store.main, delivery, receipt.turn_id, "Booked", store.clock()
    )
    assert (settled.status.value, settled.history_seq) == ("delivered", 1)
    assert deliveries.retry(store.connection, delivery, store.clock()) == settled


def test_a_stopped_turn_fails_its_reply_and_nothing_appears(store: Store) -> None:
    task = tasks.create(store.connection, "dispatch-1", None, store.clock())
    delivery = tasks.finish(store.connection, task.task_id, RESULT, "Booked", store.clock())
    submitted = deliveries.submit(store.connection, delivery, store.clock())
    assert submitted is not None and submitted[0].turn_id is not None
    turn = submitted[0].turn_id
    deliveries.stop_reply(store.connection, turn, store.clock())
    settled = deliveries.settle(store.connection, store.main, delivery, turn, "Booked", store.clock())
    assert (settled.status.value, settled.failure_code) == ("failed", "cancelled")
    assert store.count("messages") == 0
    # The task itself was not stopped: its cancelled reply may be retried.
    assert deliveries.retry(store.connection, delivery, store.clock()).status.value == "pending"


def test_a_question_takes_one_decision_replayed_by_its_request_id(store: Store) -> None:
    task = tasks.create(store.connection, "dispatch-1", None, store.clock())
    question, _ = tasks.ask(store.connection, task.task_id, "Which city?", store.clock())
    other, _ = tasks.ask(store.connection, task.task_id, "Which day?", store.clock())
    with pytest.raises(QuestionNotFound, match=r"^no question q_unknown$"):
        questions.decide(store.connection, "q_unknown", ANSWERED, "Lisbon", "d-1", store.clock())
    first = questions.decide(store.connection, question, ANSWERED, "Lisbon", "d-1", store.clock())
    again = questions.decide(store.connection, question, ANSWERED, "Lisbon", "d-1", store.clock())
    assert (first.replayed, again.replayed, again.decided_at) == (False, True, first.decided_at)
    with pytest.raises(QuestionAlreadyDecided, match=f"^question {question} is already answered$"):
        questions.decide(store.connection, question, DISMISSED, None, "d-2", store.clock())
    with pytest.raises(RequestIdConflict, match=r"^request d-1 was used for another decision$"):
        questions.decide(store.connection, other, DISMISSED, None, "d-1", store.clock())
    waiting = tasks.task_where(store.connection, "task_id = ?", task.task_id)
    assert waiting is not None and waiting.status == "waiting_user"  # the other question is still open
    questions.decide(store.connection, other, DISMISSED, None, "d-3", store.clock())
    running = tasks.task_where(store.connection, "task_id = ?", task.task_id)
    assert running is not None and running.status == "running"
    assert [decision.status for decision in running.decisions] == [ANSWERED, DISMISSED]
