"""SerialWork: no wake is lost, no two passes overlap, and with `gather_s` the wakes of a burst share one pass
while a pass that asks for the next one is followed at once."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from wuu.host.userhost.personal.serial import SerialWork

GATHER_S = 0.2


class Passes:
    """Records each pass; the pass asks for another while `more` has entries (popping one each time)."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.more: list[bool] = []
        self.running = 0
        self.overlapped = False
        self.tasks: list[asyncio.Task[None]] = []
        self.gate: asyncio.Event | None = None

    def admit(self, work: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.create_task(work))

    async def one_pass(self) -> bool:
        self.running += 1
        self.overlapped |= self.running > 1
        self.started.append(asyncio.get_running_loop().time())
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        self.running -= 1
        return self.more.pop() if self.more else False


async def settled(work: SerialWork) -> None:
    await asyncio.wait_for(work.idle.wait(), 5)


async def test_the_wakes_of_a_burst_share_one_pass_that_starts_after_the_gather() -> None:
    passes = Passes()
    work = SerialWork(passes.admit, passes.one_pass, GATHER_S)
    woken = asyncio.get_running_loop().time()
    for _ in range(10):
        work.wake()
        await asyncio.sleep(0)
    await settled(work)
    assert len(passes.started) == 1
    assert passes.started[0] - woken >= GATHER_S


async def test_a_wake_during_a_pass_gets_a_pass_of_its_own_after_the_gather() -> None:
    passes = Passes()
    passes.gate = asyncio.Event()
    work = SerialWork(passes.admit, passes.one_pass, GATHER_S)
    work.wake()
    while not passes.started:
        await asyncio.sleep(0.001)
    work.wake()  # during the first pass
    woken = asyncio.get_running_loop().time()
    passes.gate.set()
    await settled(work)
    assert len(passes.started) == 2
    assert passes.started[1] - woken >= GATHER_S
    assert not passes.overlapped


async def test_a_pass_that_asks_for_another_is_followed_at_once() -> None:
    passes = Passes()
    passes.more = [False, True, True]  # popped from the end: two passes ask for another, the third does not
    work = SerialWork(passes.admit, passes.one_pass, GATHER_S)
    work.wake()
    await settled(work)
    assert len(passes.started) == 3
    assert passes.started[2] - passes.started[0] < GATHER_S


async def test_without_a_gather_a_wake_during_a_pass_is_not_lost() -> None:
    passes = Passes()
    passes.gate = asyncio.Event()
    work = SerialWork(passes.admit, passes.one_pass)
    work.wake()
    while not passes.started:
        await asyncio.sleep(0.001)
    work.wake()
    work.wake()
    passes.gate.set()
    await settled(work)
    assert len(passes.started) == 2
    assert not passes.overlapped
