"""Work that runs as admitted work of the host, one run at a time, for as long as there is work to do."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


class SerialWork:
    """Runs `one_pass` as admitted work: `wake` starts a run unless one is going; a run repeats the pass
    while the pass asks for it (returns True) or a wake came during it, so no wake is lost and no two
    passes overlap."""

    def __init__(
        self,
        admit: Callable[[Coroutine[Any, Any, None]], None],
        one_pass: Callable[[], Awaitable[bool]],
        gather_s: float = 0.0,
    ) -> None:
        """`gather_s`: how long a pass that wakes asked for waits before it starts, so that the wakes of a
        burst share one pass (a pass that asked for the next one starts at once)."""
        self._admit = admit
        self.gather_s = gather_s
        """How long a woken pass waits before it starts; its owner may change it between passes."""
        self._one_pass = one_pass
        self._running = False
        self._again = False
        self.idle = asyncio.Event()
        """Set while no run is going."""
        self.idle.set()

    def wake(self) -> None:
        """There may be work: run passes unless a run is already going (then it makes one more pass)."""
        if self._running:
            self._again = True
            return
        self._running = True
        self.idle.clear()
        self._admit(self._run())

    async def _run(self) -> None:
        try:
            woken = True
            while True:
                if woken and self.gather_s:
                    await asyncio.sleep(self.gather_s)
                self._again = False
                if await self._one_pass():
                    woken = False
                elif self._again:
                    woken = True
                else:
                    break
        finally:
            self._running = False
            self.idle.set()
