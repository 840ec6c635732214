"""Hidden tasks and the durable delivery of their replies, through the embedding API (`space.plugin.tasks`,
a `TaskBoard`), the store's file and the main conversation's history over a real client
(spec/schema/receipts/task_delivery.schema.json).

Covered: a task runs in a hidden session of its own (never the main one, never readable as a conversation)
and creation is idempotent by its dispatch request ID; a result, a failure and a question each reach the
main conversation through a receipt `pending → submitted → delivered` (exact `TaskDeliveryReceipt` JSON,
rows, history: an assistant message at `history_seq`, a question's carrying its `question_id`); completion
is not delivery (a held reply turn leaves a completed task's receipt submitted); a reply turn that raises
fails the delivery with `delivery_failed`; explicit retry recovers a delivered reply unchanged, refuses a
submitted one (`outcome_unknown`), leaves a pending one as it is and requeues a failed one (the reply
only: the task and its attempt are unchanged); a stop persists cancellation intent for the task and its
descendants, never a sibling or an ancestor, fails their pending replies with `cancelled`, marks a reply in
flight "pending cancellation" (it fails `cancelled` when its turn ends, nothing appears) and later work of
the stopped tasks is refused, also for a descendant created after the stop; stopping a completed or
failed task cancels only its undelivered reply and keeps its outcome, a delivered reply is unchanged;
`stop_reply` needs the exact turn ID (a delayed stop of an old turn never hits the retry's new turn);
resume creates a new requirements version and attempt that new deliveries carry; the refusals of unknown
or ended tasks; after a host restart a submitted receipt stays submitted (unknown outcome) and pending
ones are delivered.

Every reply turn here is `ReplyTurns`: it can hold each turn until the test releases it, which puts a
delivery in `submitted` deterministically. The clock is held: every stamp is the moment the test set.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.helpers import until
from tests.host.userhost.personal.conftest import Attach, Clock, Space, StartSpace, call, error, result
from wuu.generated.models import TaskDeliveryReceipt
from wuu.generated.models import UserHostErrorCode as Code
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal.provider import StopOutcome, TaskRecord, TaskStateError
from wuu.host.userhost.personal.tasks import TaskBoard

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TURN = re.compile(r"^turn_[0-9a-f]{24}$")


class ReplyTurns:
    """The reply turn of these tests: records every turn it is given; while `held`, a turn waits until
    the test releases it; `failures` turns raise (the turn failed) before any succeeds."""

    def __init__(self) -> None:
        self.held = False
        self.failures = 0
        self.started: list[TaskDeliveryReceipt] = []
        self._gates: dict[str, asyncio.Event] = {}

    async def __call__(self, receipt: TaskDeliveryReceipt, text: str) -> str:
        self.started.append(receipt)
        if self.held:
            assert receipt.turn_id is not None
            gate = self._gates[receipt.turn_id] = asyncio.Event()
            await gate.wait()
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the reply turn failed")
        return text

    def release(self, turn_id: str | None) -> None:
        assert turn_id is not None
        self._gates[turn_id].set()

    def release_all(self) -> None:
        self.held = False
        for gate in self._gates.values():
            gate.set()

    async def wait_started(self, count: int) -> TaskDeliveryReceipt:
        """The `count`-th turn, once it has started (its receipt is then submitted in the store)."""
        await until(lambda: len(self.started) >= count, f"reply turn {count} to start")
        return self.started[count - 1]


def at(clock: Clock, second: int) -> str:
    """Set the held clock to 12:00:<second>; the stamp the store writes for it."""
    clock.now = START + timedelta(seconds=second)
    return f"2026-03-01T12:00:{second:02d}.000000Z"


@pytest.fixture
def clock() -> Clock:
    """The conftest's clock, held: every reading is the moment the test set."""
    held = Clock()
    held.step = timedelta(0)
    return held


@pytest.fixture
def turns() -> ReplyTurns:
    return ReplyTurns()


