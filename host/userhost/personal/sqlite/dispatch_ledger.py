"""The bundled store's ledger of dispatched tasks (`dispatches`): each call hands its rule function to the
database, which runs a write on its single writer."""

from __future__ import annotations

from datetime import datetime

from ..dispatch_ledger import CardOutcome, Dispatch, NewDispatch, RunStatus
from . import dispatches
from .database import Database


class SqliteDispatchLedger:
    """The dispatch ledger of one space's store."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def dispatch(self, new: NewDispatch, now: datetime) -> tuple[Dispatch, bool]:
        return await self.database.write(dispatches.dispatch, new, now)

    async def dispatched(self, request_id: str) -> Dispatch | None:
        return await self.database.read(lambda c: dispatches.dispatched(c, request_id))

    async def dispatch_of(self, task_id: str) -> Dispatch | None:
        return await self.database.read(lambda c: dispatches.dispatch_of(c, task_id))

    async def active(self) -> list[Dispatch]:
        return await self.database.read(dispatches.active)

    async def move_run(
        self,
        task_id: str,
        attempt: int,
        allowed: frozenset[str],
        to: RunStatus,
        note: str | None,
        now: datetime,
    ) -> bool:
        return await self.database.write(dispatches.move_run, task_id, attempt, allowed, to, note, now)

    async def cards(self, task_id: str) -> list[CardOutcome]:
        return await self.database.read(lambda c: dispatches.cards(c, task_id))

    async def complete(self, task_id: str, attempt: int, text: str, now: datetime) -> str:
        return await self.database.write(dispatches.complete, task_id, attempt, text, now)

    async def fail(self, task_id: str, attempt: int, run: RunStatus, text: str, now: datetime) -> str | None:
        return await self.database.write(dispatches.fail, task_id, attempt, run, text, now)

    async def redispatch(
        self, task_id: str, version: int, grant_id: str, expires_at: str, now: datetime
    ) -> Dispatch:
        return await self.database.write(dispatches.redispatch, task_id, version, grant_id, expires_at, now)

    async def recover(self, now: datetime) -> list[str]:
        return await self.database.write(dispatches.recover, now)
