"""The user-host RPC on this process's stdin and stdout: one NDJSON client."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import IO

from wuu.worker.streams import connect_pipes

from .authority import UserHost
from .envelope import FRAMING
from .ndjson import DEFAULT_OUTBOX_BYTES, NdjsonConnection


async def serve_stdio(host: UserHost, *, max_queued_bytes: int = DEFAULT_OUTBOX_BYTES) -> None:
    """Serve one client on stdin/stdout until its input ends or it shuts down; its output is then closed,
    so the client sees EOF even while the process goes on serving other transports."""
    reader, writer, output_closed = await connect_pipes(output_file=_own_stdout(), limit=FRAMING.stream_limit)
    connection = NdjsonConnection(
        host, reader, writer, "stdio", output_closed=output_closed, max_queued_bytes=max_queued_bytes
    )
    await connection.serve()


class StdioServer:
    """`serve_stdio` as a `server.Server`. Start it with `StdioServer.start`."""

    transport = "stdio"

    def __init__(self, serving: asyncio.Task[None]) -> None:
        self._serving = serving

    @classmethod
    async def start(cls, host: UserHost) -> StdioServer:
        """Begin serving the client on stdin and stdout."""
        return cls(asyncio.create_task(serve_stdio(host)))

    async def ended(self) -> None:
        """Return once the client has gone; a failure of the transport is raised."""
        await asyncio.wait({self._serving})
        self._serving.result()

    async def close(self) -> None:
        """Stop serving the client, if it has not gone."""
        self._serving.cancel()
        await asyncio.gather(self._serving, return_exceptions=True)


def _own_stdout() -> IO[bytes]:
    """This process's stdout as a file whose close really closes the client's pipe.

    `sys.stdout` never closes fd 1 (closefd=False), so closing the transport would leave the pipe open
    until the process exits. The transport gets its own duplicate instead, and fd 1 is pointed at
    /dev/null, so nothing written to stdout later reaches the client or a file that reuses the number.
    """
    sys.stdout.flush()
    output = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return output
