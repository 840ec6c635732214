"""What many tests share: the repository's paths, the worker commands, the data of requests and the reading
of replies, and waits on workers and their processes.

Every wait polls a condition with a deadline and fails naming what it waited for; nothing sleeps and hopes.
Shapes the spec defines (the keys of a process record, of a `process/read` result) come from its schema.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import inspect
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from wuu.conformance.runner import Status, run_all
from wuu.conformance.worker.suite import WORKER
from wuu.generated import validators
from wuu.worker.client import WorkerClient
from wuu.worker.errors import WorkerError, split_error
from wuu.worker.native.run_code import find_node

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root."""
FIXTURES = ROOT / "tests" / "worker" / "fixtures"
"""Workers written for the tests (an SDK worker, a delegating worker)."""

NATIVE_WORKER = [sys.executable, "-m", "wuu.worker"]
"""The native reference worker on stdio."""
DELEGATING_WORKER = [sys.executable, str(FIXTURES / "delegating_worker.py")]
"""The native worker behind `delegate_execution_backend_v4`, auditing `execute` (the README's example)."""
SDK_WORKER = [sys.executable, str(FIXTURES / "sdk_worker.py")]
"""A worker built on the SDK whose tools exercise the SDK's rules (sleep, echo, fail, callback, ...)."""

DEADLINE = 20.0
"""Seconds a test waits for anything before it fails (generous: the suite runs on loaded machines)."""
SECOND_NS = 1_000_000_000
MIB = 1024 * 1024
SESSION = "thread-1"
"""The session every test binds (a process record's `root_thread_id`)."""
MINIMAL_ENV = {"PATH": "/usr/bin:/bin"}
"""The environment of commands a test starts itself: enough to find `sh` and `sleep`, nothing else."""
SECRET = "WUU_SECRET_TEST"
"""A variable of a worker's own environment that no command it runs may see."""

Spawner = Callable[..., Awaitable[WorkerClient]]
"""A fixture that starts worker processes and closes them after the test."""


# --- requests and replies -------------------------------------------------------------------------------


def binding(root: str | Path, **extra: Any) -> dict[str, Any]:
    """The data of an `initialize` request binding `root` and SESSION, plus `extra` fields."""
    return {"version": 4, "root": str(root), "session": SESSION, **extra}


def tool_request(
    name: str, /, *, mode: str = "standard", raw: str | None = None, **arguments: Any
) -> dict[str, Any]:
    """The data of an `execute` request: an agent calls tool `name` in permission `mode`.

    The call's arguments are `arguments` as a JSON object, or `raw`: the exact text to send, JSON or not.
    """
    assert raw is None or not arguments, "give the arguments either as fields or as raw text"
    return {
        "tool": name,
        "call": {"id": "call-1", "arguments": json.dumps(arguments) if raw is None else raw},
        "actor": {"kind": "agent", "id": "agent-1"},
        "permission_mode": mode,
    }


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    """The data of a successful reply frame (fails, showing the frame, on an error reply)."""
    assert "data" in reply, reply
    data: dict[str, Any] = reply["data"]
    return data


def code(reply: dict[str, Any]) -> str:
    """The error code of an error reply frame (fails, showing the frame, on a successful reply)."""
    assert "error" in reply, reply
    return split_error(str(reply["error"]))[0]


async def initialize(client: WorkerClient, root: str | Path, **extra: Any) -> dict[str, Any]:
    """Bind `client` with `binding(root, **extra)`; the data of its successful `initialize` reply."""
    return ok(await client.request("initialize", binding(root, **extra)))


async def run_tool(
    client: WorkerClient, name: str, /, *, mode: str = "standard", **arguments: Any
) -> dict[str, Any]:
    """The reply frame of one `execute` of tool `name` with `arguments`."""
    return await client.request("execute", tool_request(name, mode=mode, **arguments))


async def request_ok(
    client: WorkerClient, method: str, data: Mapping[str, Any], *, timeout_s: float = DEADLINE
) -> dict[str, Any]:
    """The data of the successful reply to one `method` request, which must come within `timeout_s` seconds.

    An error reply fails, showing the frame and what the worker (or adapter) has written to stderr so far.
    """
    reply = await asyncio.wait_for(client.request(method, data), timeout_s)
    assert "data" in reply, f"{method} failed: {reply}; stderr: {client.stderr!r}"
    return ok(reply)


# --- waiting ----------------------------------------------------------------------------------------------


