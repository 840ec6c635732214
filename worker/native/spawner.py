"""Spawning a command's process: directly, or from a thread that holds a sandbox's Landlock domain.

Landlock confines a thread and everything it starts afterwards. A `preexec_fn` that confines each child makes
`subprocess` fork the whole worker instead of using vfork, which costs several times the spawn itself. A
`ConfinedSpawner` instead confines one dedicated thread, once, and every child that thread starts inherits the
domain with a plain vfork+exec; the worker's other threads stay unconfined.

Either way the child's exit is watched and its output read by `children.ChildTransport`, on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any


class Spawner:
    """Starts children on the calling (event-loop) thread, unconfined."""

    async def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        """Start `argv` with `subprocess.Popen` options; raises OSError or SubprocessError if it cannot start."""
        return subprocess.Popen(argv, **options)


class ConfinedSpawner(Spawner):
    """A thread that confined itself with `restrict` once; the children it starts inherit the confinement.

    A failed `restrict` makes every spawn fail with SubprocessError, so nothing ever runs unconfined in its
    place. After `close`, spawns fail the same way.
    """

    def __init__(self, restrict: Callable[[], None]) -> None:
        self._restrict = restrict
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="wuu-confined-spawner", daemon=True)
        self._thread.start()

    async def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[subprocess.Popen[bytes]] = loop.create_future()
        if self._closed:
            raise subprocess.SubprocessError("the sandbox is closed")
        self._jobs.put(_Job(argv, options, loop, future))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The thread may be using the caller's fds right now, and may yet start the child: the request
            # ends only after the job has, and nothing it started outlives it.
            await _ended_despite_cancellation(future)
            raise

    def close(self) -> None:
        """Refuse later spawns; the thread ends once the spawns already asked for are answered."""
        if not self._closed:
            self._closed = True
            self._jobs.put(None)

    def _serve(self) -> None:
        try:
            self._restrict()
            refusal = None
        except OSError as error:
            refusal = f"the sandbox could not be applied: {error}"
        while (job := self._jobs.get()) is not None:
            if refusal is not None:
                job.fail(subprocess.SubprocessError(refusal))
                continue
            try:
                child = subprocess.Popen(job.argv, **job.options)
            except BaseException as error:
                job.fail(error)
            else:
                job.answer(child)


class _Job:
    """One spawn asked of the confined thread, answered on the asking loop."""

    __slots__ = ("argv", "future", "loop", "options")

    def __init__(
        self,
        argv: list[str],
        options: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[subprocess.Popen[bytes]],
    ) -> None:
        self.argv, self.options, self.loop, self.future = argv, options, loop, future

    def answer(self, child: subprocess.Popen[bytes]) -> None:
        """Resolve the asking request's future with the child, on its loop (the asker shields the future)."""
        self._call(self.future.set_result, child)

    def fail(self, error: BaseException) -> None:
        """Resolve the asking request's future with the spawn's failure, on its loop."""
        self._call(self.future.set_exception, error)

    def _call(self, settle: Callable[[Any], None], value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is gone
            self.loop.call_soon_threadsafe(settle, value)


async def _ended_despite_cancellation(future: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    """Wait for a cancelled spawn to be answered, then kill and reap the child it started, if any."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((future,))
    if future.exception() is None:
        child = future.result()
        for kill in (os.killpg, os.kill):  # its group, when it leads one (a command does), then itself
            with contextlib.suppress(ProcessLookupError):
                kill(child.pid, signal.SIGKILL)
        await asyncio.to_thread(child.wait)