@pytest.fixture
async def space(start_space: StartSpace, turns: ReplyTurns) -> Space:
    """The Personal host of these tests, its reply turns being `turns` (the conftest's client uses it)."""
    return await start_space(reply_turn=turns)


def tasks_of(space: Space) -> TaskBoard:
    board = space.plugin.tasks
    assert board is not None
    return board


def wire(
    space: Space,
    task: TaskRecord,
    delivery_id: str,
    kind: str,
    status: str,
    revision: int,
    updated: str,
    **more: Any,
) -> dict[str, Any]:
    """The exact `TaskDeliveryReceipt` JSON expected of a delivery of `task` (turn, sequence and failure
    code null unless given)."""
    expected: dict[str, Any] = {
        "delivery_id": delivery_id,
        "task_id": task.task_id,
        "requirements_version": task.requirements_version,
        "execution_attempt": task.execution_attempt,
        "request_id": task.request_id,
        "kind": kind,
        "session_id": space.main,
        "status": status,
        "turn_id": None,
        "history_seq": None,
        "failure_code": None,
        "revision": revision,
        "updated_at": updated,
    }
    expected.update(more)
    return expected


async def receipt_of(space: Space, delivery_id: str) -> dict[str, Any]:
    """A delivery's receipt as the board reports it (the task's receipts, looked up by delivery)."""
    (task_id,) = space.rows("SELECT task_id FROM task_deliveries WHERE delivery_id = ?", delivery_id)[0]
    for receipt in await tasks_of(space).deliveries(task_id):
        if receipt.delivery_id == delivery_id:
            found: dict[str, Any] = receipt.to_wire()
            return found
    raise AssertionError(f"no receipt {delivery_id}")


def delivery_row(space: Space, delivery_id: str) -> tuple[Any, ...]:
    """(status, turn_id, history_seq, failure_code, cancel_requested, revision) in the store's file."""
    return space.rows(
        "SELECT status, turn_id, history_seq, failure_code, cancel_requested, revision FROM task_deliveries "
        "WHERE delivery_id = ?",
        delivery_id,
    )[0]


def task_row(space: Space, task_id: str) -> tuple[Any, ...]:
    """(status, cancel_requested, outcome, requirements_version, execution_attempt) in the store's file."""
    return space.rows(
        "SELECT status, cancel_requested, outcome, requirements_version, execution_attempt FROM tasks "
        "WHERE task_id = ?",
        task_id,
    )[0]


async def history(client: UserHostClient, session_id: str) -> list[dict[str, Any]]:
    """The main conversation's visible messages, newest first, as a client reads them."""
    messages: list[dict[str, Any]] = result(
        await call(client, "agents.history.read", {"session_id": session_id})
    )["messages"]
    return messages


def reply(seq: int, text: str, created: str, question_id: str | None = None) -> dict[str, Any]:
    """A delivered reply as `agents.history.read` shows it."""
    message: dict[str, Any] = {
        "message_seq": seq,
        "role": "assistant",
        "text": text,
        "created_at": created,
        "reaction_eligible": True,
        "reactions": {"revision": 0},
        "attachments": [],
    }
    if question_id is not None:
        message["question_id"] = question_id
    return message


def turns_id(receipt: TaskDeliveryReceipt) -> str:
    """The receipt's turn ID, checked to be one the host assigned."""
    assert receipt.turn_id is not None and TURN.fullmatch(receipt.turn_id), receipt.turn_id
    return receipt.turn_id


async def refused(work: Awaitable[object], reason: str) -> None:
    with pytest.raises(TaskStateError) as raised:
        await work
    assert raised.value.reason == reason, raised.value


# --- the task and its session -----------------------------------------------------------------------------


