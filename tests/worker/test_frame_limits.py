"""Every reader of the worker protocol admits a frame of exactly 16 MiB and refuses one byte more.

The limit counts the newline (spec/schema/worker/frames.schema.json). The readers are the SDK's serving
connection (on real pipes, as `run_execution_backend_v4` opens them), the host client (on a spawned
process's pipes) and the conformance suite's session.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson
import pytest

from wuu.conformance.outcomes import CaseFailed
from wuu.conformance.worker.session import Session
from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES
from wuu.generated.models import InitializeParams
from wuu.worker import ExecutionBackendV4, RequestContext, run_execution_backend_v4
from wuu.worker.client import ConnectionLost, WorkerClient

LIMIT = WORKER_MAX_FRAME_BYTES
DEADLINE = 60.0
BINDING = {"version": 4, "root": "/nonexistent/root", "session": "s"}


def padded(frame: dict[str, object], size: int) -> bytes:
    """The frame as one line of exactly `size` bytes, newline included (JSON whitespace before the `}`)."""
    compact = orjson.dumps(frame)
    return compact[:-1] + b" " * (size - len(compact) - 1) + b"}\n"


# A worker that answers the first request it reads with a successful initialize reply of SIZE bytes.
PADDED_REPLY_WORKER = """
import json, sys
size = int(sys.argv[1])
request = json.loads(sys.stdin.buffer.readline())
reply = json.dumps({"id": request["id"], "data": {"version": 4, "capabilities": [], "methods": ["cancel",
    "initialize"], "worker": {"name": "padded", "version": "1"}}}, separators=(",", ":")).encode()
sys.stdout.buffer.write(reply[:-1] + b" " * (size - len(reply) - 1) + b"}\\n")
sys.stdout.buffer.flush()
sys.stdin.buffer.read()
"""


def padded_reply_worker(size: int) -> list[str]:
    return [sys.executable, "-c", PADDED_REPLY_WORKER, str(size)]


# --- the SDK ---------------------------------------------------------------------------------------


async def serve_one_line(line: bytes) -> bytes:
    """Serve a do-nothing backend on fresh pipes, send it `line`, then EOF; everything it wrote back."""

    async def initialize(params: InitializeParams, context: RequestContext) -> None:
        return None

    async def close() -> None:
        return None

    host_to_worker = os.pipe()
    worker_to_host = os.pipe()
    stdin = os.fdopen(host_to_worker[0], "rb", buffering=0)
    stdout = os.fdopen(worker_to_host[1], "wb", buffering=0)
    backend = ExecutionBackendV4(initialize, {}, close)
    serving = asyncio.create_task(run_execution_backend_v4(backend, stdin=stdin, stdout=stdout))
    loop = asyncio.get_running_loop()

    def feed() -> None:
        with os.fdopen(host_to_worker[1], "wb") as pipe:
            pipe.write(line)

    def drain() -> bytes:
        with os.fdopen(worker_to_host[0], "rb") as pipe:
            return pipe.read()

    writing = loop.run_in_executor(None, feed)
    output = loop.run_in_executor(None, drain)
    await asyncio.wait_for(asyncio.gather(writing, serving), DEADLINE)
    stdin.close()
    return await asyncio.wait_for(output, DEADLINE)


async def test_the_sdk_answers_a_frame_of_exactly_the_limit() -> None:
    line = padded({"id": "max", "method": "initialize", "token": "t", "data": BINDING}, LIMIT)
    assert len(line) == LIMIT
    reply = orjson.loads(await serve_one_line(line))
    assert reply["id"] == "max" and reply["data"]["version"] == 4


async def test_the_sdk_ends_the_connection_at_one_byte_more_without_a_reply() -> None:
    line = padded({"id": "over", "method": "initialize", "token": "t", "data": BINDING}, LIMIT + 1)
    assert len(line) == LIMIT + 1
    assert await serve_one_line(line) == b""


# --- the host client -------------------------------------------------------------------------------


async def test_the_host_client_reads_a_reply_of_exactly_the_limit(tmp_path: Path) -> None:
    client = await WorkerClient.spawn(padded_reply_worker(LIMIT))
    try:
        result = await asyncio.wait_for(client.connect(str(tmp_path), "s"), DEADLINE)
        assert result.worker.name == "padded"
    finally:
        await client.close(budget=DEADLINE)


async def test_the_host_client_refuses_a_reply_one_byte_over(tmp_path: Path) -> None:
    client = await WorkerClient.spawn(padded_reply_worker(LIMIT + 1))
    try:
        with pytest.raises(ConnectionLost, match="frame over the limit of 16777216 bytes"):
            await asyncio.wait_for(client.connect(str(tmp_path), "s"), DEADLINE)
    finally:
        await client.close(budget=DEADLINE)


# --- the conformance session ---------------------------------------------------------------------------


async def test_the_conformance_session_reads_a_reply_of_exactly_the_limit(tmp_path: Path) -> None:
    session = Session(padded_reply_worker(LIMIT), tmp_path, timeout=DEADLINE)
    await session.start()
    try:
        data = await session.initialize()
        assert data["worker"]["name"] == "padded"
    finally:
        await session.close()


async def test_the_conformance_session_fails_a_reply_one_byte_over(tmp_path: Path) -> None:
    session = Session(padded_reply_worker(LIMIT + 1), tmp_path, timeout=DEADLINE)
    await session.start()
    try:
        with pytest.raises(CaseFailed, match="frame over the limit of 16777216 bytes"):
            await session.initialize()
    finally:
        await session.close()
