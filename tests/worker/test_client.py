"""The host client (wuu.worker.client) facing a broken worker: one killed mid-request, one that sends a
malformed frame, one whose frame is over the limit.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, SDK_WORKER, Spawner, binding, initialize, tool_request, until
from wuu.worker.client import ConnectionLost


async def test_a_worker_killed_mid_request_fails_the_call_as_unknown(
    spawn_client: Spawner, tmp_path: Path
) -> None:
    worker = await spawn_client(SDK_WORKER)
    await initialize(worker, tmp_path / "ws")
    pending = asyncio.create_task(worker.request("execute", tool_request("sleep", ms=60_000)))
    await until((tmp_path / "ws" / "sleeping").exists, "the sleep handler to start")
    assert worker.process is not None
    worker.process.kill()
    with pytest.raises(ConnectionLost, match="the outcome of the call is unknown"):
        await asyncio.wait_for(pending, DEADLINE)
    with pytest.raises(ConnectionLost):
        await worker.request("execute", tool_request("echo", text="after"))
    outcome = await worker.close()
    assert outcome.returncode == -9 and not outcome.clean


async def test_a_malformed_frame_from_the_worker_fails_the_call(
    spawn_client: Spawner, tmp_path: Path
) -> None:
    client = await spawn_client(["sh", "-c", "read line; echo '{nope'; exec sleep 600"])
    with pytest.raises(ConnectionLost, match="malformed frame from the worker"):
        await asyncio.wait_for(client.request("initialize", binding(tmp_path)), DEADLINE)
    outcome = await asyncio.wait_for(client.close(budget=0.5), DEADLINE)
    assert outcome.killed


async def test_a_process_the_worker_left_behind_holding_its_pipes_does_not_hold_up_the_close(
    spawn_client: Spawner,
) -> None:
    # The shell starts a `sleep` that inherits its output and error, names it, and exits at its input's end.
    client = await spawn_client(["sh", "-c", "sleep 600 & echo $! >&2; read line; exit 0"])
    await until(lambda: client.stderr.strip().isdigit(), "the shell to name its background sleep")
    left_behind = int(client.stderr)
    try:
        outcome = await asyncio.wait_for(client.close(budget=DEADLINE), DEADLINE)
        assert outcome.returncode == 0 and not outcome.killed and outcome.clean
        assert os.path.exists(f"/proc/{left_behind}")  # it still holds the pipes the close stopped reading
    finally:
        os.kill(left_behind, signal.SIGKILL)


async def test_an_oversize_frame_from_the_worker_fails_the_call_and_close_ends(
    spawn_client: Spawner, tmp_path: Path
) -> None:
    program = "import sys; sys.stdin.readline(); sys.stdout.write('x' * (17 * 1024 * 1024) + '\\n'); sys.stdout.flush()"
    client = await spawn_client([sys.executable, "-c", program + "; import time; time.sleep(60)"])
    with pytest.raises(ConnectionLost, match="frame over the limit of 16777216 bytes"):
        await asyncio.wait_for(client.request("initialize", binding(tmp_path)), DEADLINE)
    outcome = await asyncio.wait_for(client.close(budget=0.5), DEADLINE)
    assert outcome.killed
