"""FrameReader on real pipes: each line reaches the listener whole, in order, as its newline arrives.

The listener runs in the callback that read the bytes, so these tests see lines without any task of
theirs reading. How listening ends (a clean EOF, an EOF inside a line, a line past the limit, the
listener stopping) decides what the reader gives afterwards as a plain StreamReader.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.helpers import DEADLINE, until
from wuu.worker.frame_reader import FrameReader
from wuu.worker.framing import FrameOverLimit, MalformedFrame
from wuu.worker.streams import connect_pipes

LIMIT = 64


@dataclass
class Listener:
    """Records what a FrameReader hands over; stops after the line `stop_at`, if given."""

    stop_at: bytes | None = None
    lines: list[bytes] = field(default_factory=list)
    ends: list[Exception | None] = field(default_factory=list)

    def take(self, line: bytes) -> bool:
        self.lines.append(line)
        return line != self.stop_at

    def end(self, error: Exception | None) -> None:
        self.ends.append(error)


@dataclass
class Pipe:
    """A FrameReader fed by a real pipe, and the pipe's write end."""

    reader: FrameReader
    write_fd: int

    def write(self, data: bytes) -> None:
        os.write(self.write_fd, data)

    def close(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1


@pytest.fixture
async def pipe() -> AsyncIterator[Pipe]:
    read_fd, write_fd = os.pipe()
    out_read, out_write = os.pipe()  # connect_pipes wants an output too; nothing is written to it
    reader = FrameReader(LIMIT)
    _, writer, _ = await connect_pipes(
        os.fdopen(read_fd, "rb", buffering=0), os.fdopen(out_write, "wb", buffering=0), reader=reader
    )
    opened = Pipe(reader, write_fd)
    yield opened
    opened.close()
    writer.close()
    os.close(out_read)


async def test_lines_split_across_writes_arrive_whole_and_in_order(pipe: Pipe) -> None:
    listener = Listener()
    pipe.reader.listen(listener.take, listener.end)
    pipe.write(b'{"a":1}\n{"b"')
    await until(lambda: listener.lines == [b'{"a":1}\n'], "the first line")
    pipe.write(b":2}\n\n")
    await until(lambda: len(listener.lines) == 3, "the rest")
    assert listener.lines == [b'{"a":1}\n', b'{"b":2}\n', b"\n"]
    assert listener.ends == []


async def test_bytes_read_before_listening_are_handed_over_at_once() -> None:
    reader = FrameReader(LIMIT)
    # What the transport's protocol does when bytes and the EOF arrive before anyone listens.
    reader.feed_data(b"early\nhalf")
    reader.feed_eof()
    listener = Listener()
    reader.listen(listener.take, listener.end)
    assert listener.lines == [b"early\n"]
    assert len(listener.ends) == 1 and isinstance(listener.ends[0], MalformedFrame)
    assert str(listener.ends[0]) == "input ended inside a frame (4 bytes)"
    assert listener.ends[0].data == b"half"


async def test_a_clean_eof_ends_listening_once_and_reads_as_eof(pipe: Pipe) -> None:
    listener = Listener()
    pipe.reader.listen(listener.take, listener.end)
    pipe.write(b"one\n")
    pipe.close()
    await until(lambda: listener.ends == [None], "the end of input")
    assert listener.lines == [b"one\n"]
    assert await asyncio.wait_for(pipe.reader.read(), DEADLINE) == b""


async def test_a_line_that_outgrows_the_limit_ends_listening_and_the_rest_stays_readable(pipe: Pipe) -> None:
    listener = Listener()
    pipe.reader.listen(listener.take, listener.end)
    pipe.write(b"x" * LIMIT)  # no newline within the limit: the line is already too long
    await until(lambda: listener.ends != [], "the over-limit line")
    (error,) = listener.ends
    assert isinstance(error, FrameOverLimit) and error.rest_unread
    assert str(error) == f"frame over the limit of {LIMIT} bytes"
    pipe.write(b"tail\nnext\n")
    pipe.close()
    assert await asyncio.wait_for(pipe.reader.read(), DEADLINE) == b"tail\nnext\n"
    assert listener.lines == []


async def test_a_whole_line_over_the_limit_ends_listening_and_what_follows_stays_readable(pipe: Pipe) -> None:
    listener = Listener()
    pipe.reader.listen(listener.take, listener.end)
    pipe.write(b"ok\n" + b"z" * LIMIT + b"\nnext\n")  # one write: the long line arrives with its newline
    await until(lambda: listener.ends != [], "the over-limit line")
    (error,) = listener.ends
    assert isinstance(error, FrameOverLimit) and not error.rest_unread
    assert str(error) == f"frame of {LIMIT + 1} bytes is over the limit of {LIMIT}"
    pipe.close()
    assert await asyncio.wait_for(pipe.reader.read(), DEADLINE) == b"next\n"
    assert listener.lines == [b"ok\n"]


async def test_a_line_of_exactly_the_limit_is_handed_over(pipe: Pipe) -> None:
    listener = Listener()
    pipe.reader.listen(listener.take, listener.end)
    line = b"y" * (LIMIT - 1) + b"\n"
    pipe.write(line)
    await until(lambda: listener.lines == [line], "the line of the limit")
    assert listener.ends == []


async def test_a_listener_that_stops_leaves_what_follows_to_read(pipe: Pipe) -> None:
    listener = Listener(stop_at=b"stop\n")
    pipe.reader.listen(listener.take, listener.end)
    pipe.write(b"go\nstop\nafter\n")
    pipe.close()
    assert await asyncio.wait_for(pipe.reader.read(), DEADLINE) == b"after\n"
    assert listener.lines == [b"go\n", b"stop\n"]
    assert listener.ends == []  # it stopped before the input ended


async def test_stop_hands_the_rest_to_plain_reads(pipe: Pipe) -> None:
    listener = Listener()
    pipe.reader.listen(listener.take, listener.end)
    pipe.write(b"first\npart")
    await until(lambda: listener.lines == [b"first\n"], "the first line")
    pipe.reader.stop()
    pipe.write(b"ial\n")
    pipe.close()
    assert await asyncio.wait_for(pipe.reader.read(), DEADLINE) == b"partial\n"
    assert listener.lines == [b"first\n"] and listener.ends == []


async def test_a_transport_error_reaches_the_listener() -> None:
    reader = FrameReader(LIMIT)
    listener = Listener()
    reader.listen(listener.take, listener.end)
    reset = ConnectionResetError("reset by peer")
    reader.set_exception(reset)
    assert listener.ends == [reset]
    with pytest.raises(ConnectionResetError):
        await reader.read()


async def test_a_reader_is_listened_to_once() -> None:
    reader = FrameReader(LIMIT)
    listener = Listener()
    reader.listen(listener.take, listener.end)
    with pytest.raises(RuntimeError, match="listened to once"):
        reader.listen(listener.take, listener.end)
