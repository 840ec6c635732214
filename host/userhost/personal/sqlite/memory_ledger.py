"""The bundled store's memory ledger (`memory`): each call hands its rule function to the database, which runs
a write on its single writer."""

from __future__ import annotations

import logging
from datetime import datetime

from wuu.generated.models import MemoryRecord

from ..memory_ledger import Attribution
from . import memory
from .database import Database

log = logging.getLogger("wuu.host.userhost.personal")


class SqliteMemoryLedger:
    """The memory ledger of one space's store."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def save(self, memory_id: str, text: str, attribution: Attribution, now: datetime) -> MemoryRecord:
        return await self.database.write(memory.save, memory_id, text, attribution, now)

    async def correct(
        self, memory_id: str, text: str, attribution: Attribution, now: datetime
    ) -> MemoryRecord:
        return await self.database.write(memory.correct, memory_id, text, attribution, now)

    async def forget(self, memory_id: str, now: datetime) -> MemoryRecord:
        forgotten = await self.database.write(memory.forget, memory_id, now)
        # The write-ahead log still holds page images with the texts until it is checkpointed and emptied.
        if not await self.database.checkpoint():
            log.warning("the store's log was busy: %s's texts stay in it until writes reuse it", memory_id)
        return forgotten

    async def query(self, query: str, limit: int) -> list[MemoryRecord]:
        return await self.database.read(lambda c: memory.query(c, query, limit))

    async def record(self, memory_id: str) -> MemoryRecord:
        return await self.database.read(lambda c: memory.record(c, memory_id))
