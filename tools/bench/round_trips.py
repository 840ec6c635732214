"""Small requests: sequential round trips, pipelined throughput, and the worker's CPU time per request."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from wuu.worker.client import WorkerClient

from .config import IN_FLIGHT, SECOND_NS

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
EMPTY_LIST_REPLY: dict[str, Any] = {"processes": []}  # what process/list answers on an empty registry


@contextlib.contextmanager
def placed(pids: list[int], *, apart: bool) -> Iterator[bool]:
    """Pin this thread and the processes `pids` (every thread of each) to one CPU, or the processes to
    another CPU than this thread's when `apart`; restore every mask after. Yields False, pinning
    nothing, when `apart` asks for two CPUs and there is one.

    An unpinned sequential round trip measures where the scheduler put the two ends as much as the
    work: on one CPU the round trip is the work of both ends, across two it adds waking the other
    CPU, which on a virtual machine can cost more than the work, and the scheduler places a busier
    server differently from the echo.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if apart and len(cpus) < 2:
        yield False
        return
    threads = [int(task) for pid in pids for task in os.listdir(f"/proc/{pid}/task")]
    saved = {0: os.sched_getaffinity(0)}
    os.sched_setaffinity(0, {cpus[0]})
    for tid in threads:
        # A thread that has ended since the listing needs no pin.
        with contextlib.suppress(ProcessLookupError):
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpus[1] if apart else cpus[0]})
    try:
        yield True
    finally:
        for tid, mask in saved.items():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, mask)


async def round_trips(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    """The latency in microseconds of `count` sequential calls."""
    latencies = []
    for _ in range(count):
        began = time.perf_counter_ns()
        await call()
        latencies.append((time.perf_counter_ns() - began) / 1000)
    return latencies


async def pipelined(call: Callable[[], Awaitable[object]], count: int) -> float:
    """Requests per second with IN_FLIGHT calls outstanding at all times, `count` in all."""
    remaining = count

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    began = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(IN_FLIGHT)))
    return count / (time.perf_counter() - began)


def cpu_seconds(client: WorkerClient) -> float:
    """The CPU time the client's worker process has used so far: the run time of its threads in
    nanoseconds (schedstat) where the kernel keeps it, else user + system time in clock ticks."""
    assert client.process is not None
    pid = client.process.pid
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        return total / SECOND_NS
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