async def test_a_task_runs_in_a_hidden_session_of_its_own_and_create_is_idempotent(
    space: Space, client: UserHostClient
) -> None:
    board = tasks_of(space)
    task = await board.create("dispatch-1")
    assert task == TaskRecord(
        task_id=task.task_id,
        parent_id=None,
        session_id=task.session_id,
        request_id="dispatch-1",
        requirements_version=1,
        execution_attempt=1,
        status="running",
        cancel_requested=False,
        outcome=None,
        revision=1,
        decisions=(),
    )
    assert task.session_id != space.main
    assert sorted(space.rows("SELECT session_id, kind FROM sessions")) == sorted(
        [(space.main, "main"), (task.session_id, "task")]
    )
    # The task's session is no conversation a client reads.
    error(
        await call(client, "agents.history.read", {"session_id": task.session_id}),
        Code.NOT_FOUND,
    )
    # Automatic recovery of the same dispatch gets the same task, nothing new.
    assert await board.create("dispatch-1") == task
    assert space.count("sessions") == 2 and space.count("tasks") == 1
    assert await board.task(task.task_id) == task


async def test_a_delivered_question_is_an_assistant_message_carrying_its_question_id(
    space: Space, client: UserHostClient
) -> None:
    board = tasks_of(space)
    task = await board.create("dispatch-1")
    asked = at(space.clock, 1)
    question_id = await board.ask(task.task_id, "Which city?")
    await space.idle()
    (receipt,) = await board.deliveries(task.task_id)
    waiting = await board.task(task.task_id)
    assert waiting is not None and (waiting.status, waiting.revision) == ("waiting_user", 2)
    assert receipt.to_wire() == wire(
        space,
        task,
        receipt.delivery_id,
        "question",
        "delivered",
        3,
        asked,
        turn_id=turns_id(receipt),
        history_seq=1,
    )
    assert await history(client, space.main) == [reply(1, "Which city?", asked, question_id)]
    assert space.rows("SELECT question_id, task_id, text, status FROM questions") == [
        (question_id, task.task_id, "Which city?", None)
    ]
    # Nothing was written to the task's own session, and the main one only has the delivered reply.
    assert space.rows("SELECT session_id, seq FROM messages") == [(space.main, 1)]


# --- completion and delivery ------------------------------------------------------------------------------


async def test_a_result_goes_pending_then_submitted_then_delivered_and_completion_is_not_delivery(
    space: Space, client: UserHostClient, turns: ReplyTurns
) -> None:
    board = tasks_of(space)
    turns.held = True
    blocker = await board.create("dispatch-blocker")
    at(space.clock, 1)
    await board.complete(blocker.task_id, "Blocker done")
    first = await turns.wait_started(1)  # the runner is busy with this turn: later replies stay pending

    task = await board.create("dispatch-1")
    completed_at = at(space.clock, 2)
    delivery_id = await board.complete(task.task_id, "The table is booked")
    done = await board.task(task.task_id)
    assert done is not None
    assert (done.status, done.outcome, done.revision, done.execution_attempt) == (
        "completed",
        "The table is booked",
        2,
        1,
    )
    assert await receipt_of(space, delivery_id) == wire(
        space, task, delivery_id, "result", "pending", 1, completed_at
    )
    assert delivery_row(space, delivery_id) == ("pending", None, None, None, 0, 1)

    submitted_at = at(space.clock, 3)
    turns.release(first.turn_id)
    second = await turns.wait_started(2)
    assert second.delivery_id == delivery_id
    turn_id = turns_id(second)
    # Completed, yet its reply has not appeared: the turn is in flight.
    assert await receipt_of(space, delivery_id) == wire(
        space, task, delivery_id, "result", "submitted", 2, submitted_at, turn_id=turn_id
    )
    assert second.to_wire() == await receipt_of(space, delivery_id)
    assert task_row(space, task.task_id) == ("completed", 0, "The table is booked", 1, 1)
    assert await history(client, space.main) == [reply(1, "Blocker done", submitted_at)]

    delivered_at = at(space.clock, 4)
    turns.release(turn_id)
    await space.idle()
    assert await receipt_of(space, delivery_id) == wire(
        space, task, delivery_id, "result", "delivered", 3, delivered_at, turn_id=turn_id, history_seq=2
    )
    assert delivery_row(space, delivery_id) == ("delivered", turn_id, 2, None, 0, 3)
    assert await history(client, space.main) == [
        reply(2, "The table is booked", delivered_at),
        reply(1, "Blocker done", submitted_at),
    ]
    assert await board.task(task.task_id) == done  # delivery changes the receipt, never the task


