"""`process/start` of `true` until its terminal `process/event`, beside a bare spawn and wait, and beside the
echo worker spawning it (the floor of any worker process that starts commands for its client), also through
the helper `wuu-confine` (the floor of a confined start: each command enters a sandbox of its own before it
runs)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

from wuu.generated.models import PermissionMode, ProcessEvent, ProcessEventType, ProcessStartParams
from wuu.worker.client import WorkerClient

from .workers import data_of


async def start_exit(
    client: WorkerClient, events: AsyncIterator[ProcessEvent], mode: PermissionMode
) -> float:
    """Milliseconds from sending process/start of `true` until its terminal process/event arrives."""
    began = time.perf_counter()
    process = await client.process_start(ProcessStartParams(argv=["true"], permission_mode=mode))
    while True:
        event = await anext(events)
        if event.process.id == process.id and event.type is not ProcessEventType.STARTED:
            break
    elapsed = time.perf_counter() - began
    if event.type is not ProcessEventType.EXITED or event.process.exit_code != 0:
        raise RuntimeError(f"`true` in {mode.value} ended {event.type.value}: {event.process}")
    return elapsed * 1000


async def spawn_bare() -> float:
    """The baseline: milliseconds to spawn `true` and reap it."""
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec("true")
    await process.wait()
    return (time.perf_counter() - began) * 1000


async def spawn_echo(echo: WorkerClient, confine: Path | None = None) -> float:
    """Milliseconds for the echo worker to spawn `true` as `spawn_bare` does (with `confine`, through that
    helper) and answer its exit status."""
    began = time.perf_counter()
    answer = await data_of(echo, "spawn", {"argv": ["true"], "confine": confine and str(confine)})
    elapsed = time.perf_counter() - began
    if answer != {"exit_code": 0}:
        raise RuntimeError(f"`true` through the echo ended {answer}")
    return elapsed * 1000
