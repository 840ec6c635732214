"""Mutants of the Personal Memory service: a forget that only hides, a correction that overwrites version 1, a
query that lists forgotten memories, memories lost when the host starts again."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from wuu.generated.models import MemoryRecord
from wuu.host.userhost.authority import Composer, UserHost
from wuu.host.userhost.personal import personal
from wuu.host.userhost.personal.composition import sqlite_provider
from wuu.host.userhost.personal.memory_ledger import Attribution, MemoryLedger
from wuu.host.userhost.personal.provider import SessionDomain
from wuu.host.userhost.personal.sqlite import memory
from wuu.host.userhost.personal.sqlite.memory_ledger import SqliteMemoryLedger
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain
from wuu.host.userhost.personal.stamps import rfc3339

from . import mutant
from .harness import ProviderProxy, with_provider


class MemoryProxy:
    """A memory ledger that serves everything from the bundled one it wraps; a mutant overrides one method."""

    def __init__(self, inner: SqliteMemoryLedger) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def with_memory(ledger: type[MemoryProxy]) -> Composer:
    """The reference composer whose provider's memory ledger is wrapped by `ledger`."""

    class Provider(ProviderProxy):
        def memory_ledger(self) -> MemoryLedger:
            inner = self.inner.memory_ledger()
            assert isinstance(inner, SqliteMemoryLedger)
            wrapped: MemoryLedger = ledger(inner)
            return wrapped

    return with_provider(Provider)


class ForgetHides(MemoryProxy):
    """Forgetting hides a memory from queries, for as long as the host runs, and changes nothing stored."""

    def __init__(self, inner: SqliteMemoryLedger) -> None:
        super().__init__(inner)
        self.hidden: set[str] = set()

    async def forget(self, memory_id: str, now: datetime) -> MemoryRecord:
        self.hidden.add(memory_id)
        return await self.inner.record(memory_id)

    async def query(self, query: str, limit: int) -> list[MemoryRecord]:
        found = await self.inner.query(query, limit)
        return [record for record in found if record.memory_id not in self.hidden]


@mutant(
    "forget-only-hides",
    "hides a forgotten memory from queries but keeps it active: it can still be corrected and forgotten",
    "memory.forget",
)
def forget_only_hides() -> Composer:
    """The memory ledger's forget only leaves the memory out of later queries: its texts stay, and a correction
    or another forget of it succeeds."""
    return with_memory(ForgetHides)


class CorrectionOverwrites(MemoryProxy):
    """A correction rewrites the current version in place instead of adding one."""

    async def correct(
        self, memory_id: str, text: str, attribution: Attribution, now: datetime
    ) -> MemoryRecord:
        await self.inner.record(memory_id)  # an unknown memory is still refused
        return await self.inner.database.write(_overwrite, memory_id, text, now)


@mutant(
    "correction-overwrites",
    "overwrites a memory's version 1 with the correction instead of adding version 2",
    "memory.correct-versions",
)
def correction_overwrites() -> Composer:
    """The memory ledger's correct replaces the current version's text, so the memory stays at version 1 and
    its earlier text is lost."""
    return with_memory(CorrectionOverwrites)


class QueryListsForgotten(MemoryProxy):
    """A query with no text to match lists forgotten memories too, before the active ones."""

    async def query(self, query: str, limit: int) -> list[MemoryRecord]:
        found = await self.inner.query(query, limit)
        if query:
            return found
        forgotten = await self.inner.database.read(
            lambda c: [
                memory.record(c, row[0])
                for row in c.execute("SELECT memory_id FROM memories WHERE status = 'forgotten'")
            ]
        )
        return [*forgotten, *found][:limit]


@mutant(
    "query-lists-forgotten",
    "lists forgotten memories (their IDs, without text) when a query lists the most recent",
    "memory.forget",
)
def query_lists_forgotten() -> Composer:
    """The memory ledger's query without text returns the forgotten memories along with the active ones."""
    return with_memory(QueryListsForgotten)


@mutant(
    "memories-not-durable",
    "drops every memory when the host starts again, as if they were kept in memory only",
    "memory.durable",
)
def memories_not_durable() -> Composer:
    """The provider deletes the memories as it opens the store, so a killed host forgets all of them."""

    async def provider(host: UserHost, now: datetime) -> SessionDomain:
        store = await sqlite_provider(host, now)
        assert isinstance(store, SqliteSessionDomain)

        await store.database.write(_drop)
        return store

    return personal(provider=provider)


# The mutants' own writes: module-level functions, which the store's writer process is sent by reference.


def _overwrite(connection: sqlite3.Connection, memory_id: str, text: str, now: datetime) -> MemoryRecord:
    connection.execute(
        "UPDATE memory_versions SET text = ?, created_at = ? WHERE memory_id = ? AND version = "
        "(SELECT version FROM memories WHERE memory_id = ?)",
        (text, rfc3339(now), memory_id, memory_id),
    )
    return memory.record(connection, memory_id)


def _drop(connection: sqlite3.Connection) -> None:
    connection.execute("DELETE FROM memory_versions")
    connection.execute("DELETE FROM memories")