async def test_a_failure_is_saved_and_its_failure_reply_delivered(
    space: Space, client: UserHostClient
) -> None:
    board = tasks_of(space)
    task = await board.create("dispatch-1")
    failed_at = at(space.clock, 1)
    delivery_id = await board.fail(task.task_id, "The restaurant is closed")
    await space.idle()
    assert task_row(space, task.task_id) == ("failed", 0, "The restaurant is closed", 1, 1)
    receipt = await receipt_of(space, delivery_id)
    assert receipt == wire(
        space,
        task,
        delivery_id,
        "failure",
        "delivered",
        3,
        failed_at,
        turn_id=receipt["turn_id"],
        history_seq=1,
    )
    assert await history(client, space.main) == [reply(1, "The restaurant is closed", failed_at)]


async def test_a_reply_turn_that_raises_fails_the_delivery_and_a_retry_redelivers_only_the_reply(
    space: Space, client: UserHostClient, turns: ReplyTurns
) -> None:
    board = tasks_of(space)
    turns.failures = 1
    task = await board.create("dispatch-1")
    failed_at = at(space.clock, 1)
    delivery_id = await board.complete(task.task_id, "Done")
    await space.idle()
    first_turn = turns_id(turns.started[0])
    assert await receipt_of(space, delivery_id) == wire(
        space,
        task,
        delivery_id,
        "result",
        "failed",
        3,
        failed_at,
        turn_id=first_turn,
        failure_code="delivery_failed",
    )
    assert await history(client, space.main) == []
    saved = await board.task(task.task_id)
    assert saved is not None and (saved.status, saved.outcome) == ("completed", "Done")

    retried_at = at(space.clock, 2)
    retried = await board.retry_delivery(delivery_id)
    assert retried.to_wire() == wire(space, task, delivery_id, "result", "pending", 4, retried_at)
    await space.idle()
    assert len(turns.started) == 2
    second_turn = turns_id(turns.started[1])
    assert second_turn != first_turn
    assert await receipt_of(space, delivery_id) == wire(
        space, task, delivery_id, "result", "delivered", 6, retried_at, turn_id=second_turn, history_seq=1
    )
    assert await history(client, space.main) == [reply(1, "Done", retried_at)]
    # Only the reply was retried: the task, its attempt and its outcome are as they were.
    assert await board.task(task.task_id) == saved
    assert space.count("task_deliveries") == 1


async def test_a_retry_of_a_delivered_reply_recovers_it_unchanged(
    space: Space, client: UserHostClient, turns: ReplyTurns
) -> None:
    board = tasks_of(space)
    task = await board.create("dispatch-1")
    delivered_at = at(space.clock, 1)
    delivery_id = await board.complete(task.task_id, "Done")
    await space.idle()
    before = await receipt_of(space, delivery_id)
    assert (before["status"], before["revision"], before["history_seq"]) == ("delivered", 3, 1)
    at(space.clock, 2)
    recovered = await board.retry_delivery(delivery_id)
    await space.idle()
    assert recovered.to_wire() == before
    assert await receipt_of(space, delivery_id) == before
    assert len(turns.started) == 1  # no second turn
    assert await history(client, space.main) == [reply(1, "Done", delivered_at)]


