"""The commands of a worker that died: adopted by a process above it, and ended once the worker has ended.

A worker that is killed (SIGKILL, a crash) cannot stop the commands it started, and they run on in
sessions of their own. On Linux a process above the worker -- the adapter of a local worker, the supervisor
of a persistent one -- makes itself the child subreaper of its tree (PR_SET_CHILD_SUBREAPER), so such
commands are reparented to it rather than to init, and ends every one of them once the worker has ended:
nothing of the worker outlives it.

Ending orphans ends every child the process has, so only a process whose one child is the worker adopts
them. A process with children of its own besides (a user host: its store's writer, its other workers, its
engines) runs each worker under a reaper process of its own instead, whose one child the worker is.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
from typing import Any

ORPHANS_S = 5.0
"""Seconds a process that has ended its worker's connection spends ending the orphans it inherited."""

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_POLL_S = 0.01


def adopt_orphans() -> bool:
    """Make this process the subreaper of its descendants; False where the platform has none. Only a
    process that serves one worker may: ending orphans ends every child it has."""
    if sys.platform != "linux":
        return False
    return bool(_prctl()(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def adopting() -> bool:
    """Whether this process is the subreaper of its descendants (`adopt_orphans`)."""
    if sys.platform != "linux":
        return False
    import ctypes

    flag = ctypes.c_int(0)
    return _prctl()(_PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag), 0, 0, 0) == 0 and flag.value != 0


@functools.cache
def _prctl() -> Any:
    import ctypes  # only here: a process pays for it once, on Linux

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl


def children() -> list[int]:
    """The pids of this process's children (Linux)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        tasks = f"/proc/{os.getpid()}/task"
        for task in os.listdir(tasks):
            with contextlib.suppress(OSError), open(f"{tasks}/{task}/children") as listed:
                found += [int(pid) for pid in listed.read().split()]
    return found


def kill_orphans() -> bool:
    """One round: SIGKILL every child with its process group and reap those that ended; whether any was found."""
    found = children()
    for pid in found:
        # A command leads a group of its own (the worker starts it with setsid): end the whole group.
        for target in (-pid, pid):
            with contextlib.suppress(OSError):
                os.kill(target, signal.SIGKILL)
    for pid in found:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return bool(found)


def end_orphans_now(timeout_s: float) -> None:
    """`kill_orphans` until no child is left (the descendants of a killed one are reparented here in turn)
    or `timeout_s` has passed. Blocking: for a process that has nothing else to do."""
    deadline = time.monotonic() + timeout_s
    while kill_orphans() and time.monotonic() < deadline:
        time.sleep(_POLL_S)


async def end_orphans(timeout_s: float) -> None:
    """`end_orphans_now` on an event loop: call it only once the worker itself has ended and been waited
    for, when every child left is an orphan."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while kill_orphans() and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
