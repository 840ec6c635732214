"""One SQLite file served to asyncio: a writer process that commits queued writes in groups, and a reader
thread on a connection of its own.

The database runs in WAL mode with `synchronous=FULL`, so a commit is durable when it returns. A write is a
module-level function of the writer's connection and its arguments: it is sent, by reference with its
pickled arguments, to the store's writer process (`writer.py`), which runs every write queued at the moment in
one transaction, each inside its own savepoint (a write that raises is rolled back alone and its caller gets
the error), and answers only after the COMMIT: group commit, with no acknowledgement before durability. The
writes run outside the host's process so that they never wait for its interpreter lock, nor it for theirs.
"""

from __future__ import annotations

import asyncio
import itertools
import pickle
import sqlite3
import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from ...private import ensure_file
from .frames import HEADER
from .schema import check_version, migrate

T = TypeVar("T")
P = ParamSpec("P")

WRITER = "wuu.host.userhost.personal.sqlite.writer"
"""The module the writer process runs."""

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
    """The store's SQLite file. Open it with `Database.open`; every method but `open` runs on the loop that
    opened it."""

    def __init__(self, path: Path, prepare: Prepare | None = None) -> None:
        self.path = path
        self._prepare = prepare
        self._writer: asyncio.subprocess.Process | None = None
        self._starting: asyncio.Task[None] | None = None
        self._answers: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._queued: list[tuple[int, Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self._ended: str | None = None
        self.groups: deque[tuple[int, int]] = deque(maxlen=1024)
        """The last transactions the writer committed, oldest first: how many writes each held, and how many
        of those failed (and were rolled back alone)."""
        self._reader_connection: sqlite3.Connection | None = None
        self._reader = ThreadPoolExecutor(1, f"sqlite-reader {path.name}", self._open_reader)
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: Path,
        setup: Callable[[sqlite3.Connection], None] | None = None,
        prepare: Prepare | None = None,
    ) -> Database:
        """Open (or create, mode 0600) the file, migrate its schema to this build's, run `setup` in one
        transaction, and empty the write-ahead log into the file; the writer process starts with the first
        write. Every connection is prepared by `prepare` (a module-level function: the writer process is sent
        it by reference). StoreVersionError for a store of a newer build."""

        def opened() -> None:
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
            finally:
                connection.close()

        await asyncio.to_thread(opened)
        return cls(path, prepare)

    # --- writes ----------------------------------------------------------------------------------

    def submit(
        self,
        write: Callable[Concatenate[sqlite3.Connection, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> asyncio.Future[T]:
        """Queue `write(connection, *args, **kwargs)`; a future of its result, settled once the transaction
        holding it has committed. The write happens whether or not the caller still waits for it. `write` is
        a module-level function and its arguments can be pickled; what it returns or raises too."""
        if self._closed:
            raise RuntimeError("the store is closed")
        if self._ended is not None:
            raise RuntimeError(self._ended)
        future: asyncio.Future[T] = self._loop.create_future()
        ident = next(self._ids)
        self._pending[ident] = future
        if not self._queued:  # the writes queued in this turn of the loop go out in one frame
            self._loop.call_soon(self._send)
        self._queued.append((ident, write, args, kwargs))
        return future

    async def write(
        self,
        write: Callable[Concatenate[sqlite3.Connection, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run a write (as `submit`) and wait until it is durable. Cancelling the caller does not undo the
        write: it waits for the commit all the same, so what the caller returns is what the store holds."""
        future = self.submit(write, *args, **kwargs)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                await asyncio.wait([future])
            if not future.cancelled():
                future.exception()  # retrieved: the caller is gone, the outcome stays in the store
            raise

    async def _start(self) -> None:
        """Start the writer process (a store that is never written to starts none), then send it what is
        queued."""
        try:
            writer = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                WRITER,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as error:
            self._end(f"the store's writer process could not start ({error})")
            return
        assert writer.stdin is not None
        setting_up = pickle.dumps((sys.path, str(self.path), pickle.dumps(self._prepare)))
        writer.stdin.write(HEADER.pack(len(setting_up)) + setting_up)
        self._writer = writer
        self._answers = self._loop.create_task(self._receive(writer))
        self._send()

    def _send(self) -> None:
        if self._writer is None:
            if self._starting is None:
                self._starting = self._loop.create_task(self._start())
            return  # `_start` sends what is queued by then
        queued, self._queued = self._queued, []
        if not queued or self._ended is not None:
            return
        try:
            frames = [pickle.dumps(queued, pickle.HIGHEST_PROTOCOL)]
        except Exception:
            frames = []
            for write in queued:
                try:
                    frames.append(pickle.dumps([write], pickle.HIGHEST_PROTOCOL))
                except Exception as error:
                    self._pending.pop(write[0]).set_exception(
                        TypeError(f"a write of the store cannot be sent to its writer: {error}")
                    )
        assert self._writer.stdin is not None
        self._writer.stdin.write(b"".join(HEADER.pack(len(frame)) + frame for frame in frames))

    async def _receive(self, writer: asyncio.subprocess.Process) -> None:
        """Settle the writes of each transaction the writer answers, until it exits."""
        answers = writer.stdout
        assert answers is not None
        try:
            while True:
                (size,) = HEADER.unpack(await answers.readexactly(HEADER.size))
                outcomes = pickle.loads(await answers.readexactly(size))
                failed = 0
                for ident, result, error in outcomes:
                    future = self._pending.pop(ident)
                    failed += error is not None
                    if future.done():
                        continue
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(result)
                self.groups.append((len(outcomes), failed))
        except asyncio.IncompleteReadError:
            ended = "the store's writer process ended"
        except Exception as error:  # an answer this host cannot read: no later one can be trusted
            ended = f"the store's writer process sent an answer that could not be read ({error})"
            writer.kill()
        self._end(f"{ended} (exit status {await writer.wait()})")

    def _end(self, reason: str) -> None:
        """No write goes to the writer any more: fail those it had not answered, for `reason`."""
        self._ended = reason
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(
                    RuntimeError(
                        f"{self._ended} before it answered this write, which may or may not be stored"
                    )
                )

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
        """Commit what is queued, let the writer process exit, then close the reader's connection."""
        if self._closed:
            return
        self._closed = True
        if self._queued:
            self._send()  # what this turn of the loop queued goes now, starting the writer if it is not yet
        if self._starting is not None:
            await self._starting
        if self._writer is not None:
            self._send()
            assert self._writer.stdin is not None and self._answers is not None
            self._writer.stdin.close()  # the end of its input: the writer commits what it has and exits
            await self._answers

        def close_reader() -> None:
            if self._reader_connection is not None:
                self._reader_connection.close()

        await asyncio.get_running_loop().run_in_executor(self._reader, close_reader)
        self._reader.shutdown()
