"""Kill -9 per backend: SIGKILL the worker, its relay or the transport at seeded points of a call in flight.

Every point connects the way a host does (`wuu-host adapter` for a profile, or `wuu.worker attach` for the
local persistent worker), puts one call in flight -- a long `execute`, a run of `process/start`s, a waiting
`process/read`, `export/read`s -- and SIGKILLs one process at a seeded moment. Then it checks what a host
relies on:

- the call fails with `ConnectionLost` (its outcome unknown) within the profile's `shutdown_timeout_ms`
  and a margin, and the adapter then ends by itself (never a hang);
- nothing is replayed: every command appends a line to a mark file, and there is one line for the one
  command requested, or at most one more than the starts the host saw answered (the one in flight);
- a persistent worker (ssh, docker `persistent`, `attach`) reconnects: a `process/read` resumes at the
  host's offset, with `Truncated` exactly when the output retained (`output_retention_bytes`) moved past it;
- nothing leaks: no process of the point is left (for persistent workers: once their `lifetime_seconds`
  without a connection is over), and no container of a non-persistent docker profile is left once its
  adapter has ended, except one its failed cleanup kept for inspection and said so.

The kill targets: `worker` (the native worker, or a persistent worker's `serve`), `relay` (`attach`),
`adapter` (`wuu-host adapter`, which holds the docker exec's socket and the SSH connection).
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wuu.worker.client import ConnectionLost, WorkerClient

from .campaign import Campaign, Context, Outcome, leftover_processes, reap_leftovers

FULL_POINTS = 24
"""Kill points per row at scale 1 (the issue asks for at least 20)."""
BUDGET_MS = 3000
"""The profiles' `shutdown_timeout_ms`: the budget a lost connection must be reported within."""
BUDGET_S = BUDGET_MS / 1000
MARGIN_S = 5.0
"""Seconds past the budget allowed for a report (process start-up, a loaded machine)."""
STEP_S = 30.0
"""Seconds any one step of a point (connecting, a request, a wait) may take."""
LIFETIME_S = 5
"""The persistent workers' `lifetime_seconds`: how long they outlive their last connection. Longer than a
reconnect takes on a loaded machine: a worker that idles out before it is lost the process to resume."""
SETTLE_S = 20.0
"""Seconds, past a persistent worker's lifetime, for everything of a point to be gone."""
MAX_DELAY_S = 0.25
"""The kill lands up to this long after the call is in flight."""
RETENTION = 1 << 20
"""The `output_retention_bytes` of the resumed process: the smallest the spec allows, so loss is cheap."""
LINE = b"0123456789abcde\n"
"""What the resumed process writes, over and over: the byte at any offset is known."""
EXPORT_BYTES = 1 << 21
POLL_S = 0.02
SECOND_NS = 1_000_000_000
MARK = "chaos-mark"
"""The file every command of a point appends a line to (relative to the root)."""
COMMAND = f"echo x >> {MARK}; exec sleep 300"
IMAGE = os.environ.get("WUU_DOCKER_IMAGE", "wuu-execution:local")


class Problem(Exception):
    """A point's check failed; the message says what was seen."""


def _tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "tool": name,
        "call": {"id": "call-1", "arguments": json.dumps(arguments)},
        "actor": {"kind": "agent", "id": "chaos"},
        "permission_mode": "unconfined",
    }


async def _ok(client: WorkerClient, method: str, data: dict[str, Any]) -> dict[str, Any]:
    reply = await asyncio.wait_for(client.request(method, data), STEP_S)
    if "data" not in reply:
        raise Problem(f"{method} failed: {reply.get('error')}")
    result: dict[str, Any] = reply["data"]
    return result


