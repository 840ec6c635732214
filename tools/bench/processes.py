"""`process/start` of `true` until its terminal `process/event`, beside a bare spawn and wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from wuu.generated.models import PermissionMode, ProcessEvent, ProcessEventType, ProcessStartParams
from wuu.worker.client import WorkerClient


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
