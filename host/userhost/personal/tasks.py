"""Hidden tasks and the delivery of their replies, as the embedding API drives them (`TaskBoard`), and the
host services of questions and push on the same store (`PersonalServices`).

A task runs in a session of its own; what it has to say to the owner (a waiting-user question, its result,
its failure) reaches the main conversation through a durable delivery receipt, `pending → submitted →
delivered | failed`. The board's delivery runner is admitted work of the host: it marks a delivery
submitted under a fresh turn ID before it runs the reply turn, then settles it. A host that dies during
the turn leaves the receipt submitted: its outcome is unknown, and an explicit retry refuses it rather than
risk a second reply. Task completion (the saved result) and delivery are separate: a completed task's reply
may still be pending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any

from wuu.generated.models import (
    PushRegisterParams,
    PushRegisterResult,
    PushUnregisterParams,
    PushUnregisterResult,
    TaskDeliveryKind,
    TaskDeliveryReceipt,
    UserHostErrorCode,
    UserQuestionAnswerParams,
    UserQuestionAnswerResult,
    UserQuestionDismissParams,
    UserQuestionDismissResult,
    UserQuestionStatus,
)

from ..errors import UserHostError
from ..services import Caller, HostServices
from .provider import StopOutcome, TaskLedger, TaskRecord, TaskStateError
from .serial import SerialWork
from .wire_errors import refusals_as_wire_errors

log = logging.getLogger("wuu.host.userhost.personal")

ReplyTurn = Callable[[TaskDeliveryReceipt, str], Awaitable[str]]
"""The main-conversation turn that carries a task's reply, with tools disabled: given the submitted receipt
and the task's text, the text that appears. Raising fails the delivery (`delivery_failed`)."""


async def verbatim_reply(receipt: TaskDeliveryReceipt, text: str) -> str:
    """The bundled reply turn (a stand-in for the main agent's): the task's text as it is."""
    return text


class TaskBoard:
    """The Personal space's tasks, for an embedding: create, ask, finish, stop, resume, and the deliveries."""

    def __init__(
        self,
        ledger: TaskLedger,
        clock: Callable[[], datetime],
        admit: Callable[[Coroutine[Any, Any, None]], None],
        reply_turn: ReplyTurn = verbatim_reply,
        delivered: Callable[[TaskDeliveryReceipt], None] | None = None,
        stopped: Callable[[StopOutcome], None] | None = None,
    ) -> None:
        """`delivered` is told of each reply delivered; `stopped` of each stop, once it is saved (the runner of
        tasks that execute stops their work)."""
        self.ledger = ledger
        self._stopped = stopped
        self.reply_turn = reply_turn
        self._clock = clock
        self._delivered = delivered
        self._decided: dict[str, asyncio.Event] = {}
        self._work = SerialWork(admit, self._pass)

    @property
    def idle(self) -> asyncio.Event:
        """Set while the delivery runner has nothing to do."""
        return self._work.idle

    # --- tasks ------------------------------------------------------------------------------------

    async def create(self, request_id: str, parent_id: str | None = None) -> TaskRecord:
        """A hidden task for the dispatch `request_id` (the same task again for a known one)."""
        return await self.ledger.create(request_id, parent_id, self._clock())

    async def task(self, task_id: str) -> TaskRecord | None:
        """The task as stored: its state, attempt, outcome and the owner's decisions."""
        return await self.ledger.task(task_id)

    async def ask(self, task_id: str, text: str) -> str:
        """The task waits for the owner: its question is delivered to the main conversation; the question
        ID. TaskStateError (`not_found`, `cancelled`, `not_running`)."""
        question_id, _ = await self.ledger.ask(task_id, text, self._clock())
        self.wake()
        return question_id

    async def ask_owner(self, text: str, request_id: str) -> str:
        """Ask through the task of dispatch `request_id` (created for it): the question ID."""
        task = await self.create(request_id)
        return await self.ask(task.task_id, text)

    async def complete(self, task_id: str, text: str) -> str:
        """Save the task's successful result and queue its reply; the delivery ID. TaskStateError
        `waiting_user` while the task waits for an answer: a result cannot overtake the owner."""
        delivery = await self.ledger.finish(task_id, TaskDeliveryKind.RESULT, text, self._clock())
        self.wake()
        return delivery

    async def fail(self, task_id: str, text: str) -> str:
        """Save the task's failure and queue its failure reply; the delivery ID."""
        delivery = await self.ledger.finish(task_id, TaskDeliveryKind.FAILURE, text, self._clock())
        self.wake()
        return delivery

    async def stop(self, task_id: str) -> StopOutcome:
        """Persist cancellation intent for the task and its descendants and their undelivered replies;
        siblings, saved outcomes and delivered replies are untouched."""
        outcome = await self.ledger.stop(task_id, self._clock())
        if self._stopped is not None:
            self._stopped(outcome)
        return outcome

    async def resume(self, task_id: str) -> TaskRecord:
        """Explicitly resume a task: a new requirements version and execution attempt."""
        return await self.ledger.resume(task_id, self._clock())

    async def decided(self, task_id: str) -> None:
        """Wait until the owner next decides one of the task's questions (after this call)."""
        await self._decided.setdefault(task_id, asyncio.Event()).wait()

    def notify_decided(self, task_id: str) -> None:
        """The owner decided one of the task's questions: wake who waits in `decided`."""
        event = self._decided.pop(task_id, None)
        if event is not None:
            event.set()

    # --- deliveries ---------------------------------------------------------------------------------

    async def deliveries(self, task_id: str) -> list[TaskDeliveryReceipt]:
        """The task's delivery receipts, oldest first."""
        return await self.ledger.deliveries(task_id)

    async def retry_delivery(self, delivery_id: str) -> TaskDeliveryReceipt:
        """Retry a reply, never the task: a delivered reply is recovered as it is, a submitted one is refused
        (TaskStateError `outcome_unknown`), a failed one is queued again."""
        receipt = await self.ledger.retry(delivery_id, self._clock())
        if receipt.status.value == "pending":
            self.wake()
        return receipt

    async def stop_reply(self, turn_id: str) -> TaskDeliveryReceipt:
        """Stop the reply turn `turn_id` if it is still in flight; a turn that ended is left as it is."""
        return await self.ledger.stop_reply(turn_id, self._clock())

    def wake(self) -> None:
        """Deliveries may be pending: run the runner as admitted work unless it already runs."""
        self._work.wake()

    async def _pass(self) -> bool:
        for delivery_id in await self.ledger.pending():
            try:
                await self._deliver(delivery_id)
            except Exception:  # one broken delivery never holds up the others
                log.exception("a delivery failed", extra={"delivery_id": delivery_id})
        return False

    async def _deliver(self, delivery_id: str) -> None:
        submitted = await self.ledger.submit(delivery_id, self._clock())
        if submitted is None:
            return  # stopped or settled meanwhile
        receipt, text = submitted
        assert receipt.turn_id is not None
        try:
            reply: str | None = await self.reply_turn(receipt, text)
        except Exception:
            log.exception("the reply turn failed", extra={"delivery_id": delivery_id})
            reply = None
        settled = await self.ledger.settle(delivery_id, receipt.turn_id, reply, self._clock())
        if settled.status.value == "delivered" and self._delivered is not None:
            self._delivered(settled)


