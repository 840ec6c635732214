"""The store's database (`sqlite/database.py`) and its writer process (`sqlite/writer.py`): writes are sent by
reference and committed in the writer process, which starts with the first write; what cannot cross to it or
back fails alone with a TypeError; a writer that dies fails what it had not committed, a writer whose host
was killed commits what it was sent and exits quietly, and closing the database ends the process."""

from __future__ import annotations

import asyncio
import os
import pickle
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers import DEADLINE
from wuu.host.userhost.personal.sqlite.database import WRITER, Database
from wuu.host.userhost.personal.sqlite.frames import HEADER


def create(connection: sqlite3.Connection) -> None:
    connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")


def add(connection: sqlite3.Connection, text: str) -> int:
    """A write of this module: sent to the writer process by reference."""
    row_id = connection.execute("INSERT INTO notes (text) VALUES (?)", (text,)).lastrowid
    assert row_id is not None
    return row_id


def add_and_answer_a_cursor(connection: sqlite3.Connection, text: str) -> sqlite3.Cursor:
    return connection.execute("INSERT INTO notes (text) VALUES (?)", (text,))


class TwoPartError(Exception):
    """An error that a pickle does not bring back: its constructor takes two arguments, its `args` one."""

    def __init__(self, part: str, other: str) -> None:
        super().__init__(f"{part} {other}")


def add_and_raise_an_error_that_cannot_come_back(connection: sqlite3.Connection, text: str) -> None:
    connection.execute("INSERT INTO notes (text) VALUES (?)", (text,))
    raise TwoPartError("cannot", "return")


def add_and_raise(connection: sqlite3.Connection, text: str) -> None:
    connection.execute("INSERT INTO notes (text) VALUES (?)", (text,))
    raise ValueError(f"{text} is refused")


def texts_of(connection: sqlite3.Connection) -> list[str]:
    return [text for (text,) in connection.execute("SELECT text FROM notes ORDER BY id")]


def texts(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [text for (text,) in connection.execute("SELECT text FROM notes ORDER BY id")]
    finally:
        connection.close()


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    opened = await Database.open(tmp_path / "store.sqlite", create)
    try:
        yield opened
    finally:
        await opened.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_writes_run_in_the_writer_process_and_are_in_the_file_when_answered(database: Database) -> None:
    answered = await asyncio.gather(*(database.write(add, f"note {n}") for n in range(20)))
    assert answered == list(range(1, 21))
    assert texts(database.path) == [f"note {n}" for n in range(20)]
    assert sum(writes for writes, _ in database.groups) == 20


async def test_a_write_that_raises_is_undone_alone_and_the_rest_of_its_group_is_stored_once(
    database: Database,
) -> None:
    # Submitted in one turn of the loop: one frame, one transaction.
    writes = [database.submit(add, "a"), database.submit(add_and_raise, "b"), database.submit(add, "c")]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    assert outcomes[0] == 1 and outcomes[2] == 2
    assert isinstance(outcomes[1], ValueError) and str(outcomes[1]) == "b is refused"
    assert texts(database.path) == ["a", "c"]
    assert list(database.groups) == [(3, 1)]


async def test_a_write_that_cannot_be_sent_fails_alone(database: Database) -> None:
    first = database.submit(add, "before")
    unsendable = database.submit(lambda connection: None)
    last = database.submit(add, "after")
    with pytest.raises(TypeError, match="cannot be sent to its writer"):
        await unsendable
    assert (await first, await last) == (1, 2)
    assert texts(database.path) == ["before", "after"]


async def test_a_result_that_cannot_come_back_is_a_type_error_and_the_write_stays(database: Database) -> None:
    with pytest.raises(TypeError, match="cannot send a Cursor back"):
        await database.write(add_and_answer_a_cursor, "kept")
    assert texts(database.path) == ["kept"]


async def test_an_error_that_cannot_come_back_is_a_type_error_and_its_write_alone_is_undone(
    database: Database,
) -> None:
    kept = database.submit(add, "kept")
    failing = database.submit(add_and_raise_an_error_that_cannot_come_back, "undone")
    with pytest.raises(TypeError, match="cannot send a TwoPartError back"):
        await failing
    assert await kept == 1
    assert texts(database.path) == ["kept"]


async def test_a_writer_that_dies_fails_its_pending_writes_and_every_later_one(database: Database) -> None:
    await database.write(add, "committed")
    assert database._writer is not None
    # Another connection holds the write lock: the next write waits in the writer, unanswered, when it dies.
    blocker = sqlite3.connect(database.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        pending = database.submit(add, "lost")
        database._writer.kill()
        await database._writer.wait()
        with pytest.raises(
            RuntimeError,
            match=r"^the store's writer process ended \(exit status -9\) before it answered this write, which "
            r"may or may not be stored$",
        ):
            await pending
        with pytest.raises(RuntimeError, match=r"^the store's writer process ended \(exit status -9\)$"):
            database.submit(add, "refused")
    finally:
        blocker.close()
    assert texts(database.path) == ["committed"]


def test_a_writer_whose_host_is_gone_commits_what_it_was_sent_and_exits_quietly(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    with sqlite3.connect(path) as connection:
        create(connection)
    answers, unread = os.pipe()
    writer = subprocess.Popen(
        [sys.executable, "-m", WRITER], stdin=subprocess.PIPE, stdout=unread, stderr=subprocess.PIPE
    )
    os.close(unread)
    os.close(answers)  # as a killed host: no one reads the answer, whose write fails with EPIPE
    frames = [(sys.path, str(path), pickle.dumps(None)), [(0, add, ("sent before the kill",), {})]]
    data = b"".join(HEADER.pack(len(frame)) + frame for frame in map(pickle.dumps, frames))
    _, stderr = writer.communicate(data, timeout=DEADLINE)
    assert (writer.returncode, stderr.decode()) == (0, "")
    assert texts(path) == ["sent before the kill"]


async def test_the_writer_process_starts_with_the_first_write(tmp_path: Path) -> None:
    unwritten = await Database.open(tmp_path / "unwritten.sqlite", create)
    await unwritten.read(texts_of)
    await unwritten.close()
    assert unwritten._writer is None


async def test_closing_commits_what_is_queued_and_ends_the_writer_process(tmp_path: Path) -> None:
    database = await Database.open(tmp_path / "store.sqlite", create)
    await database.write(add, "first")
    assert database._writer is not None
    pid = database._writer.pid
    queued = [database.submit(add, f"queued {n}") for n in range(3)]
    await database.close()
    assert [future.result() for future in queued] == [2, 3, 4]
    assert texts(database.path) == ["first", "queued 0", "queued 1", "queued 2"]
    assert database._writer.returncode == 0 and not alive(pid)


async def test_closing_a_store_whose_writer_has_not_started_commits_what_is_queued(tmp_path: Path) -> None:
    database = await Database.open(tmp_path / "store.sqlite", create)
    queued = [database.submit(add, f"queued {n}") for n in range(2)]  # the writer starts after this turn
    try:
        await database.close()
        assert all(future.done() for future in queued), "the close returned before the queued writes"
        assert [future.result() for future in queued] == [1, 2]
        assert texts(database.path) == ["queued 0", "queued 1"]
        assert database._writer is not None and database._writer.returncode == 0
    finally:  # a writer started after the close would wait for its input's end for ever
        if database._starting is not None:
            await database._starting
        if database._writer is not None and database._writer.returncode is None:
            database._writer.kill()
            await database._writer.wait()
