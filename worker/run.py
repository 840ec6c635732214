"""Serving a backend: `run_execution_backend_v4` on stdio, or `serve` on any stream pair."""

from __future__ import annotations

import asyncio
from typing import IO

from .backend import ExecutionBackendV4
from .connection import Connection
from .frame_reader import FrameReader
from .streams import connect_pipes


async def serve(
    backend: ExecutionBackendV4,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    output_closed: asyncio.Event | None = None,
) -> None:
    """Serve one connection on a stream pair until it ends; then drain handlers and run `backend.close`.

    `reader` must admit a whole frame (`framing.reader_limit()`); a FrameReader routes each frame as it
    arrives. `output_closed`, when given, is set by whoever learns first that the output is gone.
    Raises what `close` raised.
    """
    connection = Connection(backend, reader, writer, output_closed=output_closed)
    try:
        await connection.run()
    finally:
        writer.close()


async def run_execution_backend_v4(
    backend: ExecutionBackendV4, *, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None
) -> None:
    """Serve the v4 worker protocol on stdin/stdout (or the given pipes) until the connection ends."""
    reader, writer, output_closed = await connect_pipes(stdin, stdout, reader=FrameReader())
    await serve(backend, reader, writer, output_closed)
