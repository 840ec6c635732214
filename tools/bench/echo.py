"""The benchmarks' baseline: a minimal raw NDJSON echo worker over stdin/stdout (asyncio + orjson).

It speaks only the frame shape of the v4 protocol, none of its rules: every request
`{"id", "method", "data"}` is answered at once, in order, with `{"id", "data"}`, where `data` is the
request's own `data` (the driver sends a payload the size of the real worker's reply). One method
does work: `export/read {path, offset, max_bytes}` answers `{data, eof}` with the base64 of that
chunk of the file, read and encoded exactly as the native worker's `export/read` does, so the export
figure compares the native worker with the cost of the same bytes on a bare pipe. `spawn {argv, fork}` starts the
command as the bench's bare spawn does, waits for it, and answers `{exit_code}`: the floor of starting a
process through any worker process on this machine (the request, the answer, and a third process beside
the client and the child). With `fork` true, the child runs a Python function between fork and exec, as a
child that enters a sandbox of its own must: the floor of a confined start in a Python worker.

Usage: python tools/bench/echo.py   (run by the bench as a plain script; it imports nothing from wuu or tools)
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from typing import Any

import orjson

# The protocol's frame limit (WORKER_MAX_FRAME_BYTES), newline included; asyncio counts it without.
FRAME_LIMIT = 16 * 1024 * 1024


def between_fork_and_exec() -> None:
    """Nothing: a `preexec_fn` makes subprocess fork the whole process where it would otherwise vfork."""


def export_read(data: dict[str, Any]) -> dict[str, Any]:
    """A chunk of a file as the native worker's `export/read` gives it: opened per read, base64."""
    path, offset, max_bytes = data["path"], data["offset"], data["max_bytes"]
    with open(path, "rb") as handle:
        handle.seek(offset)
        chunk = handle.read(max_bytes)
        size = os.fstat(handle.fileno()).st_size
    eof = offset + len(chunk) >= size
    return {"data": base64.b64encode(chunk).decode("ascii"), "eof": eof}


async def serve() -> None:
    """Answer every frame on stdin until it closes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=FRAME_LIMIT - 1)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            break
        frame = orjson.loads(line)
        data = frame["data"]
        if frame["method"] == "export/read":
            data = export_read(data)
        elif frame["method"] == "spawn":
            between = between_fork_and_exec if data.get("fork") else None
            child = await asyncio.create_subprocess_exec(*data["argv"], preexec_fn=between)
            data = {"exit_code": await child.wait()}
        writer.write(orjson.dumps({"id": frame["id"], "data": data}) + b"\n")
        await writer.drain()
    writer.close()


if __name__ == "__main__":
    asyncio.run(serve())