async def until(predicate: Callable[[], object], what: str, timeout_s: float = DEADLINE) -> None:
    """Poll `predicate` until it holds; fail, naming `what` was awaited, after `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(0.02)


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie that nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


def parent(pid: int) -> int | None:
    """The parent of `pid`, None once it has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def carrying(marker: str) -> list[int]:
    """The live processes whose command line carries `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue  # it ended while we looked
    return found


def children(pid: int) -> list[int]:
    """The pids of the child processes of `pid`."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def suspended(*tasks: asyncio.Task[Any]) -> bool:
    """Whether every one of `tasks` has begun and now awaits something: none is still to start, none done.

    A test waits for this before it cancels or wakes a call, so that what it does meets the call under way.
    """
    return all(
        isinstance(coroutine := task.get_coro(), Coroutine)
        and inspect.getcoroutinestate(coroutine) == inspect.CORO_SUSPENDED
        for task in tasks
    )


async def assert_gone(*pids: int, timeout_s: float = DEADLINE) -> None:
    """Wait until none of `pids` is alive; fail after `timeout_s` seconds."""
    await until(lambda: not any(alive(pid) for pid in pids), f"processes {pids} to end", timeout_s)


async def own_session(pid: int) -> None:
    """Wait until `pid` leads a session of its own (its `setsid` has run)."""

    def session_id() -> int:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return int(stat[stat.rindex(b")") + 2 :].split()[3])

    await until(lambda: session_id() == pid, f"{pid} to leave its session")


async def pid_from_file(path: Path, pending: asyncio.Task[Any]) -> int:
    """Wait until the command behind `pending` has written its pid (a full line) to `path`."""

    def written() -> bool:
        assert not pending.done(), f"the command ended before it wrote {path}: {pending}"
        return path.exists() and path.read_text().endswith("\n")

    await until(written, f"a pid in {path}")
    return int(path.read_text())


def same_path(a: str | Path, b: str | Path) -> bool:
    """Whether `a` and `b` name the same file once symlinks are resolved."""
    return os.path.realpath(a) == os.path.realpath(b)


def release_fifo(fifo: Path) -> None:
    """Open both ends of `fifo` without blocking, so that a worker stuck opening it gets on."""
    fds = []
    for flags in (os.O_RDONLY, os.O_WRONLY):
        with contextlib.suppress(OSError):
            fds.append(os.open(fifo, flags | os.O_NONBLOCK))
    for fd in fds:
        os.close(fd)


# --- background processes (process.start.v1) ------------------------------------------------------------

_PROCESS_RECORD: dict[str, Any] = validators.bundle()["$defs"]["ExecutionProcessV4"]
RECORD_KEYS = frozenset(_PROCESS_RECORD["properties"])
"""The keys an ExecutionProcessV4 record may have."""
REQUIRED_RECORD_KEYS = frozenset(_PROCESS_RECORD["required"])
"""The keys every ExecutionProcessV4 record has."""
READ_RESULT_KEYS = frozenset(validators.bundle()["$defs"]["ProcessReadResult"]["properties"])
"""The keys of a `process/read` result (Go casing)."""
RFC3339 = re.compile(_PROCESS_RECORD["properties"]["started_at"]["pattern"])
"""A record's timestamps: RFC 3339, as the schema's pattern checks them."""

# A shell that ignores TERM and starts a grandchild inheriting that; it prints the grandchild's pid and its
# own, then waits.
STUBBORN_TREE = ["sh", "-c", "trap '' TERM; sleep 1000 & echo $!; echo $$; wait"]
# The same tree without the trap.
PLAIN_TREE = ["sh", "-c", "sleep 1000 & echo $!; echo $$; wait"]
# A shell whose background child starts a session of its own (leaves the process group) but stays its child.
SESSION_LEAVER = ["sh", "-c", "setsid sleep 1000 & echo $!; wait"]


async def start(client: WorkerClient, argv: list[str], **params: Any) -> dict[str, Any]:
    """Start a background process (in `standard` unless `permission_mode` is given); its record."""
    params.setdefault("permission_mode", "standard")
    return ok(await client.request("process/start", {"argv": argv, **params}))


async def read(client: WorkerClient, process_id: str, **params: int) -> dict[str, Any]:
    """The result of one `process/read` with `params` (Go-cased: OffsetBytes, MaxBytes, Wait, MinDwell)."""
    return ok(await client.request("process/read", {"Process": process_id, **params}))


async def wait_ended(client: WorkerClient, process_id: str) -> dict[str, Any]:
    """Poll `process/get` until the record has ended; the final record."""
    deadline = time.monotonic() + DEADLINE
    while True:
        record = ok(await client.request("process/get", {"id": process_id}))
        if record["status"] != "running":
            return record
        assert time.monotonic() < deadline, f"process {process_id} still running"
        await asyncio.sleep(0.02)


