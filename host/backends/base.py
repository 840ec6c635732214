"""The one small interface of every backend, and the part they share: a worker running as a child process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES
from wuu.worker.errors import CleanupFailed


class EnvironmentUnavailable(Exception):
    """The environment cannot be provisioned (no engine, a missing image or mount, a refused host key...)."""


class Environment(Protocol):
    """An execution environment with a worker in it."""

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Provision the environment, start the worker, and return its stdout and stdin."""

    async def close(self, budget: float) -> None:
        """Send EOF and wait up to `budget` seconds for the worker and the environment to end.

        After the budget the transport is terminated and CleanupFailed is raised.
        """


class ChildProcess:
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
            limit=WORKER_MAX_FRAME_BYTES,
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
