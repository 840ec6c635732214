"""What every backend is, and the part two of them share: a worker running as a local child process."""

from __future__ import annotations

import abc
import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from wuu.worker.errors import CleanupFailed
from wuu.worker.framing import reader_limit

INSTALLED_WORKER = (sys.executable, "-m", "wuu.worker")
"""The native worker of this installation: a profile's `worker` when it is omitted, where the worker
runs with this installation's paths (locally, or on a server installed alike)."""


class Environment(abc.ABC):
    """An execution environment with a worker in it."""

    @abc.abstractmethod
    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Provision the environment, start the worker, and return its stdout and stdin.

        The streams carry the worker's frames as they are: whoever writes to them passes the data of
        every `initialize` through `rewrite_initialize` first (`wuu-host adapter` does).
        """

    def rewrite_initialize(self, data: dict[str, Any]) -> dict[str, Any]:
        """The initialize data this environment's worker gets for the host's `data`: a new dict, or `data`
        itself when nothing changes. Equal data gives equal data, every time."""
        return data

    @abc.abstractmethod
    async def close(self, budget: float) -> None:
        """Send EOF and wait up to `budget` seconds for the worker and the environment to end.

        After the budget the transport is terminated and CleanupFailed is raised.
        """


class ChildProcess(Environment):
    """A worker that is a local child process (the local and command backends)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self._argv = list(argv)
        self._env = dict(env) if env is not None else None
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.process = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=self._env,
            limit=reader_limit(),
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        return self.process.stdout, self.process.stdin

    async def close(self, budget: float) -> None:
        if self.process is None:
            return
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        try:
            returncode = await asyncio.wait_for(self.process.wait(), budget)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise CleanupFailed(
                f"the worker did not exit within its shutdown budget of {budget:g} s; it was killed"
            ) from None
        if returncode != 0:
            raise CleanupFailed(f"the worker exited with status {returncode}; its cleanup may be incomplete")