async def test_a_retry_of_a_submitted_reply_is_refused_and_of_a_pending_one_changes_nothing(
    space: Space, client: UserHostClient, turns: ReplyTurns
) -> None:
    board = tasks_of(space)
    turns.held = True
    task = await board.create("dispatch-1")
    other = await board.create("dispatch-2")
    at(space.clock, 1)
    submitted_id = await board.complete(task.task_id, "First")
    in_flight = await turns.wait_started(1)
    pending_id = await board.complete(other.task_id, "Second")
    submitted = await receipt_of(space, submitted_id)
    pending = await receipt_of(space, pending_id)
    assert (submitted["status"], submitted["revision"], pending["status"], pending["revision"]) == (
        "submitted",
        2,
        "pending",
        1,
    )

    at(space.clock, 2)
    await refused(board.retry_delivery(submitted_id), "outcome_unknown")
    assert (await board.retry_delivery(pending_id)).to_wire() == pending
    assert await receipt_of(space, submitted_id) == submitted
    assert await receipt_of(space, pending_id) == pending

    turns.release_all()
    await space.idle()
    assert [turn.delivery_id for turn in turns.started] == [submitted_id, pending_id]
    assert [(m["message_seq"], m["text"]) for m in await history(client, space.main)] == [
        (2, "Second"),
        (1, "First"),
    ]
    assert in_flight.turn_id == (await receipt_of(space, submitted_id))["turn_id"]


# --- stop ----------------------------------------------------------------------------------------------------


async def test_a_stop_cancels_the_task_and_its_descendants_never_a_sibling_or_the_parent(
    space: Space, client: UserHostClient, turns: ReplyTurns
) -> None:
    board = tasks_of(space)
    root = await board.create("dispatch-root")
    stopped = await board.create("dispatch-a", root.task_id)
    child = await board.create("dispatch-a1", stopped.task_id)
    sibling = await board.create("dispatch-b", root.task_id)
    turns.held = True
    at(space.clock, 1)
    child_reply = await board.complete(child.task_id, "Child done")
    in_flight = await turns.wait_started(1)
    question_id = await board.ask(stopped.task_id, "Which city?")
    (question_delivery,) = [r.delivery_id for r in await board.deliveries(stopped.task_id)]
    sibling_reply = await board.complete(sibling.task_id, "Sibling done")
    sibling_before = await receipt_of(space, sibling_reply)
    root_before = await board.task(root.task_id)
    sibling_task_before = await board.task(sibling.task_id)

    stopped_at = at(space.clock, 2)
    outcome = await board.stop(stopped.task_id)
    assert outcome == StopOutcome(
        tasks=tuple(sorted([stopped.task_id, child.task_id])),
        cancelled=(question_delivery,),
        pending_cancellation=(child_reply,),
    )
    # Cancellation intent on the task and its descendant; their saved state is otherwise kept.
    assert task_row(space, stopped.task_id) == ("waiting_user", 1, None, 1, 1)
    assert task_row(space, child.task_id) == ("completed", 1, "Child done", 1, 1)
    assert await board.task(root.task_id) == root_before
    assert await board.task(sibling.task_id) == sibling_task_before
    assert task_row(space, sibling.task_id)[1] == 0 and task_row(space, root.task_id)[1] == 0
    # The pending question is cancelled; the child's reply in flight is only marked.
    assert await receipt_of(space, question_delivery) == wire(
        space, stopped, question_delivery, "question", "failed", 2, stopped_at, failure_code="cancelled"
    )
    assert await receipt_of(space, child_reply) == wire(
        space, child, child_reply, "result", "submitted", 3, stopped_at, turn_id=turns_id(in_flight)
    )
    assert delivery_row(space, child_reply)[4] == 1  # pending cancellation, not stopped
    assert await receipt_of(space, sibling_reply) == sibling_before
    # The stopped tasks take no more work.
    await refused(board.ask(stopped.task_id, "Another?"), "cancelled")
    await refused(board.fail(stopped.task_id, "Gave up"), "cancelled")
    await refused(board.fail(child.task_id, "Gave up"), "cancelled")

    ended_at = at(space.clock, 3)
    turns.release_all()
    await space.idle()
    assert await receipt_of(space, child_reply) == wire(
        space,
        child,
        child_reply,
        "result",
        "failed",
        4,
        ended_at,
        turn_id=turns_id(in_flight),
        failure_code="cancelled",
    )
    assert delivery_row(space, child_reply)[4] == 0
    sibling_after = await receipt_of(space, sibling_reply)
    assert (sibling_after["status"], sibling_after["history_seq"]) == ("delivered", 1)
    # Neither the cancelled question nor the cancelled result appears: only the sibling's reply.
    assert await history(client, space.main) == [reply(1, "Sibling done", ended_at)]
    assert [turn.delivery_id for turn in turns.started] == [child_reply, sibling_reply]
    assert space.rows("SELECT status FROM questions WHERE question_id = ?", question_id) == [(None,)]


