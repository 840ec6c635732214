"""What the kill -9 campaign (tools/chaos/kills.py) found, pinned: the commands of a local worker that is
killed do not outlive its adapter, which reports the loss as a failed cleanup."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, assert_gone, binding, children, request_ok, until
from wuu.worker.client import ConnectionLost, WorkerClient


@pytest.mark.parametrize("backend", ["local", "command"])
async def test_a_killed_workers_commands_end_with_its_adapter(backend: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    settings = {"backend": backend, "shutdown_timeout_ms": 3000}
    if backend == "command":
        # A wrapper shell that stays the worker's parent: the commands are not the adapter's grandchildren.
        wrapper = ["sh", "-c", '"$0" -m wuu.worker; exit $?', sys.executable]
        settings.update(command=wrapper, workspace=str(root))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"execution_environments": {"profiles": {"p": settings}}}), encoding="utf-8")
    argv = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(config), "--profile", "p"]
    client = await WorkerClient.spawn(argv)
    await request_ok(client, "initialize", binding(root))
    # A command that leaves the worker's process group too: it is found as a descendant, not by its group.
    script = "setsid sleep 300 & echo $! > escaped; exec sleep 300"
    record = await request_ok(
        client, "process/start", {"argv": ["sh", "-c", script], "permission_mode": "unconfined"}
    )
    escaped = root / "escaped"
    await until(lambda: escaped.exists() and escaped.read_text().endswith("\n"), "the escaped command's pid")
    commands = [record["pid"], int(escaped.read_text())]
    assert client.process is not None
    worker = next(pid for pid in _descendants(client.process.pid) if "wuu.worker" in _argv(pid))
    pending = asyncio.ensure_future(
        client.request("process/read", {"Process": record["id"], "Wait": 60 * 10**9})
    )

    os.kill(worker, signal.SIGKILL)
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(pending, DEADLINE)
    outcome = await client.close(DEADLINE)
    assert not outcome.killed and outcome.returncode == 1, outcome
    assert b"shutdown failed" in outcome.stderr, outcome.stderr
    await assert_gone(*commands)


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found
