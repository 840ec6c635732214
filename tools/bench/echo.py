"""The benchmarks' baseline: a minimal raw NDJSON echo worker over stdin/stdout (asyncio + orjson).

It speaks only the frame shape of the v4 protocol, none of its rules: every request
`{"id", "method", "data"}` is answered at once, in order, with `{"id", "data"}`, where `data` is the
request's own `data` (the driver sends a payload the size of the real worker's reply). One method
does work: `export/read {path, offset, max_bytes}` answers `{data, eof}` with the base64 of that
chunk of the file, read and encoded exactly as the native worker's `export/read` does, so the export
figure compares the native worker with the cost of the same bytes on a bare pipe. `spawn {argv, confine}` starts the
command as the bench's bare spawn does, waits for it, and answers `{exit_code}`: the floor of starting a
process through any worker process on this machine (the request, the answer, and a third process beside
the client and the child). With `confine`, the path of the native worker's helper `wuu-confine`, the command
starts through it as a confined command does: the helper enters a Landlock domain that may write no file (a
ruleset built here once) and reports on a pipe until it execs the command with this process's environment.
That is the floor of a confined start: a process that enters a domain of its own before the command runs.

Usage: python tools/bench/echo.py   (run by the bench as a plain script; it imports nothing from wuu or tools)
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import functools
import os
import sys
from typing import Any

import orjson

# The protocol's frame limit (WORKER_MAX_FRAME_BYTES), newline included; asyncio counts it without.
FRAME_LIMIT = 16 * 1024 * 1024


LANDLOCK_CREATE_RULESET = 444  # the syscall's number on every architecture
LANDLOCK_ACCESS_FS_WRITE_FILE = 1 << 1


@functools.cache
def landlock_ruleset() -> int:
    """A ruleset that handles writing files and allows it nowhere (the attribute's first field only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    handled = ctypes.c_uint64(LANDLOCK_ACCESS_FS_WRITE_FILE)
    fd = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(handled), ctypes.sizeof(handled), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    return int(fd)


async def spawn(argv: list[str], confine: str | None) -> int:
    """Start `argv` (through the helper at `confine`, if given), wait for it, and return its exit status."""
    if confine is None:
        child = await asyncio.create_subprocess_exec(*argv)
        return await child.wait()
    ruleset = landlock_ruleset()
    report, status = os.pipe()
    environment = [f"{name}={value}" for name, value in os.environ.items()]
    child = await asyncio.create_subprocess_exec(
        confine, str(ruleset), str(status), str(len(environment)), *environment, *argv,
        env={}, pass_fds=(ruleset, status),
    )  # fmt: skip
    os.close(status)
    with open(report, "rb") as said:
        if said.read():
            raise RuntimeError("wuu-confine did not start the command")
    return await child.wait()


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
            data = {"exit_code": await spawn(data["argv"], data.get("confine"))}
        writer.write(orjson.dumps({"id": frame["id"], "data": data}) + b"\n")
        await writer.drain()
    writer.close()


if __name__ == "__main__":
    asyncio.run(serve())