async def test_a_descendant_created_after_its_ancestor_was_stopped_is_cancelled_too(
    space: Space, client: UserHostClient
) -> None:
    """The stop's intent covers descendant work: a child the stopped task's worker spawns afterwards
    cannot ask the owner anything."""
    board = tasks_of(space)
    parent = await board.create("dispatch-parent")
    await board.stop(parent.task_id)
    with pytest.raises(TaskStateError) as raised:
        late = await board.create("dispatch-late-child", parent.task_id)
        await board.ask(late.task_id, "Shall I go on?")
    assert raised.value.reason == "cancelled"
    await space.idle()
    assert await history(client, space.main) == []


@pytest.mark.parametrize("ending", ["complete", "fail"])
async def test_stopping_an_ended_task_cancels_only_its_undelivered_reply_and_keeps_its_outcome(
    space: Space, client: UserHostClient, turns: ReplyTurns, ending: str
) -> None:
    board = tasks_of(space)
    turns.held = True
    blocker = await board.create("dispatch-blocker")
    at(space.clock, 1)
    await board.complete(blocker.task_id, "Blocker done")
    await turns.wait_started(1)
    task = await board.create("dispatch-1")
    end = board.complete if ending == "complete" else board.fail
    delivery_id = await end(task.task_id, "The outcome")
    ended = "completed" if ending == "complete" else "failed"

    stopped_at = at(space.clock, 2)
    outcome = await board.stop(task.task_id)
    assert outcome == StopOutcome(tasks=(task.task_id,), cancelled=(delivery_id,), pending_cancellation=())
    kind = "result" if ending == "complete" else "failure"
    assert await receipt_of(space, delivery_id) == wire(
        space, task, delivery_id, kind, "failed", 2, stopped_at, failure_code="cancelled"
    )
    assert task_row(space, task.task_id) == (ended, 1, "The outcome", 1, 1)

    delivered_at = at(space.clock, 3)
    turns.release_all()
    await space.idle()
    assert await history(client, space.main) == [reply(1, "Blocker done", delivered_at)]
    assert [turn.delivery_id for turn in turns.started] == [turns.started[0].delivery_id]
    saved = await board.task(task.task_id)
    assert saved is not None and (saved.status, saved.outcome) == (ended, "The outcome")


async def test_stopping_a_task_whose_reply_was_delivered_leaves_the_reply_unchanged(
    space: Space, client: UserHostClient
) -> None:
    board = tasks_of(space)
    task = await board.create("dispatch-1")
    delivered_at = at(space.clock, 1)
    delivery_id = await board.complete(task.task_id, "Done")
    await space.idle()
    before = await receipt_of(space, delivery_id)
    at(space.clock, 2)
    assert await board.stop(task.task_id) == StopOutcome((task.task_id,), (), ())
    assert await receipt_of(space, delivery_id) == before
    assert delivery_row(space, delivery_id) == ("delivered", before["turn_id"], 1, None, 0, 3)
    assert task_row(space, task.task_id) == ("completed", 1, "Done", 1, 1)
    assert await history(client, space.main) == [reply(1, "Done", delivered_at)]