class PersonalServices(HostServices):
    """The host services on the Personal store: the owner's decisions on questions, and push registrations
    bound to the transport's authenticated device."""

    def __init__(self, board: TaskBoard, clock: Callable[[], datetime]) -> None:
        self._board = board
        self._clock = clock

    async def user_question_answer(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        saved = await self._decide(
            params.question_id, UserQuestionStatus.ANSWERED, params.text, params.request_id
        )
        return UserQuestionAnswerResult.model_validate(saved)

    async def user_question_dismiss(
        self, params: UserQuestionDismissParams, caller: Caller
    ) -> UserQuestionDismissResult:
        saved = await self._decide(params.question_id, UserQuestionStatus.DISMISSED, None, params.request_id)
        return UserQuestionDismissResult.model_validate(saved)

    async def _decide(
        self, question_id: str, status: UserQuestionStatus, answer: str | None, request_id: str
    ) -> dict[str, Any]:
        with refusals_as_wire_errors():
            saved = await self._board.ledger.decide(question_id, status, answer, request_id, self._clock())
        if not saved.replayed:
            self._board.notify_decided(saved.task_id)
        return {
            "question_id": saved.question_id,
            "task_id": saved.task_id,
            "status": saved.status.value,
            "decided_at": saved.decided_at,
            "replayed": saved.replayed,
        }

    async def push_register(self, params: PushRegisterParams, caller: Caller) -> PushRegisterResult:
        device = _device(caller)
        return await self._board.ledger.register_push(
            device, params.provider, params.app_id, params.token, self._clock()
        )

    async def push_unregister(self, params: PushUnregisterParams, caller: Caller) -> PushUnregisterResult:
        removed = await self._board.ledger.unregister_push(_device(caller), params.registration_id)
        return PushUnregisterResult(unregistered=removed)


def _device(caller: Caller) -> str:
    if caller.device_id is None:
        raise UserHostError(
            UserHostErrorCode.PERMISSION_DENIED, f"the {caller.transport} transport authenticates no device"
        )
    return caller.device_id


__all__ = ["PersonalServices", "ReplyTurn", "TaskBoard", "TaskStateError", "verbatim_reply"]
