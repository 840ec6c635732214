"""The user host's baseline: a minimal raw JSON-RPC echo on a Unix socket (asyncio + orjson).

It speaks only the envelope of the user-host RPC, none of its rules: every line is answered at once, in
order, with a success response carrying the request's id and the result a host gives the bench's cheap
request (`plugin/client/cancel` of an id nobody uses: `{"cancelled": false}`).

Usage: python tools/bench/jsonrpc_echo.py SOCKET   (a plain script: it imports nothing from wuu or tools)
"""

from __future__ import annotations

import asyncio
import os
import sys

import orjson

# The user host's frame limit (USERHOST_MAX_FRAME_BYTES), newline included; asyncio counts it without.
FRAME_LIMIT = 32 * 1024 * 1024
RESULT = {"cancelled": False}


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every line of one client until it closes."""
    while line := await reader.readline():
        request = orjson.loads(line)
        writer.write(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": RESULT}) + b"\n")
        await writer.drain()
    writer.close()


async def serve(path: str) -> None:
    """Serve until killed."""
    server = await asyncio.start_unix_server(answer, path=path, limit=FRAME_LIMIT - 1)
    os.chmod(path, 0o600)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