async def _until(predicate: Callable[[], object], what: str, timeout_s: float = STEP_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise Problem(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(POLL_S)


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def _innermost(pids: list[int]) -> int:
    """Of processes running one command, the one whose parent is another of them (a worker under a
    supervisor that runs the same command), else the first."""
    return next((pid for pid in pids if _parent(pid) in pids), pids[0])


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                kids = [int(kid) for kid in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found


def _described(pids: list[int], most: int = 5) -> str:
    shown = ", ".join(f"{pid} ({' '.join(_argv(pid))[:80]!r})" for pid in pids[:most])
    return shown + (f" and {len(pids) - most} more" if len(pids) > most else "")


def _worker_in(pids: list[int]) -> int | None:
    """The first of `pids` running the native worker (a wrapper shell or the adapter does not)."""
    return next((pid for pid in pids if "wuu.worker" in _argv(pid)), None)


def _pattern_at(offset: int, size: int) -> bytes:
    start = offset % len(LINE)
    repeated = LINE * ((start + size) // len(LINE) + 1)
    return repeated[start : start + size]


# --- the rigs: how each backend is connected to, and what of it can be killed ----------------------------


@dataclass
class Point:
    """One kill point: its place in the row, its seeded choices, and its own directory and ids."""

    index: int
    rng: random.Random
    directory: Path
    conversation: str
    persistent: bool = False
    root: str = ""
    """The root the host binds (as the host names it)."""
    mark_file: Path = Path()
    """The root's mark file, as this machine sees it."""
    client: WorkerClient | None = None
    target: str = ""
    stderr: str = ""
    """What the adapter wrote to its stderr (a failed cleanup's report)."""
    lingers: bool = False
    """Whether the point's worker outlives its connection (the leak check waits for its lifetime)."""
    notes: list[str] = field(default_factory=list)


class Rig(abc.ABC):
    """A backend under the campaign; subclasses say how to connect and what the kill targets are."""

    targets: tuple[str, ...] = ("worker", "adapter")
    phases: tuple[str, ...] = ("request", "start", "read", "export")

    def __init__(self, ctx: Context, name: str) -> None:
        self.ctx = ctx
        self.name = name
        self.config = ctx.workdir / f"{name}.json"
        self.profiles: dict[str, dict[str, Any]] = {}

    @abc.abstractmethod
    def prepare(self, point: Point) -> None:
        """Choose the point's profile and root (and where its mark file is seen from here)."""

    def profile_name(self, point: Point) -> str:
        return f"chaos-{self.name}-{point.index}"

    def add_profile(self, point: Point, settings: dict[str, Any]) -> None:
        self.profiles[self.profile_name(point)] = {"shutdown_timeout_ms": BUDGET_MS, **settings}
        document = {"execution_environments": {"profiles": self.profiles}}
        self.config.write_text(json.dumps(document), encoding="utf-8")

    async def connect(self, point: Point) -> WorkerClient:
        """A host connection for the point, through `wuu-host adapter` (the worker's cwd is the point's)."""
        argv = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(self.config)]
        env = {**os.environ, "WUU_CONVERSATION": point.conversation}
        spawn = WorkerClient.spawn(
            [*argv, "--profile", self.profile_name(point)], env=env, cwd=point.directory, record=False
        )
        return await asyncio.wait_for(spawn, STEP_S)

    async def victim(self, point: Point, target: str) -> int:
        """The pid to SIGKILL for `target`."""
        assert point.client is not None and point.client.process is not None
        adapter = point.client.process.pid
        if target == "adapter":
            return adapter
        found = _worker_in(_descendants(adapter))
        if found is None:
            raise Problem(f"no worker under the adapter {adapter}")
        return found

    def marks(self, point: Point) -> tuple[str | Path, ...]:
        """What the point's processes carry (command line, environment or working directory)."""
        return (point.directory,)

    def left(self, point: Point) -> str | None:
        """What of the point still runs, or None (blocking: run it in a thread)."""
        pids = leftover_processes(*self.marks(point))
        return f"processes left behind: {_described(pids)}" if pids else None

    def reap(self, point: Point) -> None:
        """End what the point left, so that it does not leak into the next run."""
        reap_leftovers(*self.marks(point))

    def close(self) -> None:  # noqa: B027 (most rigs make nothing outside the work directory)
        """Remove what the row made outside its work directory."""


class LocalRig(Rig):
    """The `local` backend: the native worker as the adapter's child."""

    def prepare(self, point: Point) -> None:
        point.root = str(point.directory / "root")
        point.mark_file = point.directory / "root" / MARK
        self.add_profile(point, {"backend": "local"})


class CommandRig(Rig):
    """The `command` backend, with a wrapper shell that stays the native worker's parent."""

    def prepare(self, point: Point) -> None:
        point.root = str(point.directory / "root")
        point.mark_file = point.directory / "root" / MARK
        wrapper = ["sh", "-c", '"$0" -m wuu.worker; exit $?', sys.executable]
        self.add_profile(point, {"backend": "command", "command": wrapper, "workspace": point.root})


class AttachRig(Rig):
    """The local persistent worker: `wuu.worker attach` relays the host to a `serve` daemon on a socket."""

    targets = ("relay", "worker")
    phases = ("request", "start", "read", "export", "resume")

    def __init__(self, ctx: Context, name: str) -> None:
        super().__init__(ctx, name)
        # Short: a Unix socket's path holds 107 bytes, and a work directory's path may be long.
        self.sockets = Path(tempfile.mkdtemp(prefix="wuu-k9-"))

    def socket(self, point: Point) -> str:
        return str(self.sockets / f"{point.index:04d}.sock")

    def marks(self, point: Point) -> tuple[str | Path, ...]:
        return (point.directory, self.socket(point))

    def prepare(self, point: Point) -> None:
        point.persistent = point.lingers = True
        point.root = str(point.directory / "root")
        point.mark_file = point.directory / "root" / MARK

    async def connect(self, point: Point) -> WorkerClient:
        argv = [sys.executable, "-m", "wuu.worker", "attach", "--socket", self.socket(point)]
        argv += ["--lifetime-seconds", str(LIFETIME_S)]
        spawn = WorkerClient.spawn(argv, cwd=point.directory, record=False)
        return await asyncio.wait_for(spawn, STEP_S)

    async def victim(self, point: Point, target: str) -> int:
        assert point.client is not None and point.client.process is not None
        if target == "relay":
            return point.client.process.pid
        socket = self.socket(point)
        found: list[int] = []

        def look() -> bool:
            found[:] = [pid for pid in _pids() if "serve" in (argv := _argv(pid)) and socket in argv]
            return bool(found)

        await _until(look, f"the worker serving {socket}")
        return _innermost(found)

    def close(self) -> None:
        shutil.rmtree(self.sockets, ignore_errors=True)


class SshRig(Rig):
    """The `ssh` backend against the shared test server: the relay, the detached worker, or the adapter."""

    targets = ("relay", "worker", "adapter")
    phases = ("request", "start", "read", "export", "resume")

    def __init__(self, ctx: Context, name: str) -> None:
        super().__init__(ctx, name)
        service = Path(os.environ["WUU_SSH_TEST_DIR"]) / "service.json"
        self.base: dict[str, Any] = json.loads(service.read_text(encoding="utf-8"))["profile"]
        self.workspace = Path(self.base["workspace"]) / f"chaos-{uuid.uuid4().hex[:10]}"

    def prepare(self, point: Point) -> None:
        point.persistent = point.lingers = True
        workspace = self.workspace / f"{point.index:04d}"
        point.root = str(workspace)
        point.mark_file = workspace / point.conversation / MARK
        self.add_profile(point, {**self.base, "workspace": str(workspace), "lifetime_seconds": LIFETIME_S})

    def _socket(self, point: Point) -> str:
        return f"{point.root}/.wuu-{point.conversation}/worker.sock"

    async def victim(self, point: Point, target: str) -> int:
        if target == "adapter":
            return await super().victim(point, target)
        verb = "attach" if target == "relay" else "serve"
        socket = self._socket(point)
        found: list[int] = []

        def look() -> bool:
            found[:] = [
                pid
                for pid in _pids()
                if verb in (argv := _argv(pid)) and socket in argv and "wuu.worker" in argv
            ]
            return bool(found)

        await _until(look, f"the {target} of {socket}")
        return _innermost(found)

    def marks(self, point: Point) -> tuple[str | Path, ...]:
        return (point.directory, point.root)  # the server's processes carry the point's workspace

    def close(self) -> None:
        reap_leftovers(self.workspace)
        shutil.rmtree(self.workspace, ignore_errors=True)


class DockerRig(Rig):
    """The `docker` backend: half the points persistent (resumable), half with a container per connection."""

    targets = ("worker", "adapter")
    phases = ("request", "start", "read", "export", "resume")

    def __init__(self, ctx: Context, name: str) -> None:
        super().__init__(ctx, name)
        import docker

        self.engine = docker.from_env()
        self.label = f"chaos-{uuid.uuid4().hex[:8]}"

    def profile_name(self, point: Point) -> str:
        return f"{self.label}-{point.index}"

    def prepare(self, point: Point) -> None:
        point.persistent = point.lingers = point.rng.random() < 0.5
        mount = point.directory / "root"
        mount.mkdir(parents=True, exist_ok=True)
        point.root = "/workspace"
        point.mark_file = mount / MARK
        settings = {
            "backend": "docker",
            "image": IMAGE,
            "workspace": "/workspace",
            "host_workspace": str(mount),
            "network": "none",
            "persistent": point.persistent,
            "lifetime_seconds": LIFETIME_S,
        }
        self.add_profile(point, settings)

    def _containers(self, point: Point) -> list[Any]:
        found: list[Any] = self.engine.containers.list(
            all=True, filters={"label": f"wuu.profile={self.profile_name(point)}"}
        )
        return found

    def _workers(self, point: Point) -> list[tuple[int, list[str]]]:
        """The native workers in the point's container: host pids and command lines."""
        rows = []
        for container in self._containers(point):
            if container.status != "running":
                continue
            with contextlib.suppress(Exception):  # stopped meanwhile
                for pid, _ in _top(container):
                    if "wuu.worker" in _argv(pid):
                        rows.append((pid, _argv(pid)))
        return rows

    async def victim(self, point: Point, target: str) -> int:
        if target == "adapter":
            return await super().victim(point, target)
        verb = "serve" if point.persistent else None
        found: list[int] = []

        def look() -> bool:
            found[:] = [pid for pid, argv in self._workers(point) if verb is None or verb in argv]
            return bool(found)

        await _until(look, "the worker in the container")
        return _innermost(found)

    def left(self, point: Point) -> str | None:
        """What of the point is left in the engine, or None.

        A persistent worker must be gone after its lifetime (its container stays, by design). A container
        without retention must be gone once its adapter has ended -- except one that a failed cleanup (its
        worker was killed) kept for inspection, saying so on the adapter's stderr.
        """
        if point.persistent:
            workers = self._workers(point)
            if workers:
                return f"a persistent worker outlived its lifetime: {workers}"
        else:
            names = [
                c.name for c in self._containers(point) if f"container {c.name} is kept" not in point.stderr
            ]
            if names:
                return f"containers left after their adapter ended: {names}"
        return super().left(point)

    def close(self) -> None:
        for name in self.profiles:
            for container in self.engine.containers.list(all=True, filters={"label": f"wuu.profile={name}"}):
                with contextlib.suppress(Exception):
                    container.remove(force=True)
        self.engine.close()


def _top(container: Any) -> list[tuple[int, str]]:
    table = container.top(ps_args="-eo pid,args")
    titles = table["Titles"]
    pid_at = titles.index("PID")
    return [(int(row[pid_at]), row[-1]) for row in table.get("Processes") or []]


# --- the calls in flight ----------------------------------------------------------------------------------


@dataclass
class InFlight:
    """A call in flight: the task that makes it, and what must hold before the kill."""

    task: asyncio.Task[None]
    ready: Callable[[], bool]
    answered: list[int] = field(default_factory=lambda: [0])
    """How many `process/start`s were answered (the no-replay check)."""


async def _begin(point: Point, phase: str) -> InFlight:
    client = point.client
    assert client is not None
    if phase == "request":
        # One long `execute`: in flight once its command has written its mark.
        call = client.request("execute", _tool("exec_command", argv=["sh", "-c", COMMAND]))
        task = asyncio.ensure_future(_discard(call))
        return InFlight(task, lambda: _lines(point.mark_file) >= 1)
    if phase == "start":
        answered = [0]

        async def starts() -> None:
            while True:
                await _ok(
                    client, "process/start", {"argv": ["sh", "-c", COMMAND], "permission_mode": "unconfined"}
                )
                answered[0] += 1

        return InFlight(asyncio.ensure_future(starts()), lambda: answered[0] >= 1, answered)
    if phase == "read":
        record = await _ok(
            client,
            "process/start",
            {"argv": ["sh", "-c", f"echo ready; {COMMAND}"], "permission_mode": "unconfined"},
        )
        read = {"Process": record["id"], "OffsetBytes": 6, "Wait": 60 * SECOND_NS}
        task = asyncio.ensure_future(_discard(client.request("process/read", read)))
        return InFlight(task, lambda: _lines(point.mark_file) >= 1, [1])
    if phase == "export":
        script = f"head -c {EXPORT_BYTES} /dev/zero > export.bin"
        await _ok(client, "execute", _tool("exec_command", argv=["sh", "-c", script]))
        snapshot = await _ok(client, "export/open", {"path": "export.bin"})
        if snapshot["size"] != EXPORT_BYTES:
            raise Problem(f"export/open: size {snapshot['size']}, not {EXPORT_BYTES}")
        reads = [0]

        async def export_reads() -> None:
            offset = 0
            while True:
                chunk = await _ok(
                    client,
                    "export/read",
                    {"token": snapshot["token"], "offset": offset, "max_bytes": 1 << 18},
                )
                data = base64.b64decode(chunk["data"])
                if data != bytes(min(1 << 18, EXPORT_BYTES - offset)):
                    raise Problem(f"export/read at {offset}: {len(data)} bytes that are not the file's")
                offset = 0 if chunk["eof"] else offset + len(data)
                reads[0] += 1

        return InFlight(asyncio.ensure_future(export_reads()), lambda: reads[0] >= 1)
    raise AssertionError(phase)


async def _discard(call: Awaitable[Any]) -> None:
    await call
    raise Problem("the call was answered although its worker was killed")


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


# --- one point --------------------------------------------------------------------------------------------


async def _kill_point(rig: Rig, point: Point) -> str:
    """Run one point; what it did (for the log). Raises Problem on a failed check."""
    rng = point.rng
    phase = rng.choice(rig.phases if point.persistent else tuple(p for p in rig.phases if p != "resume"))
    # A resumed read needs the worker to survive: only its relay or the transport is killed then.
    target = point.target = rng.choice(tuple(t for t in rig.targets if t != "worker" or phase != "resume"))
    delay = rng.uniform(0, MAX_DELAY_S)
    point.notes.append(f"{phase}, kill {target} {delay * 1000:.0f} ms in")
    if phase == "resume":
        await _resume_point(rig, point, target, delay)
        return point.notes[-1]
    client = point.client = await rig.connect(point)
    await _ok(client, "initialize", _binding(point))
    # Found before the call: once it runs, the worker's children are briefly copies of it (fork, then exec).
    victim = await rig.victim(point, target)
    flight = await _begin(point, phase)
    await _until(lambda: flight.ready() or flight.task.done(), f"the {phase} call to be in flight")
    if flight.task.done():
        flight.task.result()  # its failure, said as it is
    await asyncio.sleep(delay)  # the seeded kill point within the call
    await _kill(rig, point, victim, flight)
    marks = _lines(point.mark_file)
    answered = flight.answered[0]
    # At most one more than answered: the start in flight may have run. (Fewer is no replay: the newest
    # command may have been killed before it wrote its mark.)
    if phase == "start" and marks > answered + 1:
        raise Problem(
            f"{answered} process/start answered but {marks} processes started: a request was replayed"
        )
    if phase in ("request", "read") and marks != 1:
        raise Problem(f"one command was requested but {marks} ran: a request was replayed")
    return point.notes[-1]


async def _kill(rig: Rig, point: Point, victim: int, flight: InFlight) -> None:
    """SIGKILL the target; the call must fail with ConnectionLost within the budget, and the adapter end."""
    client = point.client
    assert client is not None
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    limit = BUDGET_S + MARGIN_S
    try:
        await asyncio.wait_for(flight.task, limit)
    except ConnectionLost:
        pass
    except TimeoutError:
        assert client.process is not None
        running = (
            [client.process.pid, *_descendants(client.process.pid)]
            if client.process.returncode is None
            else []
        )
        raise Problem(
            f"the call did not fail within {limit:g} s of the kill: the host hangs; still running: the adapter's "
            f"tree {_described(running) or 'none'}; the point's {rig.left(point) or 'none'}"
        ) from None
    took = time.monotonic() - killed
    if took > limit:
        raise Problem(f"ConnectionLost came {took:.1f} s after the kill, past the budget of {limit:g} s")
    point.notes[-1] += f", lost {took * 1000:.0f} ms after the kill"
    outcome = await client.close(limit)
    point.stderr += outcome.stderr.decode(errors="replace")
    if outcome.killed:
        raise Problem(f"the adapter did not end by itself within {limit:g} s of losing its worker")


def _binding(point: Point) -> dict[str, Any]:
    return {"version": 4, "root": point.root, "session": "chaos"}


async def _resume_point(rig: Rig, point: Point, target: str, delay: float) -> None:
    """A persistent worker's process read, cut by a kill and resumed over a new connection by offset."""
    rng = point.rng
    first_size = len(LINE) * rng.randint(1, 2048)
    lossy = rng.random() < 0.5
    lines = rng.randint(2 * RETENTION, 3 * RETENTION) if lossy else rng.randint(1, 2048)
    second_size = len(LINE) * (lines // len(LINE) if lossy else lines)
    text = LINE.decode().strip()
    script = f"yes {text} | head -c {first_size}; read _; yes {text} | head -c {second_size}; {COMMAND}"
    client = point.client = await rig.connect(point)
    await _ok(client, "initialize", _binding(point))
    victim = await rig.victim(point, target)
    start = {"argv": ["sh", "-c", script], "permission_mode": "unconfined", "stdin": True}
    retention: int | None = RETENTION
    reply = await asyncio.wait_for(
        client.request("process/start", {**start, "output_retention_bytes": RETENTION}), STEP_S
    )
    if "error" in reply and "output_retention_bytes" in str(reply["error"]):
        retention = None  # a worker from before the option: only its guaranteed 1 MiB is known
        reply = await asyncio.wait_for(client.request("process/start", start), STEP_S)
    if "data" not in reply:
        raise Problem(f"process/start failed: {reply.get('error')}")
    process = reply["data"]["id"]
    cut = rng.randint(1, first_size)
    got = await _ok(
        client,
        "process/read",
        {"Process": process, "OffsetBytes": 0, "MaxBytes": cut, "Wait": 10 * SECOND_NS},
    )
    _check_chunk(got, 0)
    offset = got["EndOffset"]
    waiting = {"Process": process, "OffsetBytes": first_size, "Wait": 60 * SECOND_NS}
    flight = InFlight(asyncio.ensure_future(_discard(client.request("process/read", waiting))), lambda: True)
    await asyncio.sleep(delay)
    await _kill(rig, point, victim, flight)
    lost = time.monotonic()

    client = point.client = await rig.connect(point)
    await _ok(client, "initialize", _binding(point))
    if (took := time.monotonic() - lost) > LIFETIME_S:
        raise Problem(f"the reconnect took {took:.1f} s, past the worker's lifetime of {LIFETIME_S} s")
    await _ok(client, "process/write", {"id": process, "data": base64.b64encode(b"\n").decode()})
    total = first_size + second_size
    seen: dict[str, Any] = {}

    async def written() -> bool:
        seen.update(await _ok(client, "process/read", {"Process": process, "OffsetBytes": total, "Wait": 0}))
        return bool(seen["TotalBytes"] >= total)

    deadline = time.monotonic() + STEP_S
    while not await written():
        if time.monotonic() > deadline:
            raise Problem(f"the process wrote {seen.get('TotalBytes')} of {total} bytes")
        await asyncio.sleep(POLL_S)
    if seen["TotalBytes"] != total:
        raise Problem(f"TotalBytes {seen['TotalBytes']}, not the {total} the process wrote")
    resumed = await _ok(client, "process/read", {"Process": process, "OffsetBytes": offset})
    _check_chunk(resumed, offset)
    truncated, begins = resumed["Truncated"], resumed["StartOffset"]
    if truncated != (begins > offset):
        raise Problem(f"Truncated {truncated} with StartOffset {begins} for OffsetBytes {offset}")
    if retention is not None and begins != max(offset, total - retention):
        raise Problem(
            f"the read resumed at {begins}, not {max(offset, total - retention)} (retention {retention})"
        )
    if total - offset <= RETENTION and truncated:
        raise Problem(f"Truncated although only {total - offset} bytes came after the offset")
    point.notes[-1] += f", resumed at {begins} of {total} ({'truncated' if truncated else 'whole'})"
    await _ok(client, "process/stop", {"id": process})
    outcome = await client.close(BUDGET_S + MARGIN_S)
    if outcome.killed:
        raise Problem("the adapter did not end by itself after the reconnect's EOF")


def _check_chunk(chunk: dict[str, Any], offset: int) -> None:
    data = base64.b64decode(chunk["Output"])
    begins = chunk["StartOffset"]
    if begins < offset or chunk["EndOffset"] != begins + len(data) or data != _pattern_at(begins, len(data)):
        raise Problem(
            f"process/read at {offset}: {len(data)} bytes from {begins} that the process did not write"
        )


# --- a row ------------------------------------------------------------------------------------------------


async def _row(ctx: Context, name: str, make: Callable[[Context, str], Rig]) -> Outcome:
    outcome = Outcome()
    rig = make(ctx, name.partition(".")[2])
    points: list[Point] = []
    problems: dict[int, str] = {}
    try:
        for index in range(ctx.size(FULL_POINTS)):
            rng = random.Random(f"{ctx.seed}/{name}/{index}")
            directory = ctx.workdir / f"{name}-{index:04d}"  # equal widths: no name is a prefix of another
            (directory / "root").mkdir(parents=True, exist_ok=True)
            point = Point(index, rng, directory, f"c{index}-{rng.getrandbits(32):08x}")
            rig.prepare(point)
            points.append(point)
            outcome.runs += 1
            try:
                ctx.log(f"{name} point {index}: {await _kill_point(rig, point)}")
            except (Problem, ConnectionLost, TimeoutError, OSError) as error:
                said = str(error) if isinstance(error, Problem) else f"{type(error).__name__}: {error}"
                stderr = point.client.stderr.decode(errors="replace").strip() if point.client else ""
                problems[index] = said + (f" (its stderr ends: {stderr[-300:]!r})" if stderr else "")
            finally:
                client = point.client
                if client is not None and client.process is not None and client.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        client.process.kill()
                    await client.close(1)
        # Persistent workers outlive their connection by their lifetime: check once for all points.
        deadline = time.monotonic() + SETTLE_S + (LIFETIME_S if any(point.lingers for point in points) else 0)
        pending = points
        while pending and time.monotonic() < deadline:
            pending = [point for point in pending if await asyncio.to_thread(rig.left, point)]
            await asyncio.sleep(POLL_S)
        for point in points:
            left = await asyncio.to_thread(rig.left, point)
            if left:
                problems.setdefault(point.index, left)
            rig.reap(point)
    finally:
        rig.close()
    for index, why in sorted(problems.items()):
        notes = "; ".join(points[index].notes) if index < len(points) else ""
        outcome.failures.append(
            f"{name} point {index} (seed {ctx.seed}; {notes}): {why}; rerun: {ctx.rerun(name)}"
        )
    return outcome


def _campaign(name: str, make: Callable[[Context, str], Rig], needs: str | None = None) -> Campaign:
    async def run(ctx: Context) -> Outcome:
        return await _row(ctx, name, make)

    return Campaign(name, run, needs)


CAMPAIGNS = [
    _campaign("kill9.local", LocalRig),
    _campaign("kill9.command", CommandRig),
    _campaign("kill9.persistent", AttachRig),
    _campaign("kill9.docker", DockerRig, "docker"),
    _campaign("kill9.ssh", SshRig, "ssh"),
]
