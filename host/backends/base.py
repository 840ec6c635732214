"""What every backend is, and the part two of them share: a worker running as a local child process."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from wuu.worker.orphans import adopting, end_orphans
from wuu.worker.streams import connect_pipes

from ..prestart import Prestarted, spawn


def cleanup_failed(message: str) -> Exception:
    """A CleanupFailed of `message`; its module loads only when a shutdown fails (it costs start-up time)."""
    from wuu.worker.errors import CleanupFailed

    return CleanupFailed(message)


class Environment(abc.ABC):
    """An execution environment with a worker in it."""

    @abc.abstractmethod
    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Provision the environment, start the worker, and return its stdout and stdin.

        The streams carry the worker's frames as they are: whoever writes to them passes the data of
        every `initialize` through `intercept` first (`wuu-host adapter` does).
        """

    reconnect = False
    """Whether the host's last `initialize` required the existing workspace (a reconnect to retained state);
    noted by `intercept`. An environment made for a reconnect holds nothing retained, and keeps nothing of it."""

    def intercept(self, data: dict[str, Any]) -> dict[str, Any]:
        """Note whether the host's `initialize` data is a reconnect, then give `rewrite_initialize`'s data."""
        self.reconnect = data.get("require_existing_workspace") is True
        return self.rewrite_initialize(data)

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
    """A worker that is a local child process (the local and command backends).

    The commands of a worker that died are ended at `close`, once the worker has ended, and nothing else is:
    - in a process that has made itself the subreaper of its descendants (`wuu.worker.orphans.adopt_orphans`,
      as `wuu-host adapter` does: it serves this one worker), by that process;
    - in any other (a user host, whose store's writer, other workers and engines are its children too), by
      the reaper the worker runs under (`wuu.host.reaper`), whose one child it is.
    A worker `prestarted` while the profile was validated (`wuu.host.prestart`) is used when it runs this
    command.
    """

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None, prestarted: Prestarted | None = None
    ) -> None:
        self._argv = tuple(argv)
        self._env = dict(env) if env is not None else None
        self._prestarted = prestarted
        self.process: subprocess.Popen[bytes] | None = None
        self._stdin: asyncio.StreamWriter | None = None
        self._exit: asyncio.Future[int] | None = None

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        process = self._prestarted.claim(self._argv) if self._prestarted is not None else None
        # Not in the adapter's process group: a terminal's Ctrl-C reaches the adapter alone, which ends the
        # worker by EOF within the budget, as at the host's EOF.
        argv = self._argv if adopting() else (sys.executable, "-m", "wuu.host.reaper", *self._argv)
        self.process = process or spawn(argv, self._env)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._exit = asyncio.ensure_future(asyncio.to_thread(self.process.wait))
        reader, self._stdin, _ = await connect_pipes(self.process.stdout, self.process.stdin)
        return reader, self._stdin

    async def close(self, budget: float) -> None:
        if self.process is None or self._exit is None:
            return
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()
        try:
            returncode = await asyncio.wait_for(asyncio.shield(self._exit), budget)
        except TimeoutError:
            # Its group: the worker under a reaper too. Not once reaped: the id may be another's by then.
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            await self._exit
            raise cleanup_failed(
                f"the worker did not exit within its shutdown budget of {budget:g} s; it was killed"
            ) from None
        finally:
            if adopting():
                await end_orphans(budget)
        if returncode != 0:
            raise cleanup_failed(f"the worker exited with status {returncode}; its cleanup may be incomplete")