async def test_stop_reply_needs_the_exact_turn_and_a_delayed_stop_never_hits_the_retrys_new_turn(
    space: Space, client: UserHostClient, turns: ReplyTurns
) -> None:
    board = tasks_of(space)
    turns.held = True
    task = await board.create("dispatch-1")
    at(space.clock, 1)
    delivery_id = await board.complete(task.task_id, "Done")
    old_turn = turns_id(await turns.wait_started(1))

    stopped_at = at(space.clock, 2)
    marked = await board.stop_reply(old_turn)
    assert marked.to_wire() == wire(
        space, task, delivery_id, "result", "submitted", 3, stopped_at, turn_id=old_turn
    )
    assert delivery_row(space, delivery_id)[4] == 1
    ended_at = at(space.clock, 3)
    turns.release(old_turn)
    await until(lambda: delivery_row(space, delivery_id)[0] == "failed", "the stopped turn to end")
    assert await receipt_of(space, delivery_id) == wire(
        space, task, delivery_id, "result", "failed", 4, ended_at, turn_id=old_turn, failure_code="cancelled"
    )
    assert await history(client, space.main) == []

    retried_at = at(space.clock, 4)
    assert (await board.retry_delivery(delivery_id)).status.value == "pending"
    new_turn = turns_id(await turns.wait_started(2))
    assert new_turn != old_turn
    # The stop of the old turn, delayed or retried, finds no turn of that ID: the new reply is untouched.
    at(space.clock, 5)
    await refused(board.stop_reply(old_turn), "not_found")
    assert await receipt_of(space, delivery_id) == wire(
        space, task, delivery_id, "result", "submitted", 6, retried_at, turn_id=new_turn
    )
    assert delivery_row(space, delivery_id)[4] == 0
    delivered_at = at(space.clock, 6)
    turns.release(new_turn)
    await space.idle()
    delivered = wire(
        space, task, delivery_id, "result", "delivered", 7, delivered_at, turn_id=new_turn, history_seq=1
    )
    assert await receipt_of(space, delivery_id) == delivered
    assert await history(client, space.main) == [reply(1, "Done", delivered_at)]
    # A stop of a turn that has ended leaves its reply as it is.
    at(space.clock, 7)
    assert (await board.stop_reply(new_turn)).to_wire() == delivered
    assert await receipt_of(space, delivery_id) == delivered
    await refused(board.stop_reply("turn_000000000000000000000000"), "not_found")


# --- resume ----------------------------------------------------------------------------------------------


async def test_resume_creates_a_new_requirements_version_and_attempt_that_new_deliveries_carry(
    space: Space, client: UserHostClient
) -> None:
    board = tasks_of(space)
    task = await board.create("dispatch-1")
    first_at = at(space.clock, 1)
    first = await board.complete(task.task_id, "First try")
    await space.idle()
    await board.stop(task.task_id)
    await refused(board.complete(task.task_id, "Again"), "cancelled")
    first_receipt = await receipt_of(space, first)

    at(space.clock, 2)
    resumed = await board.resume(task.task_id)
    assert resumed == TaskRecord(
        task_id=task.task_id,
        parent_id=None,
        session_id=task.session_id,
        request_id="dispatch-1",
        requirements_version=2,
        execution_attempt=2,
        status="running",
        cancel_requested=False,
        outcome=None,
        revision=4,
        decisions=(),
    )
    # Automatic recovery of the same dispatch keeps its identity and does not bump the attempt.
    assert await board.create("dispatch-1") == resumed

    second_at = at(space.clock, 3)
    second = await board.complete(task.task_id, "Second try")
    await space.idle()
    receipt = await receipt_of(space, second)
    assert receipt == wire(
        space, resumed, second, "result", "delivered", 3, second_at, turn_id=receipt["turn_id"], history_seq=2
    )
    assert (receipt["requirements_version"], receipt["execution_attempt"]) == (2, 2)
    assert await receipt_of(space, first) == first_receipt
    assert (first_receipt["requirements_version"], first_receipt["execution_attempt"]) == (1, 1)
    assert await history(client, space.main) == [
        reply(2, "Second try", second_at),
        reply(1, "First try", first_at),
    ]
    assert task_row(space, task.task_id) == ("completed", 0, "Second try", 2, 2)


# --- refusals -----------------------------------------------------------------------------------------------


