"""One SQLite file served to asyncio: a single writer thread that commits queued writes in groups, and a
reader thread on a connection of its own.

The database runs in WAL mode with `synchronous=FULL`, so a commit is durable when it returns. A write is a
function of the writer's connection; the writer runs every write queued at the moment in one transaction,
each inside its own savepoint (a write that raises is rolled back alone and its caller gets the error), and
settles their callers only after the COMMIT: group commit, with no acknowledgement before durability.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ...private import ensure_file
from .schema import check_version, migrate

T = TypeVar("T")
Write = tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any], asyncio.AbstractEventLoop]
Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]
"""A write's future, and its result or its error."""

MAX_GROUP = 256
"""The most writes one transaction commits."""


Prepare = Callable[[sqlite3.Connection], None]


def connect(path: Path, prepare: Prepare | None = None) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit) with the store's settings; `prepare`
    adds what the store's statements need (SQL functions)."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    if prepare is not None:
        prepare(connection)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("PRAGMA foreign_keys = ON")
    connection.execute("PRAGMA busy_timeout = 10000")
    # The savepoint journals of a group commit stay in memory: on disk, a group past 64 KiB of them opened,
    # wrote and deleted a temporary file, in every commit.
    connection.execute("PRAGMA temp_store = MEMORY")
    # What a write deletes or overwrites is zeroed, not left in the file's free space: a forgotten memory's
    # texts must leave the store (spec/schema/userhost/memory.schema.json, MemoryStatus).
    connection.execute("PRAGMA secure_delete = ON")
    return connection


class Database:
    """The store's SQLite file. Open it with `Database.open`; every method but `open` runs on the loop."""

    def __init__(self, path: Path, writer: sqlite3.Connection, prepare: Prepare | None = None) -> None:
        self.path = path
        self._prepare = prepare
        self._writer = writer
        self._queue: queue.SimpleQueue[Write | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._write_loop, name=f"sqlite-writer {path.name}", daemon=True
        )
        self._reader_connection: sqlite3.Connection | None = None
        self._reader = ThreadPoolExecutor(1, f"sqlite-reader {path.name}", self._open_reader)
        self._closed = False
        self._thread.start()

    @classmethod
    async def open(
        cls,
        path: Path,
        setup: Callable[[sqlite3.Connection], None] | None = None,
        prepare: Prepare | None = None,
    ) -> Database:
        """Open (or create, mode 0600) the file, migrate its schema to this build's, run `setup` in one
        transaction, empty the write-ahead log into the file, and start the writer; every connection is
        prepared by `prepare`. StoreVersionError for a store of a newer build."""

        def opened() -> sqlite3.Connection:
            if path.exists():
                check_version(path)  # before any setting that writes (journal_mode) touches the file
            else:
                ensure_file(path)  # 0600 whatever the umask; SQLite gives its -wal and -shm the same mode
            connection = connect(path, prepare)
            try:
                migrate(connection)
                if setup is not None:
                    connection.execute("BEGIN IMMEDIATE")
                    try:
                        setup(connection)
                        connection.execute("COMMIT")
                    except BaseException:
                        connection.execute("ROLLBACK")
                        raise
                # A crash between a write and the checkpoint that should follow it (a forget's) leaves page
                # images of the earlier rows in the log: the one process owning the store empties it first.
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except BaseException:
                connection.close()
                raise
            return connection

        return cls(path, await asyncio.to_thread(opened), prepare)

    # --- writes ----------------------------------------------------------------------------------

    def submit(self, write: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue a write; a future of its result, settled once the transaction holding it has committed.
        The write happens whether or not the caller still waits for it."""
        if self._closed:
            raise RuntimeError("the store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((write, future, loop))
        return future

    async def write(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """Run a write and wait until it is durable. Cancelling the caller does not undo the write: it
        waits for the commit all the same, so what the caller returns is what the store holds."""
        future = self.submit(write)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                await asyncio.wait([future])
            if not future.cancelled():
                future.exception()  # retrieved: the caller is gone, the outcome stays in the store
            raise

    def _write_loop(self) -> None:
        connection = self._writer
        while (first := self._queue.get()) is not None:
            group = [first]
            stop = False
            while len(group) < MAX_GROUP:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                group.append(item)
            outcomes = self._commit(connection, group)
            # One wake-up per event loop for the whole group: each wake-up writes to the loop's self-pipe.
            settled: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
            for (_, future, loop), (result, error) in zip(group, outcomes, strict=True):
                settled.setdefault(loop, []).append((future, result, error))
            for loop, each in settled.items():
                loop.call_soon_threadsafe(_settle, each)
            if stop:
                break
        connection.close()

    @staticmethod
    def _commit(connection: sqlite3.Connection, group: list[Write]) -> list[tuple[Any, BaseException | None]]:
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            connection.execute("BEGIN IMMEDIATE")
            if len(group) == 1:  # alone in its transaction: a failure rolls the transaction back
                try:
                    outcomes.append((group[0][0](connection), None))
                except Exception as error:
                    connection.execute("ROLLBACK")
                    return [(None, error)]
            else:
                for write, _, _ in group:
                    connection.execute("SAVEPOINT write")
                    try:
                        outcomes.append((write(connection), None))
                    except Exception as error:
                        connection.execute("ROLLBACK TO write")
                        outcomes.append((None, error))
                    connection.execute("RELEASE write")
            connection.execute("COMMIT")
        except Exception as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            return [(None, error) for _ in group]
        return outcomes

    async def checkpoint(self) -> bool:
        """Copy the write-ahead log into the file and empty the log (`wal_checkpoint(TRUNCATE)`), so that
        page images of earlier writes are gone from it; whether it completed (False when a reader or writer
        kept it busy past the busy timeout: the log is then rewritten as writes reuse it)."""

        def run() -> bool:
            connection = connect(self.path, self._prepare)
            try:
                busy: int = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                connection.close()
            return busy == 0

        return await asyncio.to_thread(run)

    # --- reads -----------------------------------------------------------------------------------

    def _open_reader(self) -> None:
        self._reader_connection = connect(self.path, self._prepare)

    async def read(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read on the reader's connection; it sees every write whose caller has been settled."""

        def run() -> T:
            assert self._reader_connection is not None
            return read(self._reader_connection)

        return await asyncio.get_running_loop().run_in_executor(self._reader, run)

    # --- the end ---------------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit what is queued, then close both connections."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

        def close_reader() -> None:
            if self._reader_connection is not None:
                self._reader_connection.close()

        await asyncio.get_running_loop().run_in_executor(self._reader, close_reader)
        self._reader.shutdown()


def _settle(outcomes: list[Outcome]) -> None:
    for future, result, error in outcomes:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