async def output_until(client: WorkerClient, process_id: str, done: Callable[[bytes], bool]) -> bytes:
    """Long-poll a process's output from offset 0 until `done(output)` holds or the output has ended."""
    deadline = time.monotonic() + DEADLINE
    data, offset = b"", 0
    while not done(data):
        assert time.monotonic() < deadline, f"process {process_id} output so far: {data!r}"
        result = await read(client, process_id, OffsetBytes=offset, Wait=SECOND_NS // 2, MaxBytes=8 * MIB)
        data += base64.b64decode(result["Output"])
        offset = result["EndOffset"]
        if result["Process"]["status"] != "running" and result["EndOffset"] == result["TotalBytes"]:
            break
    return data


async def all_output(client: WorkerClient, process_id: str) -> bytes:
    """Every byte of a process's output, once it has ended."""
    await wait_ended(client, process_id)
    return await output_until(client, process_id, lambda _: False)


async def lines(client: WorkerClient, process_id: str, count: int) -> list[bytes]:
    """The first `count` lines of a process's output, waiting for them."""
    data = await output_until(client, process_id, lambda out: out.count(b"\n") >= count)
    return data.split(b"\n")[:count]


def wire_events(client: WorkerClient, process_id: str) -> list[dict[str, Any]]:
    """The `process/event` notifications of one process, as decoded from the raw bytes received."""
    found = []
    for direction, raw in client.transcript.entries:
        if direction != "<":
            continue
        frame = json.loads(raw)
        if frame.get("method") == "process/event" and frame["data"]["Process"]["id"] == process_id:
            found.append(frame["data"])
    return found


def check_record(record: dict[str, Any]) -> None:
    """The snake_case shape of ExecutionProcessV4, bound to SESSION, consistent with its status."""
    assert set(record) <= RECORD_KEYS, set(record) - RECORD_KEYS
    assert set(record) >= REQUIRED_RECORD_KEYS, REQUIRED_RECORD_KEYS - set(record)
    assert record["root_thread_id"] == SESSION
    assert RFC3339.match(record["started_at"]), record["started_at"]
    if record["status"] == "running":
        assert record["ended_at"] is None and record["duration_ns"] is None and record["exit_code"] is None
    else:
        assert RFC3339.match(record["ended_at"]), record["ended_at"]
        assert isinstance(record["duration_ns"], int) and record["duration_ns"] >= 0


TOOL_CASES = ("search.*", "git.*", "run_code.*")
"""The cases of the tools that need a program beside the worker (rg, git, Node.js): the worker image has
them all, so none of these cases may be skipped there."""


def tool_cases_here() -> tuple[str, ...]:
    """The globs of TOOL_CASES whose program this machine has (a worker running here must not skip them)."""
    found = tuple(glob for glob, program in (("search.*", "rg"), ("git.*", "git")) if shutil.which(program))
    try:
        find_node()
    except WorkerError:
        return found
    return (*found, "run_code.*")


async def passes_every_case(
    command: Sequence[str], what: str, timeout: float, must_run: Sequence[str] = (), only: Sequence[str] = ()
) -> float:
    """Run every conformance case (those matching a glob of `only`, when given) against `command`, two at a
    time, `timeout` per reply; fail naming each failed case and why, and each skipped case that matches a
    glob of `must_run`. Returns the seconds the suite took. `what` says what was checked ("through ssh")."""
    started = time.monotonic()
    cases = [
        case
        for case in WORKER.cases().values()
        if not only or any(fnmatch.fnmatchcase(case.id, glob) for glob in only)
    ]
    results = await run_all(cases, command, jobs=2, timeout=timeout)
    elapsed = time.monotonic() - started
    failures = [result for result in results if result.counts_as_failure]
    report = "\n\n".join(f"{result.case.id}: {result.message}" for result in failures)
    assert not failures, f"{len(failures)} of {len(results)} cases failed {what}:\n{report}"
    skipped = [
        f"{result.case.id}: {result.message}"
        for result in results
        if result.status is Status.SKIPPED
        and any(fnmatch.fnmatchcase(result.case.id, glob) for glob in must_run)
    ]
    assert not skipped, f"cases that must run were skipped {what}:\n" + "\n".join(skipped)
    return elapsed


ENGINES = ROOT / ".cache" / "engines" / "node_modules" / ".bin"
"""Where `make engines` installs the external engines' CLIs (Codex, Claude Code) from their npm packages."""


def engine_cli(name: str) -> Path:
    """The installed CLI `name` (`codex`, `claude`), or a skip saying how to install it; with
    WUU_REQUIRE_ENGINES=1 (CI) a failure instead."""
    path = ENGINES / name
    if path.exists():
        return path
    problem = f"{path} is missing: `make engines` installs it"
    if os.environ.get("WUU_REQUIRE_ENGINES") == "1":
        pytest.fail(f"WUU_REQUIRE_ENGINES=1, but {problem}")
    pytest.skip(problem)
