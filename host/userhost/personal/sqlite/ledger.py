"""The bundled store's task ledger: hidden task executions (`tasks`), the delivery receipts of their replies
to the main conversation (`deliveries`), the owner's decisions on questions (`questions`) and push
registrations (`push`). Each call hands its rule function to the database: a transition runs on its single
writer, checked against the stored state in the transaction that writes it.
"""

from __future__ import annotations

from datetime import datetime

from wuu.generated.models import (
    PushProvider,
    PushRegisterResult,
    TaskDeliveryKind,
    TaskDeliveryReceipt,
    UserQuestionStatus,
)

from ..provider import PushTarget, QuestionDecision, StopOutcome, TaskRecord
from . import deliveries, push, questions, tasks
from .database import Database


class SqliteTaskLedger:
    """The task ledger of one space's store."""

    def __init__(self, database: Database, main_session_id: str) -> None:
        self.database = database
        self.main_session_id = main_session_id

    # --- tasks ------------------------------------------------------------------------------------

    async def create(self, request_id: str, parent_id: str | None, now: datetime) -> TaskRecord:
        return await self.database.write(tasks.create, request_id, parent_id, now)

    async def task(self, task_id: str) -> TaskRecord | None:
        return await self.database.read(lambda c: tasks.task_where(c, "task_id = ?", task_id))

    async def ask(self, task_id: str, text: str, now: datetime) -> tuple[str, str]:
        return await self.database.write(tasks.ask, task_id, text, now)

    async def finish(self, task_id: str, kind: TaskDeliveryKind, text: str, now: datetime) -> str:
        return await self.database.write(tasks.finish, task_id, kind, text, now)

    async def resume(self, task_id: str, now: datetime) -> TaskRecord:
        return await self.database.write(tasks.resume, task_id, now)

    async def stop(self, task_id: str, now: datetime) -> StopOutcome:
        return await self.database.write(tasks.stop, task_id, now)

    # --- deliveries -------------------------------------------------------------------------------

    async def delivery(self, delivery_id: str) -> TaskDeliveryReceipt | None:
        return await self.database.read(
            lambda c: deliveries.delivery_where(c, "delivery_id = ?", delivery_id)
        )

    async def deliveries(self, task_id: str) -> list[TaskDeliveryReceipt]:
        return await self.database.read(lambda c: deliveries.of_task(c, task_id))

    async def pending(self) -> list[str]:
        return await self.database.read(deliveries.pending)

    async def submit(self, delivery_id: str, now: datetime) -> tuple[TaskDeliveryReceipt, str] | None:
        return await self.database.write(deliveries.submit, delivery_id, now)

    async def settle(
        self, delivery_id: str, turn_id: str, text: str | None, now: datetime
    ) -> TaskDeliveryReceipt:
        main = self.main_session_id
        return await self.database.write(deliveries.settle, main, delivery_id, turn_id, text, now)

    async def retry(self, delivery_id: str, now: datetime) -> TaskDeliveryReceipt:
        return await self.database.write(deliveries.retry, delivery_id, now)

    async def stop_reply(self, turn_id: str, now: datetime) -> TaskDeliveryReceipt:
        return await self.database.write(deliveries.stop_reply, turn_id, now)

    # --- questions and push -----------------------------------------------------------------------

    async def decide(
        self, question_id: str, status: UserQuestionStatus, answer: str | None, request_id: str, now: datetime
    ) -> QuestionDecision:
        return await self.database.write(questions.decide, question_id, status, answer, request_id, now)

    async def register_push(
        self, device_id: str, provider: PushProvider, app_id: str, token: str, now: datetime
    ) -> PushRegisterResult:
        return await self.database.write(push.register, device_id, provider, app_id, token, now)

    async def unregister_push(self, device_id: str, registration_id: str) -> bool:
        return await self.database.write(push.unregister, device_id, registration_id)

    async def push_registrations(self) -> list[PushTarget]:
        return await self.database.read(push.registrations)
