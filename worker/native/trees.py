"""A command's process tree: which processes it holds, signalling them, and waiting until none is left.

Every command leads a session of its own (pid = process group = session), so its tree is, first, the
processes of that session and of that process group, with their descendants wherever they went: a
descendant that calls `setsid` is traced through its parent. One whose parent has ended meanwhile can no
longer be traced so; as the worker is the child subreaper of its commands (`wuu.worker.orphans`), such a
process becomes a child of the worker, in a session that no command leads. Nothing tells which command it
came from, only when it started: a tree with a start (`since`, an `exec_command`, whose reply nothing of
it may outlive) also holds every such orphan that started since then, and so may end one that another
command running at the time started. Processes that others start for a command (a service manager, a
remote shell) are not in its tree.

Everything is read from /proc; the worker's own zombie orphans are reaped on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass

from wuu.generated.plain import ErrorCode
from wuu.worker.errors import WorkerError
from wuu.worker.native.spawner import SPAWNED

# How long a tree may take to vanish after KILL before it counts as unkillable (uninterruptible sleep).
_KILL_WAIT_S = 5.0
# Polling interval while waiting for a tree to vanish: starts short, backs off.
_POLL_MIN_S = 0.001
_POLL_MAX_S = 0.05
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_DEAD = (b"Z", b"X")


@dataclass(frozen=True, slots=True)
class _Entry:
    """One process of /proc/<pid>/stat."""

    state: bytes
    parent: int
    group: int
    session: int
    start: int  # clock ticks since boot


def now_tick() -> int:
    """The clock tick since boot (as /proc gives process start times) of this moment: every process
    started from now on has a start tick at least this. 0 where there is no such clock (nor /proc)."""
    if not hasattr(time, "CLOCK_BOOTTIME"):
        return 0
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) * _TICKS_PER_S // 1_000_000_000


class Tree:
    """The process tree of the command whose first process is `leader`; with `since` (a `now_tick()` taken
    before it was spawned) it also holds the orphans the worker adopted that started since then."""

    def __init__(self, leader: int, since: int | None = None) -> None:
        self.leader = leader
        self.since = since
        # Every pid once found in the tree: a member whose parent is killed stays one, though it can no
        # longer be traced to the leader.
        self._known: set[int] = set()

    def alive(self) -> bool:
        """Whether a process of the tree is still running (a zombie is not)."""
        return self._look(None)

    def send(self, signum: signal.Signals) -> None:
        """Send `signum` to every process of the tree."""
        self._look(signum)

    async def end(self, leader_exited: asyncio.Future[None], first: signal.Signals, grace_s: float) -> None:
        """Send `first` to the tree, KILL what outlives `grace_s`, and wait until none of it is left (the
        leader reaped: `leader_exited`). Raises WorkerError `internal` when something outlives KILL."""
        self.send(first)
        if first is not signal.SIGKILL:
            if await self._vanished(leader_exited, grace_s, None):
                return
            self.send(signal.SIGKILL)
        if not await self._vanished(leader_exited, _KILL_WAIT_S, signal.SIGKILL):
            raise WorkerError(
                ErrorCode.INTERNAL,
                f"the process tree of {self.leader} outlived SIGKILL by {_KILL_WAIT_S:g} s",
            )

    async def _vanished(
        self, leader_exited: asyncio.Future[None], timeout_s: float, resend: signal.Signals | None
    ) -> bool:
        """Wait up to `timeout_s` until the leader is reaped and no process of the tree runs; `resend` goes
        to what is left on every look (what the tree started since the last one included)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # The leader is the worker's child; until asyncio reaps it, its zombie holds the group.
        done, _ = await asyncio.wait((leader_exited,), timeout=timeout_s)
        if not done:
            return False
        delay = _POLL_MIN_S
        while self._look(resend):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(delay, remaining))
            delay = min(2 * delay, _POLL_MAX_S)
        return True

    def _look(self, signum: signal.Signals | None) -> bool:
        """Whether a process of the tree still runs, and when one does and `signum` is given, send it to
        the tree: its process group at once (what it forks meanwhile included), the others by pid."""
        table, spawned = _snapshot()
        if not table:  # no /proc to look closer: the process group is all there is to see
            running = _group_exists(self.leader)
            if running and signum is not None:
                _signal_group(self.leader, signum)
            return running
        members = self._members(table, spawned)
        running = any(table[pid].state not in _DEAD for pid in members)
        if running and signum is not None:
            _signal_group(self.leader, signum)
            for pid in members:
                if table[pid].group != self.leader:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signum)
        return running

    def _members(self, table: dict[int, _Entry], spawned: frozenset[int]) -> set[int]:
        """The pids of `table` in the tree (`spawned`: the pids the spawners started)."""
        roots = {pid for pid, entry in table.items() if self.leader in (entry.group, entry.session)}
        if self.since is not None:
            me = os.getpid()
            roots |= {
                pid
                for pid, entry in table.items()
                if entry.parent == me
                and pid not in spawned
                and entry.session not in spawned
                and entry.start >= self.since
            }
        children: dict[int, list[int]] = {}
        for pid, entry in table.items():
            children.setdefault(entry.parent, []).append(pid)
        pending = list(roots | (self._known & table.keys()))
        found = set(pending)
        while pending:
            for child in children.get(pending.pop(), []):
                if child not in found:
                    found.add(child)
                    pending.append(child)
        self._known |= found
        return found


def running(trees: list[Tree]) -> list[Tree]:
    """The trees of `trees` of which a process still runs (a zombie does not), from one look at /proc."""
    table, spawned = _snapshot()
    if not table:
        return [tree for tree in trees if _group_exists(tree.leader)]
    return [
        tree for tree in trees if any(table[pid].state not in _DEAD for pid in tree._members(table, spawned))
    ]


def _snapshot() -> tuple[dict[int, _Entry], frozenset[int]]:
    """Every process, and the pids the spawners started, as of one moment when no spawn is under way.

    On the way it reaps the worker's children that ended and that no spawner started: orphans it adopted as
    their subreaper, which nothing else waits for (a zombie stays one until its parent reaps it).
    """
    with SPAWNED.lock:
        table = _table()
        spawned = SPAWNED.pids(_in_use(table))
    me = os.getpid()
    for pid, entry in table.items():
        if entry.parent == me and entry.state in _DEAD and pid not in spawned:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    return table, spawned


def _in_use(table: dict[int, _Entry]) -> set[int]:
    """Every pid that a process has as its own, its process group or its session."""
    used = set(table)
    for entry in table.values():
        used.add(entry.group)
        used.add(entry.session)
    return used


def _table() -> dict[int, _Entry]:
    """Every process, from /proc (empty where there is none)."""
    table: dict[int, _Entry] = {}
    try:
        entries = os.scandir("/proc")
    except OSError:
        return table
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                fd = os.open(f"/proc/{entry.name}/stat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue  # it ended while we looked
            try:
                stat = os.read(fd, 4096)
            except OSError:
                continue
            finally:
                os.close(fd)
            # After "pid (comm) " (comm may itself hold ") "): state, ppid, pgrp, session, ... and the
            # start time, field 22 of the line.
            fields = stat[stat.rindex(b")") + 2 :].split()
            table[int(entry.name)] = _Entry(
                fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
            )
    return table


def _signal_group(group: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is already gone
        os.killpg(group, signum)


def _group_exists(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member runs as another user: it exists
    return True
