"""Spawning a command's process: unconfined, or confined by a sandbox that the child enters itself.

A confined child enters its Landlock domain before its command runs, so that every confined command gets a
domain of its own and no thread of the worker is ever in one. A domain held by a worker thread would let the
commands in it signal that thread (killing the worker) or ptrace it (and with it the worker's memory). The
compiled helper enters it between its own spawn and the command's exec (`confine.HelperSpawner`); without the
helper, `ConfinedSpawner` here does it between fork and exec (a `preexec_fn`), at the price of a fork of the
worker per confined spawn instead of a vfork, made cheaper by giving the heap's free memory back first (`heap`).

Either way the child's exit is watched and its output read by `children.ChildTransport`, on the event loop,
and its pid is kept in SPAWNED, which tells the commands' own processes from the orphans the worker adopts
(`trees`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Collection
from typing import Any

from wuu.worker.native import heap


class Spawned:
    """The pids of the children this process has spawned, each kept while a process may still use it as its
    session or process group (so that the number cannot have been given to another process meanwhile).

    Between the fork of a child and its entry here, the child is a child of this process that nothing
    names yet; the lock spans both, and whoever tells children apart by this set holds it too.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        """Held while a child is spawned and entered; hold it to look at the children of this process."""
        self._pids: set[int] = set()

    def popen(self, argv: list[str], options: dict[str, Any]) -> subprocess.Popen[bytes]:
        """`subprocess.Popen(argv, **options)`, entered here before anyone can see the child unnamed."""
        with self.lock:
            child = subprocess.Popen(argv, **options)
            self._pids.add(child.pid)
        return child

    def pids(self, in_use: Collection[int]) -> frozenset[int]:
        """The pids spawned here, once those that no process uses any more (`in_use`: every pid, process
        group and session that some process has) are forgotten. Call it with the lock held."""
        self._pids &= set(in_use)
        return frozenset(self._pids)


SPAWNED = Spawned()
"""The children of this process that its spawners started."""


class Spawner:
    """Starts children on the calling (event-loop) thread, unconfined."""

    async def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        """Start `argv` with `subprocess.Popen` options; raises OSError or SubprocessError if it cannot start."""
        return SPAWNED.popen(argv, options)


class SandboxSpawner(Spawner):
    """Starts children confined by a sandbox; after `close`, every spawn fails with SubprocessError."""

    def __init__(self) -> None:
        self._closed = False

    def close(self) -> None:
        """Refuse later spawns."""
        self._closed = True

    def _refuse_when_closed(self) -> None:
        if self._closed:
            raise subprocess.SubprocessError("the sandbox is closed")


class ConfinedSpawner(SandboxSpawner):
    """Starts children that call `restrict` before they exec, from a thread off the event loop (a fork of the
    whole worker takes a while).

    A `restrict` that fails makes that spawn fail with SubprocessError, so nothing ever runs unconfined in
    its place.
    """

    def __init__(self, restrict: Callable[[], None]) -> None:
        super().__init__()
        self._restrict = restrict

    async def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        self._refuse_when_closed()
        loop = asyncio.get_running_loop()
        spawned = loop.run_in_executor(None, lambda: self._spawn(argv, options))
        try:
            return await asyncio.shield(spawned)
        except asyncio.CancelledError:
            # The thread may be using the caller's fds right now, and may yet start the child: the request
            # ends only after the spawn has, and nothing it started outlives it.
            await _ended_despite_cancellation(spawned)
            raise

    def _spawn(self, argv: list[str], options: dict[str, Any]) -> subprocess.Popen[bytes]:
        heap.trim()  # a fork's cost grows with the worker's resident memory
        try:
            return SPAWNED.popen(argv, {**options, "preexec_fn": self._restrict})
        except subprocess.SubprocessError as error:
            # The child's only Python code is `restrict`: subprocess says no more than that it raised.
            raise subprocess.SubprocessError(f"the sandbox could not be applied: {error}") from None


async def _ended_despite_cancellation(future: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    """Wait for a cancelled spawn to be answered, then kill and reap the child it started, if any."""
    while not future.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((future,))
    if future.exception() is None:
        await abandon(future.result())


async def abandon(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child whose spawn is abandoned, its group first when it leads one (a command does), and reap
    it off the loop (a child stuck in an exec from a hung mount takes its time to die)."""
    for send in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError):
            send(child.pid, signal.SIGKILL)
    await asyncio.to_thread(child.wait)
