"""Mutants of what a host keeps across a kill or a restart: acknowledged writes, the main session."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

from wuu.host.userhost.authority import Composer, UserHost
from wuu.host.userhost.personal import personal
from wuu.host.userhost.personal.composition import sqlite_provider
from wuu.host.userhost.personal.provider import Admission, SessionDomain, Submission
from wuu.host.userhost.personal.sqlite.database import Database, connect
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain
from wuu.host.userhost.personal.stamps import rfc3339

from . import mutant
from .harness import ProviderProxy, with_provider

T = TypeVar("T")
COMMIT_DELAY = 1.0
"""Seconds between an early acknowledgement and the commit of its write: far longer than a kill takes."""


class EarlyAcknowledgement:
    """A store's database whose writes are answered as soon as they have run, before any transaction holds
    them: each runs first on a connection of its own, in a transaction rolled back, and is answered with that
    result; the store's writer is sent it COMMIT_DELAY s later."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def submit(self, write: Callable[..., T], /, *args: Any) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()

        def ran() -> T:
            connection = connect(self.database.path)
            try:
                connection.execute("BEGIN IMMEDIATE")
                return write(connection, *args)
            finally:
                connection.execute("ROLLBACK")
                connection.close()

        def commit() -> None:
            committed = self.database.submit(write, *args)
            committed.add_done_callback(lambda future: future.cancelled() or future.exception())

        loop.call_later(COMMIT_DELAY, commit)
        return asyncio.ensure_future(asyncio.to_thread(ran))


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

        await store.database.write(_rotate, fresh, now)
        return SqliteSessionDomain(store.database, fresh)

    return personal(provider=provider)


def _rotate(connection: sqlite3.Connection, fresh: str, now: datetime) -> None:
    """Record `fresh` as the space's main session (a write the store's writer process is sent by reference)."""
    connection.execute(
        "INSERT INTO sessions (session_id, kind, created_at) VALUES (?, 'main', ?)", (fresh, rfc3339(now))
    )
    connection.execute("UPDATE space SET main_session_id = ?", (fresh,))
