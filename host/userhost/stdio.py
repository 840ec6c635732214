"""The user-host RPC on this process's stdin and stdout: one NDJSON client."""

from __future__ import annotations

from wuu.worker.streams import connect_pipes

from .authority import UserHost
from .envelope import FRAMING
from .ndjson import DEFAULT_OUTBOX_BYTES, NdjsonConnection


async def serve_stdio(host: UserHost, *, max_queued_bytes: int = DEFAULT_OUTBOX_BYTES) -> None:
    """Serve one client on stdin/stdout until its input ends or it shuts down."""
    reader, writer, output_closed = await connect_pipes(limit=FRAMING.stream_limit)
    connection = NdjsonConnection(
        host, reader, writer, "stdio", output_closed=output_closed, max_queued_bytes=max_queued_bytes
    )
    await connection.serve()
