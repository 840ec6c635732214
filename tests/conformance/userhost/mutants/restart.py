"""Mutants of what a host keeps across a kill or a restart: acknowledged writes, the main session."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar, cast

from wuu.host.userhost.authority import Composer, UserHost
from wuu.host.userhost.personal import personal
from wuu.host.userhost.personal.composition import sqlite_provider
from wuu.host.userhost.personal.provider import Admission, SessionDomain, Submission
from wuu.host.userhost.personal.sqlite.database import Database
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain
from wuu.host.userhost.personal.stamps import rfc3339

from . import mutant
from .harness import ProviderProxy, with_provider

T = TypeVar("T")
COMMIT_DELAY = 1.0
"""Seconds between an early acknowledgement and the commit of its write: far longer than a kill takes."""


class EarlyAcknowledgement:
    """A store's database whose writes are answered as soon as they have run, before the transaction that
    holds them commits: the commit follows COMMIT_DELAY s later."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def write(self, write: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        ran: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, error: Exception | None) -> None:
            if ran.done():
                return
            if error is not None:
                ran.set_exception(error)
            else:
                ran.set_result(cast(T, result))

        def deferred(connection: sqlite3.Connection) -> T:
            try:
                result = write(connection)
            except Exception as error:
                loop.call_soon_threadsafe(settle, None, error)
                raise
            loop.call_soon_threadsafe(settle, result, None)
            time.sleep(COMMIT_DELAY)  # in the writer's thread, inside the open transaction
            return result

        committed = self.database.submit(deferred)
        committed.add_done_callback(lambda future: future.cancelled() or future.exception())
        return await ran


class AcknowledgedBeforeCommit(ProviderProxy):
    """Admission answers its receipt once the write has run, before it is committed."""

    async def admit(self, submission: Submission, now: datetime) -> Admission:
        inner = self.inner
        assert isinstance(inner, SqliteSessionDomain)
        early = SqliteSessionDomain(
            cast(Database, EarlyAcknowledgement(inner.database)), inner.main_session_id
        )
        return await early.admit(submission, now)


@mutant(
    "reply-before-durable-write",
    "answers agents.send with its receipt before the write that holds it has committed",
    "restart.acknowledged-write-kept",
)
def reply_before_durable_write() -> Composer:
    """The provider answers an admission as soon as its write has run in the store's transaction, and the
    transaction commits a second later: a host killed meanwhile has lost an input it acknowledged."""
    return with_provider(AcknowledgedBeforeCommit)


@mutant(
    "main-session-per-start",
    "records a new main session every time it starts, in place of the space's",
    "restart.same-main-session",
)
def main_session_per_start() -> Composer:
    """Once the bundled provider is open, a new main session is recorded for the space and served: each start
    has an empty main conversation under a new ID (the earlier ones stay in the store, unreachable)."""

    async def provider(host: UserHost, now: datetime) -> SessionDomain:
        store = await sqlite_provider(host, now)
        assert isinstance(store, SqliteSessionDomain)
        fresh = f"ses_main_{secrets.token_hex(12)}"

        def rotate(connection: sqlite3.Connection) -> None:
            connection.execute(
                "INSERT INTO sessions (session_id, kind, created_at) VALUES (?, 'main', ?)",
                (fresh, rfc3339(now)),
            )
            connection.execute("UPDATE space SET main_session_id = ?", (fresh,))

        await store.database.write(rotate)
        return SqliteSessionDomain(store.database, fresh)

    return personal(provider=provider)
