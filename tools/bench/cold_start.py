"""Cold start: from spawning a worker to its first reply."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from wuu.worker.client import WorkerClient

from .workers import ECHO_COMMAND, close, data_of, spawn_native


async def cold_native(root: Path) -> float:
    """Milliseconds from spawning the native worker to its initialize reply."""
    began = time.perf_counter()
    client = await spawn_native(root)
    elapsed = time.perf_counter() - began
    await close(client)
    return elapsed * 1000


async def cold_echo(reply: dict[str, Any]) -> float:
    """Milliseconds from spawning the echo worker to its first reply, as large as the initialize reply."""
    began = time.perf_counter()
    client = await WorkerClient.spawn(ECHO_COMMAND)
    await data_of(client, "initialize", reply)
    elapsed = time.perf_counter() - began
    await close(client)
    return elapsed * 1000
