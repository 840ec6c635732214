"""Connecting a worker to its byte streams: the process's stdio pipes, or any asyncio stream pair."""

from __future__ import annotations

import asyncio
import sys
from typing import IO

from .framing import reader_limit
from .stdio import check_stream


class _OutputProtocol(asyncio.streams.FlowControlMixin):
    """A write-pipe protocol that reports when the reading end goes away, even with nothing to write."""

    def __init__(self, closed: asyncio.Event) -> None:
        super().__init__()
        self._closed = closed

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed.set()
        super().connection_lost(exc)


async def connect_pipes(
    input_file: IO[bytes] | None = None,
    output_file: IO[bytes] | None = None,
    *,
    limit: int | None = None,
    reader: asyncio.StreamReader | None = None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.Event]:
    """Asyncio streams over two pipes (stdin and stdout by default), and an event set when output fails.

    The input feeds `reader` when given (a FrameReader, for a peer that listens); otherwise a new
    StreamReader that admits lines of the frame limit (`framing.reader_limit()`) unless `limit` says otherwise.
    UnusableStream if either is not a pipe, socket or terminal.
    """
    input_file = input_file or sys.stdin.buffer
    output_file = output_file or sys.stdout.buffer
    check_stream(input_file, "stdin" if input_file is sys.stdin.buffer else "the input")
    check_stream(output_file, "stdout" if output_file is sys.stdout.buffer else "the output")
    loop = asyncio.get_running_loop()
    if reader is None:
        reader = asyncio.StreamReader(limit=reader_limit() if limit is None else limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), input_file)
    closed = asyncio.Event()
    transport, protocol = await loop.connect_write_pipe(lambda: _OutputProtocol(closed), output_file)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer, closed