async def test_transitions_the_stored_state_refuses(space: Space) -> None:
    board = tasks_of(space)
    unknown = "task_000000000000000000000000"
    assert await board.task(unknown) is None
    await refused(board.create("dispatch-orphan", unknown), "not_found")
    for work in (
        board.ask(unknown, "?"),
        board.complete(unknown, "x"),
        board.fail(unknown, "x"),
        board.stop(unknown),
        board.resume(unknown),
        board.retry_delivery("dlv_000000000000000000000000"),
    ):
        await refused(work, "not_found")

    done = await board.create("dispatch-done")
    await board.complete(done.task_id, "Done")
    await refused(board.complete(done.task_id, "Again"), "not_running")
    await refused(board.fail(done.task_id, "Again"), "not_running")
    await refused(board.ask(done.task_id, "Really?"), "not_running")

    waiting = await board.create("dispatch-waiting")
    await board.ask(waiting.task_id, "Which city?")
    await refused(board.complete(waiting.task_id, "Lisbon, I guess"), "waiting_user")
    await space.idle()
    assert task_row(space, waiting.task_id) == ("waiting_user", 0, None, 1, 1)
    assert task_row(space, done.task_id) == ("completed", 0, "Done", 1, 1)
    assert space.count("tasks") == 2 and space.count("task_deliveries") == 2


# --- restart -----------------------------------------------------------------------------------------------


async def test_after_a_restart_a_submitted_reply_stays_submitted_and_pending_ones_are_delivered(
    start_space: StartSpace, attach: Attach, clock: Clock
) -> None:
    held = ReplyTurns()
    held.held = True
    first = await start_space(reply_turn=held)
    board = tasks_of(first)
    in_flight_task = await board.create("dispatch-1")
    queued_task = await board.create("dispatch-2")
    at(clock, 1)
    in_flight = await board.complete(in_flight_task.task_id, "In flight")
    turn = turns_id(await held.wait_started(1))
    queued = await board.complete(queued_task.task_id, "Queued")
    submitted = await receipt_of(first, in_flight)
    assert (submitted["status"], submitted["turn_id"], submitted["revision"]) == ("submitted", turn, 2)
    await first.host.close()  # the host goes away during the turn: its outcome is unknown

    after = ReplyTurns()
    restarted_at = at(clock, 2)
    second = await start_space(reply_turn=after)
    await second.idle()
    client = await attach(second)
    board = tasks_of(second)
    assert await receipt_of(second, in_flight) == submitted
    assert await receipt_of(second, queued) == wire(
        second,
        queued_task,
        queued,
        "result",
        "delivered",
        3,
        restarted_at,
        turn_id=turns_id(after.started[0]),
        history_seq=1,
    )
    assert [turn.delivery_id for turn in after.started] == [queued]  # the unknown one is not replayed
    await refused(board.retry_delivery(in_flight), "outcome_unknown")
    assert await history(client, second.main) == [reply(1, "Queued", restarted_at)]
    # A stop of its task can only mark it: it stays pending cancellation, not stopped.
    outcome = await board.stop(in_flight_task.task_id)
    assert outcome == StopOutcome((in_flight_task.task_id,), (), (in_flight,))
    assert delivery_row(second, in_flight) == ("submitted", turn, None, None, 1, 3)
    saved = await board.task(in_flight_task.task_id)
    assert saved is not None and (saved.status, saved.outcome) == ("completed", "In flight")


async def test_a_reply_a_stop_cancelled_stays_cancelled_on_retry(
    space: Space, client: UserHostClient, turns: ReplyTurns
) -> None:
    """A retry cannot deliver a reply that a task stop cancelled: the stop's intent stays in force."""
    board = tasks_of(space)
    turns.held = True
    blocker = await board.create("dispatch-blocker")
    await board.complete(blocker.task_id, "Blocker done")
    await turns.wait_started(1)
    task = await board.create("dispatch-1")
    delivery_id = await board.complete(task.task_id, "Never shown")
    await board.stop(task.task_id)
    before = await receipt_of(space, delivery_id)
    await refused(board.retry_delivery(delivery_id), "cancelled")
    turns.release_all()
    await space.idle()
    assert await receipt_of(space, delivery_id) == before
    assert [message["text"] for message in await history(client, space.main)] == ["Blocker done"]
