"""The native worker end to end: a real worker process over real pipes, driven by the typed host client.

Every test gets a fresh worker process (one per entry of WORKER_COMMANDS) and a fresh workspace root, and
checks the spec's rules by their exact error codes and by their effects on disk and in the process table.
Waits poll with a deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from wuu.generated.models import ProcessEvent, ProcessEventType
from wuu.worker.client import WorkerClient

# The commands that start a worker on stdio. Every test runs against every entry, so tests must not depend
# on the pid (or anything else) of the worker process itself.
WORKER_COMMANDS: dict[str, list[str]] = {
    "native": [sys.executable, "-m", "wuu.worker"],
    # The native worker behind delegate_execution_backend_v4 (the README's audit example) passes the same tests.
    "delegated": [sys.executable, str(Path(__file__).parent / "fixtures" / "delegating_worker.py")],
}

DEADLINE = 20.0
SESSION = "thread-native-1"
SECOND_NS = 1_000_000_000
MIB = 1024 * 1024
# A variable of the worker's own environment that no command may see.
SECRET = "WUU_SECRET_TEST"
SYSTEM_PATH_DIRS = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
RECORD_KEYS = {
    "id",
    "operation_id",
    "root_thread_id",
    "argv",
    "cwd",
    "status",
    "pid",
    "exit_code",
    "signal",
    "started_at",
    "ended_at",
    "duration_ns",
    "output_bytes",
}
REQUIRED_RECORD_KEYS = RECORD_KEYS - {"operation_id", "pid"}
READ_RESULT_KEYS = {
    "Process",
    "Output",
    "StartOffset",
    "EndOffset",
    "TotalBytes",
    "Truncated",
    "TimedOut",
    "Duration",
}
# A shell that ignores TERM and starts a grandchild inheriting that; it prints the grandchild's pid and
# its own, then waits.
STUBBORN_TREE = ["sh", "-c", "trap '' TERM; sleep 1000 & echo $!; echo $$; wait"]
PLAIN_TREE = ["sh", "-c", "sleep 1000 & echo $!; echo $$; wait"]

Spawner = Callable[..., Awaitable[WorkerClient]]


# --- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(params=sorted(WORKER_COMMANDS))
def worker_command(request: pytest.FixtureRequest) -> list[str]:
    return WORKER_COMMANDS[request.param]


@pytest.fixture
async def spawn(worker_command: list[str]) -> AsyncIterator[Spawner]:
    """Start fresh worker processes (uninitialized); every one is closed after the test."""
    clients: list[WorkerClient] = []

    async def start(**extra_env: str) -> WorkerClient:
        env = {**os.environ, SECRET: "1", **extra_env}
        client = await WorkerClient.spawn(worker_command, env=env)
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close(budget=DEADLINE)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root, with a file in it."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("outside secret")
    return path


@pytest.fixture
async def worker(spawn: Spawner, root: Path) -> WorkerClient:
    """A worker bound to `root` with `process.start.v1` requested."""
    client = await spawn()
    await client.connect(str(root), SESSION, capabilities=["process.start.v1"])
    return client


# --- helpers --------------------------------------------------------------------------------------------


def tool_request(tool: str, arguments: dict[str, Any] | str, mode: str = "standard") -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "tool": tool,
        "call": {"id": "call-1", "arguments": text},
        "actor": {"kind": "agent", "id": "agent-1"},
        "permission_mode": mode,
    }


async def run(client: WorkerClient, tool: str, *, mode: str = "standard", **arguments: Any) -> dict[str, Any]:
    """The reply frame of one `execute`."""
    return await client.request("execute", tool_request(tool, arguments, mode))


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert "data" in reply, reply
    data: dict[str, Any] = reply["data"]
    return data


def code(reply: dict[str, Any]) -> str:
    assert "error" in reply, reply
    return str(reply["error"]).split(":", 1)[0]


async def start(client: WorkerClient, argv: list[str], **params: Any) -> dict[str, Any]:
    """Start a background process; its record."""
    params.setdefault("permission_mode", "standard")
    return ok(await client.request("process/start", {"argv": argv, **params}))


async def read(client: WorkerClient, process_id: str, **params: int) -> dict[str, Any]:
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
    """Long-poll a process's output from offset 0 until `done(output)` holds."""
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
    data = await output_until(client, process_id, lambda out: out.count(b"\n") >= count)
    return data.split(b"\n")[:count]


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie that nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


async def assert_gone(*pids: int, timeout_s: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout_s
    while remaining := [pid for pid in pids if alive(pid)]:
        assert time.monotonic() < deadline, f"still alive: {remaining}"
        await asyncio.sleep(0.02)


async def events_until_end(client: WorkerClient, process_id: str) -> list[ProcessEvent]:
    """The process's events up to its first terminal one, plus any that follow within a round trip."""
    found: list[ProcessEvent] = []
    events = client.events()
    async with asyncio.timeout(DEADLINE):
        while not found or found[-1].type is ProcessEventType.STARTED:
            event = await anext(events)
            if event.process.id == process_id:
                found.append(event)
    # A second terminal event sent before this round trip's reply would be queued by now.
    ok(await client.request("process/list", {}))
    found += [event for event in client.pending_events() if event.process.id == process_id]
    return found


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


async def pid_from_file(path: Path, pending: asyncio.Task[Any]) -> int:
    """Wait until a command has written its pid (a full line) to `path`."""
    deadline = time.monotonic() + DEADLINE
    while not path.exists() or not path.read_text().endswith("\n"):
        assert time.monotonic() < deadline and not pending.done()
        await asyncio.sleep(0.02)
    return int(path.read_text())


def check_record(record: dict[str, Any]) -> None:
    """The snake_case shape of ExecutionProcessV4."""
    assert set(record) <= RECORD_KEYS, set(record) - RECORD_KEYS
    assert set(record) >= REQUIRED_RECORD_KEYS, REQUIRED_RECORD_KEYS - set(record)
    assert record["root_thread_id"] == SESSION
    assert RFC3339.match(record["started_at"]), record["started_at"]
    if record["status"] == "running":
        assert record["ended_at"] is None and record["duration_ns"] is None and record["exit_code"] is None
    else:
        assert RFC3339.match(record["ended_at"]), record["ended_at"]
        assert isinstance(record["duration_ns"], int) and record["duration_ns"] >= 0


def same_path(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


# --- initialize and the workspace ------------------------------------------------------------------------


async def test_require_existing_workspace_with_a_missing_root_gets_workspace_missing(
    spawn: Spawner, tmp_path: Path
) -> None:
    client = await spawn()
    missing = tmp_path / "missing"
    reply = await client.request(
        "initialize",
        {"version": 4, "root": str(missing), "session": SESSION, "require_existing_workspace": True},
    )
    assert code(reply) == "workspace_missing"
    assert not missing.exists()


async def test_a_missing_root_is_created_when_it_is_not_required(spawn: Spawner, tmp_path: Path) -> None:
    client = await spawn()
    missing = tmp_path / "a" / "b" / "ws"
    await client.connect(str(missing), SESSION, require_existing_workspace=False)
    assert missing.is_dir()
    ok(await run(client, "write_file", path="f.txt", content="x"))
    assert (missing / "f.txt").read_text() == "x"


async def test_remove_workspace_on_exit_removes_the_root_after_close(spawn: Spawner, root: Path) -> None:
    client = await spawn()
    await client.connect(str(root), SESSION, remove_workspace_on_exit=True)
    ok(await run(client, "write_file", path="sub/f.txt", content="x", create_dirs=True))
    assert (root / "sub" / "f.txt").exists()
    outcome = await client.close(budget=DEADLINE)
    assert outcome.clean, outcome
    assert not root.exists()


async def test_the_root_is_kept_after_close_by_default(spawn: Spawner, root: Path) -> None:
    client = await spawn()
    await client.connect(str(root), SESSION)
    ok(await run(client, "write_file", path="f.txt", content="kept"))
    assert (await client.close(budget=DEADLINE)).clean
    assert (root / "f.txt").read_text() == "kept"


async def test_process_start_v1_is_granted_only_when_requested(spawn: Spawner, root: Path) -> None:
    plain = await spawn()
    assert (await plain.connect(str(root), SESSION)).capabilities == []
    asking = await spawn()
    granted = await asking.connect(str(root), SESSION, capabilities=["process.start.v1"])
    assert granted.capabilities == ["process.start.v1"]


# --- read_file --------------------------------------------------------------------------------------------


async def test_read_file_returns_the_content_and_its_metadata(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("hello world\n")
    result = ok(await run(worker, "read_file", path="a.txt"))
    assert result["output"] == "hello world\n"
    assert result["is_error"] is False
    assert result["metadata"] == {"size": 12, "offset_bytes": 0, "returned_bytes": 12, "eof": True}


async def test_read_file_honours_offset_bytes_and_max_bytes(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("hello world\n")
    middle = ok(await run(worker, "read_file", path="a.txt", offset_bytes=6, max_bytes=3))
    assert middle["output"] == "wor"
    assert middle["metadata"] == {"size": 12, "offset_bytes": 6, "returned_bytes": 3, "eof": False}
    tail = ok(await run(worker, "read_file", path="a.txt", offset_bytes=6, max_bytes=100))
    assert tail["output"] == "world\n"
    assert tail["metadata"] == {"size": 12, "offset_bytes": 6, "returned_bytes": 6, "eof": True}
    past = ok(await run(worker, "read_file", path="a.txt", offset_bytes=50))
    assert past["output"] == ""
    assert past["metadata"]["returned_bytes"] == 0 and past["metadata"]["eof"] is True


async def test_read_file_of_a_missing_file_is_not_found_and_of_a_directory_invalid_request(
    worker: WorkerClient, root: Path
) -> None:
    (root / "dir").mkdir()
    assert code(await run(worker, "read_file", path="nope.txt")) == "not_found"
    assert code(await run(worker, "read_file", path="dir")) == "invalid_request"


async def test_read_file_reads_at_most_one_mib_by_default_and_replaces_invalid_utf8(
    worker: WorkerClient, root: Path
) -> None:
    (root / "big.txt").write_bytes(b"a" * (MIB + 500))
    (root / "bad.txt").write_bytes(b"ok\xffok")
    big = ok(await run(worker, "read_file", path="big.txt"))
    assert big["metadata"] == {"size": MIB + 500, "offset_bytes": 0, "returned_bytes": MIB, "eof": False}
    assert len(big["output"]) == MIB
    assert ok(await run(worker, "read_file", path="bad.txt"))["output"] == "ok\ufffdok"


# --- write_file -------------------------------------------------------------------------------------------


async def test_write_file_creates_a_file_then_replaces_it(worker: WorkerClient, root: Path) -> None:
    created = ok(await run(worker, "write_file", path="a.txt", content="first version"))
    assert created["is_error"] is False
    assert created["metadata"] == {"bytes_written": 13, "created": True}
    assert (root / "a.txt").read_text() == "first version"
    replaced = ok(await run(worker, "write_file", path="a.txt", content="héllo"))
    assert replaced["metadata"] == {"bytes_written": 6, "created": False}
    assert (root / "a.txt").read_bytes() == "héllo".encode()


async def test_write_file_with_a_missing_parent_is_not_found_unless_create_dirs(
    worker: WorkerClient, root: Path
) -> None:
    assert code(await run(worker, "write_file", path="x/y/z.txt", content="deep")) == "not_found"
    assert not (root / "x").exists()
    result = ok(await run(worker, "write_file", path="x/y/z.txt", content="deep", create_dirs=True))
    assert result["metadata"] == {"bytes_written": 4, "created": True}
    assert (root / "x" / "y" / "z.txt").read_text() == "deep"


# --- edit_file --------------------------------------------------------------------------------------------


async def test_edit_file_replaces_a_unique_occurrence(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("alpha beta gamma")
    result = ok(await run(worker, "edit_file", path="a.txt", old_string="beta", new_string="BETA"))
    assert result["is_error"] is False
    assert result["metadata"] == {"replacements": 1}
    assert (root / "a.txt").read_text() == "alpha BETA gamma"


async def test_edit_file_replace_all_replaces_every_occurrence(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("x-x-x")
    result = ok(
        await run(worker, "edit_file", path="a.txt", old_string="x", new_string="yy", replace_all=True)
    )
    assert result["metadata"] == {"replacements": 3}
    assert (root / "a.txt").read_text() == "yy-yy-yy"


@pytest.mark.parametrize(
    ("old_string", "why"), [("delta", "not found"), ("x", "ambiguous")], ids=["not-found", "ambiguous"]
)
async def test_a_failed_edit_is_an_error_result_and_leaves_the_file_unchanged(
    worker: WorkerClient, root: Path, old_string: str, why: str
) -> None:
    original = b"x alpha x beta\n"
    (root / "a.txt").write_bytes(original)
    result = ok(await run(worker, "edit_file", path="a.txt", old_string=old_string, new_string="NEW"))
    assert result["is_error"] is True, why
    assert (root / "a.txt").read_bytes() == original


async def test_edit_file_of_a_missing_file_is_not_found(worker: WorkerClient) -> None:
    assert (
        code(await run(worker, "edit_file", path="nope.txt", old_string="a", new_string="b")) == "not_found"
    )


# --- list_dir ---------------------------------------------------------------------------------------------


@pytest.fixture
def tree(root: Path) -> Path:
    (root / "b.txt").write_text("bb")
    (root / "a.txt").write_text("a")
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "sub" / "inner.txt").write_text("123")
    (root / "sub" / "deeper" / "leaf.txt").write_text("")
    (root / "sub" / ".nested-hidden").write_text("")
    (root / ".hidden").write_text("h")
    (root / ".hdir").mkdir()
    (root / ".hdir" / "in.txt").write_text("")
    return root


async def test_list_dir_lists_direct_entries_sorted_without_hidden_ones(
    worker: WorkerClient, tree: Path
) -> None:
    result = ok(await run(worker, "list_dir", path="."))
    assert result["is_error"] is False
    assert result["metadata"]["entries"] == [
        {"path": "a.txt", "type": "file", "size": 1},
        {"path": "b.txt", "type": "file", "size": 2},
        {"path": "sub", "type": "directory", "size": 0},
    ]
    assert result["output"].splitlines() == ["a.txt", "b.txt", "sub/"]


async def test_list_dir_descends_to_depth(worker: WorkerClient, tree: Path) -> None:
    two = ok(await run(worker, "list_dir", path=".", depth=2))
    assert [entry["path"] for entry in two["metadata"]["entries"]] == [
        "a.txt",
        "b.txt",
        "sub",
        "sub/deeper",
        "sub/inner.txt",
    ]
    assert two["output"].splitlines() == ["a.txt", "b.txt", "sub/", "sub/deeper/", "sub/inner.txt"]
    three = ok(await run(worker, "list_dir", path="sub", depth=3))
    assert three["output"].splitlines() == ["deeper/", "deeper/leaf.txt", "inner.txt"]


async def test_list_dir_include_hidden_lists_dot_entries(worker: WorkerClient, tree: Path) -> None:
    result = ok(await run(worker, "list_dir", path=".", depth=2, include_hidden=True))
    assert result["output"].splitlines() == [
        ".hdir/",
        ".hdir/in.txt",
        ".hidden",
        "a.txt",
        "b.txt",
        "sub/",
        "sub/.nested-hidden",
        "sub/deeper/",
        "sub/inner.txt",
    ]


async def test_list_dir_reports_symlinks_without_following_them(
    worker: WorkerClient, root: Path, outside: Path
) -> None:
    (root / "link").symlink_to(outside)
    result = ok(await run(worker, "list_dir", path=".", depth=3))
    assert [(e["path"], e["type"]) for e in result["metadata"]["entries"]] == [("link", "symlink")]
    assert result["output"] == "link"


async def test_list_dir_of_a_missing_directory_is_not_found(worker: WorkerClient) -> None:
    assert code(await run(worker, "list_dir", path="nope")) == "not_found"


# --- exec_command -----------------------------------------------------------------------------------------


async def test_exec_command_returns_combined_output_and_exit_code_zero(worker: WorkerClient) -> None:
    result = ok(await run(worker, "exec_command", argv=["sh", "-c", "echo out; echo err >&2"]))
    assert result["output"] == "out\nerr\n"
    assert result["is_error"] is False
    metadata = result["metadata"]
    assert metadata["exit_code"] == 0 and metadata["signal"] is None and metadata["timed_out"] is False
    assert isinstance(metadata["duration_ns"], int) and metadata["duration_ns"] >= 0


async def test_exec_command_with_a_non_zero_exit_is_an_error_result(worker: WorkerClient) -> None:
    result = ok(await run(worker, "exec_command", argv=["sh", "-c", "echo failing; exit 3"]))
    assert result["is_error"] is True
    assert result["output"] == "failing\n"
    assert result["metadata"]["exit_code"] == 3 and result["metadata"]["timed_out"] is False


async def test_exec_command_timeout_kills_the_command_and_sets_timed_out(worker: WorkerClient) -> None:
    began = time.monotonic()
    result = ok(await run(worker, "exec_command", argv=["sleep", "60"], timeout_ms=300))
    assert time.monotonic() - began < DEADLINE
    assert result["is_error"] is True
    assert result["metadata"]["timed_out"] is True
    assert result["metadata"]["exit_code"] is None and result["metadata"]["signal"] is not None


async def test_exec_command_runs_in_cwd_relative_to_the_root(worker: WorkerClient, root: Path) -> None:
    (root / "sub").mkdir()
    result = ok(await run(worker, "exec_command", argv=["pwd"], cwd="sub"))
    assert same_path(result["output"].strip(), root / "sub")
    default = ok(await run(worker, "exec_command", argv=["pwd"]))
    assert same_path(default["output"].strip(), root)


async def test_exec_command_reports_an_unstartable_program_as_a_shell_would(
    worker: WorkerClient, root: Path
) -> None:
    missing = ok(await run(worker, "exec_command", argv=["no-such-program-wuu"]))
    assert missing["is_error"] is True and missing["metadata"]["exit_code"] == 127
    (root / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "script.sh").chmod(0o644)
    not_executable = ok(await run(worker, "exec_command", argv=["./script.sh"]))
    assert not_executable["is_error"] is True and not_executable["metadata"]["exit_code"] == 126


async def test_cancelling_exec_command_ends_its_process_tree(worker: WorkerClient, root: Path) -> None:
    pending = asyncio.create_task(
        run(worker, "exec_command", argv=["sh", "-c", "echo $$ > pid.txt; exec sleep 1000"])
    )
    pid = await pid_from_file(root / "pid.txt", pending)
    request_id = next(
        json.loads(raw)["id"] for direction, raw in worker.transcript.entries if b'"exec_command"' in raw
    )
    assert ok(await worker.request("cancel", {"id": request_id})) == {"cancelled": True}
    assert code(await asyncio.wait_for(pending, DEADLINE)) == "cancelled"
    await assert_gone(pid)


# --- tool argument problems -------------------------------------------------------------------------------

BAD_ARGUMENTS = {
    "not-json": ("read_file", "{nope"),
    "not-an-object": ("read_file", "[1, 2]"),
    "a-string": ("read_file", '"a.txt"'),
    "wrong-type": ("read_file", json.dumps({"path": 5})),
    "wrong-type-int-as-string": ("read_file", json.dumps({"path": "a.txt", "max_bytes": "5"})),
    "unknown-field": ("read_file", json.dumps({"path": "a.txt", "bogus": 1})),
    "missing-field": ("write_file", json.dumps({"path": "a.txt"})),
    "argv-not-a-list": ("exec_command", json.dumps({"argv": "echo hi"})),
    "empty-argv": ("exec_command", json.dumps({"argv": []})),
    "depth-out-of-range": ("list_dir", json.dumps({"path": ".", "depth": 0})),
}


@pytest.mark.parametrize(("tool", "arguments"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
async def test_bad_tool_arguments_get_invalid_request(
    worker: WorkerClient, root: Path, tool: str, arguments: str
) -> None:
    (root / "a.txt").write_text("a")
    reply = await worker.request("execute", tool_request(tool, arguments))
    assert code(reply) == "invalid_request"


async def test_an_unknown_tool_gets_unsupported_tool(worker: WorkerClient) -> None:
    reply = await worker.request("execute", tool_request("teleport", {"path": "a"}))
    assert code(reply) == "unsupported_tool"


# --- path confinement -------------------------------------------------------------------------------------


@pytest.fixture
def escapes(root: Path, outside: Path) -> dict[str, str]:
    """Paths that leave the root, by how they leave it."""
    (root / "link_file").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside)
    (root / "dangling").symlink_to(outside / "nothing-yet.txt")
    return {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlink-file": "link_file",
        "symlink-dir": "link_dir/secret.txt",
        "dangling-symlink": "dangling",
    }


ESCAPE_KINDS = ["dotdot", "absolute", "symlink-file", "symlink-dir", "dangling-symlink"]
CONFINED = ["standard", "read_only"]


@pytest.mark.parametrize("mode", CONFINED)
@pytest.mark.parametrize("kind", ESCAPE_KINDS)
async def test_confined_reads_that_leave_the_root_get_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], kind: str, mode: str
) -> None:
    assert code(await run(worker, "read_file", mode=mode, path=escapes[kind])) == "path_outside_root"


@pytest.mark.parametrize("mode", CONFINED)
async def test_confined_list_dir_and_cwd_outside_the_root_get_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], outside: Path, mode: str
) -> None:
    for path in ("link_dir", "..", str(outside)):
        assert code(await run(worker, "list_dir", mode=mode, path=path)) == "path_outside_root", path
        reply = await run(worker, "exec_command", mode=mode, argv=["pwd"], cwd=path)
        assert code(reply) == "path_outside_root", path


@pytest.mark.parametrize("kind", ESCAPE_KINDS)
async def test_standard_writes_that_leave_the_root_are_refused_and_change_nothing(
    worker: WorkerClient, escapes: dict[str, str], outside: Path, kind: str
) -> None:
    before = sorted(p.name for p in outside.iterdir())
    reply = await run(worker, "write_file", path=escapes[kind], content="escaped")
    assert code(reply) == "path_outside_root"
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "secret.txt").read_text() == "outside secret"
    reply = await run(worker, "edit_file", path=escapes[kind], old_string="outside", new_string="inside")
    assert code(reply) == "path_outside_root"
    assert (outside / "secret.txt").read_text() == "outside secret"


async def test_a_path_is_resolved_component_by_component(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("a")
    # `..` leaves the root on the way, even though the path comes back into it.
    reply = await run(worker, "read_file", path=f"../{root.name}/a.txt")
    assert code(reply) == "path_outside_root"
    assert ok(await run(worker, "read_file", path=str(root / "a.txt")))["output"] == "a"
    assert ok(await run(worker, "read_file", path="sub/../a.txt"))["output"] == "a"


@pytest.mark.parametrize("mode", CONFINED)
async def test_process_start_with_a_cwd_outside_the_root_gets_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], outside: Path, mode: str
) -> None:
    for cwd in ("link_dir", "..", str(outside)):
        reply = await worker.request("process/start", {"argv": ["pwd"], "cwd": cwd, "permission_mode": mode})
        assert code(reply) == "path_outside_root", cwd
    assert ok(await worker.request("process/list", {})) == {"processes": []}


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink-file", "symlink-dir"])
async def test_unconfined_reads_may_leave_the_root(
    worker: WorkerClient, escapes: dict[str, str], kind: str
) -> None:
    result = ok(await run(worker, "read_file", mode="unconfined", path=escapes[kind]))
    assert result["output"] == "outside secret"


async def test_unconfined_writes_list_dir_and_cwd_may_leave_the_root(
    worker: WorkerClient, escapes: dict[str, str], outside: Path
) -> None:
    ok(await run(worker, "write_file", mode="unconfined", path="dangling", content="through the link"))
    assert (outside / "nothing-yet.txt").read_text() == "through the link"
    ok(await run(worker, "write_file", mode="unconfined", path="../outside/new.txt", content="n"))
    assert (outside / "new.txt").read_text() == "n"
    listing = ok(await run(worker, "list_dir", mode="unconfined", path="link_dir"))
    assert listing["output"].splitlines() == ["new.txt", "nothing-yet.txt", "secret.txt"]
    pwd = ok(await run(worker, "exec_command", mode="unconfined", argv=["pwd"], cwd=str(outside)))
    assert same_path(pwd["output"].strip(), outside)


async def test_a_symlink_that_stays_inside_the_root_is_allowed_in_standard(
    worker: WorkerClient, root: Path
) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "real.txt").write_text("inside")
    (root / "alias.txt").symlink_to("sub/real.txt")
    (root / "sub" / "up").symlink_to("..")
    assert ok(await run(worker, "read_file", path="alias.txt"))["output"] == "inside"
    assert ok(await run(worker, "read_file", path="sub/up/sub/real.txt"))["output"] == "inside"


# --- sensitive paths --------------------------------------------------------------------------------------

SENSITIVE_WRITES = [
    ".env",
    ".env.local",
    ".ENV",
    "id_rsa",
    "ID_RSA",
    "credentials.json",
    "sub/.ssh/config",
    "server.key",
    ".aws/credentials",
]


@pytest.mark.parametrize("mode", ["standard", "unconfined"])
@pytest.mark.parametrize("name", SENSITIVE_WRITES)
async def test_writing_a_sensitive_path_gets_sensitive_path(
    worker: WorkerClient, root: Path, name: str, mode: str
) -> None:
    reply = await run(worker, "write_file", mode=mode, path=name, content="SECRET=1", create_dirs=True)
    assert code(reply) == "sensitive_path"
    assert not (root / name).exists()


@pytest.mark.parametrize("name", [".env", "id_rsa"])
async def test_writing_a_sensitive_path_in_read_only_is_refused_by_the_mode_first(
    worker: WorkerClient, root: Path, name: str
) -> None:
    # Refusals are checked in order: the permission mode, the path boundary, the sensitive-path guard.
    reply = await run(worker, "write_file", mode="read_only", path=name, content="SECRET=1")
    assert code(reply) == "permission_denied"
    assert not (root / name).exists()


async def test_the_path_boundary_is_checked_before_the_mode_allows_and_before_sensitive_paths(
    worker: WorkerClient, outside: Path
) -> None:
    reply = await run(worker, "write_file", mode="read_only", path="../outside/x.txt", content="x")
    assert code(reply) == "permission_denied"
    reply = await run(worker, "write_file", path="../outside/.env", content="x")
    assert code(reply) == "path_outside_root"
    reply = await run(worker, "write_file", mode="unconfined", path="../outside/.env", content="x")
    assert code(reply) == "sensitive_path"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize("mode", ["standard", "unconfined"])
async def test_editing_a_sensitive_path_gets_sensitive_path_and_leaves_it_unchanged(
    worker: WorkerClient, root: Path, mode: str
) -> None:
    (root / ".env").write_text("TOKEN=old\n")
    reply = await run(worker, "edit_file", mode=mode, path=".env", old_string="old", new_string="new")
    assert code(reply) == "sensitive_path"
    assert (root / ".env").read_text() == "TOKEN=old\n"


@pytest.mark.parametrize("mode", ["standard", "read_only", "unconfined"])
async def test_reading_an_environment_file_is_allowed(worker: WorkerClient, root: Path, mode: str) -> None:
    (root / ".env").write_text("TOKEN=abc\n")
    (root / "id_rsa").write_text("KEY\n")
    assert ok(await run(worker, "read_file", mode=mode, path=".env"))["output"] == "TOKEN=abc\n"
    assert ok(await run(worker, "read_file", mode=mode, path="id_rsa"))["output"] == "KEY\n"


@pytest.mark.parametrize("name", ["credentials.go", ".env.example", "id_rsa.pub", "cert.pem", "secrets.txt"])
async def test_names_that_only_look_sensitive_are_writable(
    worker: WorkerClient, root: Path, name: str
) -> None:
    result = ok(await run(worker, "write_file", path=name, content="package main\n"))
    assert result["metadata"]["created"] is True
    assert (root / name).read_text() == "package main\n"


async def test_a_symlink_to_a_sensitive_file_is_sensitive(worker: WorkerClient, root: Path) -> None:
    (root / ".env").write_text("TOKEN=old\n")
    (root / "notes.txt").symlink_to(".env")
    assert code(await run(worker, "write_file", path="notes.txt", content="x")) == "sensitive_path"
    assert (root / ".env").read_text() == "TOKEN=old\n"


@pytest.mark.parametrize("mode", ["standard", "read_only", "unconfined"])
async def test_wuu_credential_files_are_blocked_for_reads_too(spawn: Spawner, root: Path, mode: str) -> None:
    wuu_home = root / "wuu-home"
    wuu_home.mkdir()
    (wuu_home / "auth.json").write_text('{"token": "t"}')
    (wuu_home / "config.toml").write_text("ok = true\n")
    (root / "auth.json").write_text('{"elsewhere": true}')
    client = await spawn(WUU_HOME=str(wuu_home))
    await client.connect(str(root), SESSION)
    assert code(await run(client, "read_file", mode=mode, path="wuu-home/auth.json")) == "sensitive_path"
    assert code(await client.request("export/open", {"path": "wuu-home/auth.json"})) == "sensitive_path"
    assert (
        ok(await run(client, "read_file", mode=mode, path="wuu-home/config.toml"))["output"] == "ok = true\n"
    )
    # The same name outside Wuu home is only write-guarded.
    assert ok(await run(client, "read_file", mode=mode, path="auth.json"))["output"] == '{"elsewhere": true}'
    # Listing the directory still shows the name.
    listing = ok(await run(client, "list_dir", mode=mode, path="wuu-home"))
    assert listing["output"].splitlines() == ["auth.json", "config.toml"]


# --- read_only and the command sandbox --------------------------------------------------------------------


async def test_read_only_refuses_file_mutations_with_permission_denied(
    worker: WorkerClient, root: Path
) -> None:
    (root / "a.txt").write_text("original")
    reply = await run(worker, "write_file", mode="read_only", path="a.txt", content="changed")
    assert code(reply) == "permission_denied"
    reply = await run(worker, "write_file", mode="read_only", path="new.txt", content="new")
    assert code(reply) == "permission_denied"
    reply = await run(worker, "edit_file", mode="read_only", path="a.txt", old_string="orig", new_string="X")
    assert code(reply) == "permission_denied"
    assert (root / "a.txt").read_text() == "original"
    assert not (root / "new.txt").exists()


async def test_read_only_still_runs_commands(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("readable\n")
    result = ok(await run(worker, "exec_command", mode="read_only", argv=["cat", "a.txt"]))
    assert result["output"] == "readable\n" and result["is_error"] is False


async def test_read_only_commands_cannot_write_files(worker: WorkerClient, root: Path) -> None:
    (root / "existing.txt").write_text("keep me")
    result = ok(await run(worker, "exec_command", mode="read_only", argv=["sh", "-c", "echo x > f"]))
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]
    assert not (root / "f").exists()
    result = ok(
        await run(worker, "exec_command", mode="read_only", argv=["sh", "-c", "echo x >> existing.txt"])
    )
    assert result["is_error"] is True
    assert (root / "existing.txt").read_text() == "keep me"
    result = ok(
        await run(worker, "exec_command", mode="read_only", argv=["sh", "-c", 'echo x > "$TMPDIR/t"'])
    )
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]


async def test_read_only_background_processes_cannot_write_files(worker: WorkerClient, root: Path) -> None:
    record = await start(worker, ["sh", "-c", "echo x > f"], permission_mode="read_only")
    ended = await wait_ended(worker, record["id"])
    assert ended["status"] == "exited" and ended["exit_code"] != 0
    assert not (root / "f").exists()


async def test_standard_commands_write_inside_the_root(worker: WorkerClient, root: Path) -> None:
    result = ok(await run(worker, "exec_command", argv=["sh", "-c", "mkdir -p d && echo x > d/f"]))
    assert result["is_error"] is False, result
    assert (root / "d" / "f").read_text() == "x\n"


async def test_standard_commands_cannot_write_outside_the_root(worker: WorkerClient, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "f"
    result = ok(await run(worker, "exec_command", argv=["sh", "-c", f"echo x > '{target}'"]))
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]
    assert not target.exists()


async def test_standard_commands_cannot_write_through_a_symlink_that_leaves_the_root(
    worker: WorkerClient, root: Path, outside: Path
) -> None:
    (root / "link_dir").symlink_to(outside)
    result = ok(await run(worker, "exec_command", argv=["sh", "-c", "echo x > link_dir/f"]))
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]
    assert not (outside / "f").exists()


async def test_standard_commands_write_their_private_tmpdir(worker: WorkerClient, root: Path) -> None:
    script = 'echo data > "$TMPDIR/t.txt" && cat "$TMPDIR/t.txt" && echo "$TMPDIR"'
    result = ok(await run(worker, "exec_command", argv=["sh", "-c", script]))
    assert result["is_error"] is False, result
    data, tmpdir = result["output"].splitlines()
    assert data == "data"
    assert os.path.isabs(tmpdir) and not same_path(tmpdir, "/tmp")
    assert not os.path.realpath(tmpdir).startswith(os.path.realpath(root) + "/")


async def test_unconfined_commands_may_write_outside_the_root(worker: WorkerClient, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    result = ok(
        await run(worker, "exec_command", mode="unconfined", argv=["sh", "-c", f"echo x > '{target}'"])
    )
    assert result["is_error"] is False, result
    assert target.read_text() == "x\n"


# --- the command environment ------------------------------------------------------------------------------


def parse_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.fixture
async def env_worker(spawn: Spawner, root: Path) -> WorkerClient:
    client = await spawn()
    await client.connect(str(root), SESSION, environment={"FORWARDED": "from-binding", "SHARED": "binding"})
    return client


def check_environment(env: dict[str, str]) -> None:
    assert SECRET not in env
    assert env["FORWARDED"] == "from-binding"
    assert env["REQUESTED"] == "from-request"
    assert env["SHARED"] == "request"  # the request's env wins over the binding's
    assert set(env["PATH"].split(":")) <= SYSTEM_PATH_DIRS, env["PATH"]
    assert os.path.isabs(env["TMPDIR"])
    # Nothing of the worker's own environment (HOME, its PATH, the test runner's variables).
    assert set(env) == {"PATH", "TMPDIR", "FORWARDED", "REQUESTED", "SHARED"}, env


async def test_exec_command_sees_only_path_tmpdir_forwarded_and_requested_variables(
    env_worker: WorkerClient,
) -> None:
    request_env = {"REQUESTED": "from-request", "SHARED": "request"}
    result = ok(await run(env_worker, "exec_command", argv=["env"], env=request_env))
    check_environment(parse_env(result["output"]))


async def test_background_processes_see_only_path_tmpdir_forwarded_and_requested_variables(
    env_worker: WorkerClient,
) -> None:
    record = await start(env_worker, ["env"], env={"REQUESTED": "from-request", "SHARED": "request"})
    check_environment(parse_env((await all_output(env_worker, record["id"])).decode()))


# --- process/start, list, get, stop ----------------------------------------------------------------------


async def test_process_records_are_snake_case_with_rfc3339_timestamps(
    worker: WorkerClient, root: Path
) -> None:
    record = await start(worker, ["sh", "-c", "echo hi"], operation_id="op-1")
    check_record(record)
    assert record["operation_id"] == "op-1"
    assert record["argv"] == ["sh", "-c", "echo hi"]
    assert same_path(record["cwd"], root) and os.path.isabs(record["cwd"])
    ended = await wait_ended(worker, record["id"])
    check_record(ended)
    assert ended["status"] == "exited"
    assert ended["exit_code"] == 0 and ended["signal"] is None
    assert ended["output_bytes"] == 3
    assert ended["operation_id"] == "op-1"


async def test_a_record_without_operation_id_omits_it(worker: WorkerClient) -> None:
    record = await start(worker, ["true"])
    assert "operation_id" not in record
    check_record(record)


async def test_process_list_holds_this_sessions_processes_in_start_order(worker: WorkerClient) -> None:
    started = [await start(worker, ["sh", "-c", f"exit {n}"], operation_id=f"op-{n}") for n in range(3)]
    listed = ok(await worker.request("process/list", {}))
    assert set(listed) == {"processes"}
    records = listed["processes"]
    assert [r["id"] for r in records] == [r["id"] for r in started]
    assert len({r["id"] for r in records}) == 3
    assert [r["operation_id"] for r in records] == ["op-0", "op-1", "op-2"]
    for record in records:
        check_record(record)


async def test_a_fresh_connection_lists_no_processes(worker: WorkerClient) -> None:
    assert ok(await worker.request("process/list", {})) == {"processes": []}


@pytest.mark.parametrize(
    ("method", "data"),
    [
        ("process/get", {"id": "p-unknown"}),
        ("process/stop", {"id": "p-unknown"}),
        ("process/read", {"Process": "p-unknown"}),
        ("process/write", {"id": "p-unknown", "data": "aGk="}),
    ],
)
async def test_an_unknown_process_id_gets_not_found(
    worker: WorkerClient, method: str, data: dict[str, Any]
) -> None:
    assert code(await worker.request(method, data)) == "not_found"


async def test_process_stop_kills_a_grandchild_that_ignores_term(worker: WorkerClient) -> None:
    record = await start(worker, STUBBORN_TREE)
    grandchild, shell = (int(line) for line in await lines(worker, record["id"], 2))
    assert alive(grandchild) and alive(shell)
    stopped = ok(await worker.request("process/stop", {"id": record["id"], "grace_ms": 200}))
    check_record(stopped)
    assert stopped["status"] == "stopped"
    assert stopped["exit_code"] is None and stopped["signal"] == "KILL"
    await assert_gone(grandchild, shell)


async def test_process_stop_with_term_ends_a_process_that_honours_it(worker: WorkerClient) -> None:
    record = await start(worker, ["sleep", "1000"])
    stopped = ok(
        await worker.request("process/stop", {"id": record["id"], "signal": "TERM", "grace_ms": 10_000})
    )
    assert stopped["status"] == "stopped" and stopped["signal"] == "TERM" and stopped["exit_code"] is None
    assert stopped["duration_ns"] < 10 * SECOND_NS


async def test_a_program_that_cannot_start_has_a_failed_record_and_only_a_failed_event(
    worker: WorkerClient,
) -> None:
    record = await start(worker, ["no-such-program-wuu"])
    assert record["status"] == "failed"
    check_record(record)
    events = await events_until_end(worker, record["id"])
    assert [(e.type.value, e.cause.value) for e in events] == [("failed", "error")]


async def test_process_stop_of_an_ended_process_returns_its_record_unchanged(worker: WorkerClient) -> None:
    record = await start(worker, ["sh", "-c", "exit 4"])
    ended = await wait_ended(worker, record["id"])
    again = ok(await worker.request("process/stop", {"id": record["id"]}))
    assert again == ended


async def test_process_timeout_stops_the_tree(worker: WorkerClient) -> None:
    record = await start(worker, PLAIN_TREE, timeout_ms=300)
    grandchild, shell = (int(line) for line in await lines(worker, record["id"], 2))
    ended = await wait_ended(worker, record["id"])
    assert ended["status"] == "stopped"
    await assert_gone(grandchild, shell)


SCENARIOS = {
    "exit": (["sh", "-c", "exit 0"], {}, None, ("exited", "exit")),
    "stop_request": (["sleep", "1000"], {}, "stop", ("stopped", "stop_request")),
    "timeout": (["sleep", "1000"], {"timeout_ms": 200}, None, ("stopped", "timeout")),
    "signal": (["sh", "-c", "kill -KILL $$"], {}, None, ("exited", "signal")),
}


@pytest.mark.parametrize(("argv", "params", "action", "terminal"), SCENARIOS.values(), ids=SCENARIOS.keys())
async def test_process_events_are_started_then_exactly_one_terminal_event(
    worker: WorkerClient,
    argv: list[str],
    params: dict[str, Any],
    action: str | None,
    terminal: tuple[str, str],
) -> None:
    record = await start(worker, argv, **params)
    if action == "stop":
        ok(await worker.request("process/stop", {"id": record["id"], "signal": "KILL"}))
    events = await events_until_end(worker, record["id"])
    assert [(e.type.value, e.cause.value) for e in events] == [("started", "start"), terminal]
    # On the wire: Go casing for the event, snake_case for the record inside it.
    raw = wire_events(worker, record["id"])
    assert [(e["Type"], e["Cause"]) for e in raw] == [("started", "start"), terminal]
    for event in raw:
        assert set(event) == {"Type", "Cause", "Process"}
        check_record(event["Process"])
    assert raw[-1]["Process"]["status"] == terminal[0]
    received = b"".join(data for direction, data in worker.transcript.entries if direction == "<")
    assert b'"Type":"started"' in received.replace(b" ", b"")


# --- process/read -----------------------------------------------------------------------------------------


async def test_process_read_speaks_go_casing_both_ways(worker: WorkerClient) -> None:
    record = await start(worker, ["printf", "hello"])
    await wait_ended(worker, record["id"])
    result = await read(worker, record["id"], OffsetBytes=0, MaxBytes=100, Wait=0, MinDwell=0)
    assert set(result) == READ_RESULT_KEYS
    check_record(result["Process"])
    for data in (
        {"process": record["id"]},
        {"Process": record["id"], "offset_bytes": 0},
        {"Process": record["id"], "max_bytes": 10},
        {"id": record["id"]},
    ):
        assert code(await worker.request("process/read", data)) == "invalid_request", data


async def test_process_read_output_is_base64_and_offsets_continue(worker: WorkerClient) -> None:
    record = await start(worker, ["printf", "hello world\\000\\377"])
    await wait_ended(worker, record["id"])
    first = await read(worker, record["id"], MaxBytes=5)
    assert base64.b64decode(first["Output"], validate=True) == b"hello"
    assert (first["StartOffset"], first["EndOffset"], first["TotalBytes"]) == (0, 5, 13)
    assert first["Truncated"] is False and first["TimedOut"] is False
    rest = await read(worker, record["id"], OffsetBytes=first["EndOffset"])
    assert base64.b64decode(rest["Output"], validate=True) == b" world\x00\xff"
    assert (rest["StartOffset"], rest["EndOffset"], rest["TotalBytes"]) == (5, 13, 13)
    past = await read(worker, record["id"], OffsetBytes=13)
    assert past["Output"] == "" and (past["StartOffset"], past["EndOffset"]) == (13, 13)
    assert rest["Process"]["output_bytes"] == 13


async def test_process_read_below_the_retained_start_is_truncated(worker: WorkerClient) -> None:
    total = 1_500_000
    record = await start(worker, ["head", "-c", str(total), "/dev/zero"])
    ended = await wait_ended(worker, record["id"])
    assert ended["output_bytes"] == total
    result = await read(worker, record["id"], OffsetBytes=0, MaxBytes=8 * MIB)
    assert result["Truncated"] is True
    assert result["TotalBytes"] == total
    assert 0 < result["StartOffset"] <= total - MIB
    assert result["EndOffset"] == total
    assert len(base64.b64decode(result["Output"])) == total - result["StartOffset"]
    kept = await read(worker, record["id"], OffsetBytes=total - MIB, MaxBytes=8 * MIB)
    assert kept["Truncated"] is False and kept["StartOffset"] == total - MIB
    assert base64.b64decode(kept["Output"]) == b"\0" * MIB


async def test_process_read_returns_at_most_64_kib_by_default(worker: WorkerClient) -> None:
    record = await start(worker, ["head", "-c", "100000", "/dev/zero"])
    await wait_ended(worker, record["id"])
    result = await read(worker, record["id"])
    assert (result["StartOffset"], result["EndOffset"], result["TotalBytes"]) == (0, 65_536, 100_000)
    reply = await worker.request("process/read", {"Process": record["id"], "MaxBytes": 8 * MIB + 1})
    assert code(reply) == "invalid_request"


async def test_process_read_long_poll_returns_early_when_bytes_arrive(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    began = time.monotonic()
    pending = asyncio.create_task(read(worker, record["id"], Wait=30 * SECOND_NS))
    # Handlers start in arrival order: once this round trip is answered, the read is waiting.
    ok(await worker.request("process/get", {"id": record["id"]}))
    assert not pending.done()
    data = base64.b64encode(b"ping\n").decode()
    ok(await worker.request("process/write", {"id": record["id"], "data": data}))
    result = await asyncio.wait_for(pending, DEADLINE)
    assert base64.b64decode(result["Output"]) == b"ping\n"
    assert result["TimedOut"] is False
    assert time.monotonic() - began < 15 and result["Duration"] < 15 * SECOND_NS


async def test_process_read_times_out_only_when_no_bytes_came(worker: WorkerClient) -> None:
    silent = await start(worker, ["sleep", "1000"])
    waited = await read(worker, silent["id"], Wait=300_000_000)
    assert waited["TimedOut"] is True and waited["Output"] == ""
    assert waited["Duration"] >= 250_000_000
    talker = await start(worker, ["sh", "-c", "echo ready; sleep 1000"])
    await lines(worker, talker["id"], 1)
    began = time.monotonic()
    ready = await read(worker, talker["id"], Wait=30 * SECOND_NS)
    assert ready["TimedOut"] is False and base64.b64decode(ready["Output"]) == b"ready\n"
    assert time.monotonic() - began < 15
    quiet_end = await start(worker, ["true"])
    await wait_ended(worker, quiet_end["id"])
    ended = await read(worker, quiet_end["id"], Wait=30 * SECOND_NS)
    assert ended["TimedOut"] is False and ended["Output"] == ""


async def test_process_read_min_dwell_collects_a_burst(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    pending = asyncio.create_task(read(worker, record["id"], Wait=30 * SECOND_NS, MinDwell=2 * SECOND_NS))
    ok(await worker.request("process/get", {"id": record["id"]}))
    for chunk in (b"a\n", b"b\n"):
        ok(
            await worker.request(
                "process/write", {"id": record["id"], "data": base64.b64encode(chunk).decode()}
            )
        )
        ok(await worker.request("process/get", {"id": record["id"]}))
    result = await asyncio.wait_for(pending, DEADLINE)
    assert base64.b64decode(result["Output"]) == b"a\nb\n"
    assert result["TimedOut"] is False


async def test_process_read_min_dwell_is_bounded_by_max_bytes(worker: WorkerClient) -> None:
    record = await start(worker, ["sh", "-c", "echo abcdef; sleep 1000"])
    await lines(worker, record["id"], 1)
    began = time.monotonic()
    result = await read(worker, record["id"], MaxBytes=2, MinDwell=30 * SECOND_NS)
    assert base64.b64decode(result["Output"]) == b"ab"
    assert time.monotonic() - began < 15


async def test_process_read_min_dwell_ends_when_the_process_ends(worker: WorkerClient) -> None:
    record = await start(worker, ["sh", "-c", "echo a; sleep 0.2; echo b"])
    began = time.monotonic()
    result = await read(worker, record["id"], Wait=30 * SECOND_NS, MinDwell=30 * SECOND_NS)
    assert base64.b64decode(result["Output"]) == b"a\nb\n"
    assert time.monotonic() - began < 15


async def test_cancelling_a_long_poll_read_answers_cancelled(worker: WorkerClient) -> None:
    record = await start(worker, ["sleep", "1000"])
    target = worker.expect_reply("long-read")
    await worker.send_frame(
        {
            "id": "long-read",
            "method": "process/read",
            "token": worker.token,
            "data": {"Process": record["id"], "Wait": 60 * SECOND_NS},
        }
    )
    assert ok(await worker.request("cancel", {"id": "long-read"})) == {"cancelled": True}
    assert code(await asyncio.wait_for(target, DEADLINE)) == "cancelled"


# --- process/write ----------------------------------------------------------------------------------------


async def test_process_write_feeds_stdin_and_close_ends_it(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    written = ok(
        await worker.request(
            "process/write", {"id": record["id"], "data": base64.b64encode(b"hello\n").decode()}
        )
    )
    check_record(written)
    assert await output_until(worker, record["id"], lambda out: b"\n" in out) == b"hello\n"
    ok(await worker.request("process/write", {"id": record["id"], "data": "", "close": True}))
    ended = await wait_ended(worker, record["id"])
    assert ended["status"] == "exited" and ended["exit_code"] == 0
    reply = await worker.request("process/write", {"id": record["id"], "data": "eA=="})
    assert code(reply) == "invalid_request"


async def test_process_write_without_stdin_gets_invalid_request(worker: WorkerClient) -> None:
    record = await start(worker, ["sleep", "1000"])
    assert (
        code(await worker.request("process/write", {"id": record["id"], "data": "eA=="})) == "invalid_request"
    )


async def test_process_write_of_invalid_base64_gets_invalid_request(worker: WorkerClient) -> None:
    record = await start(worker, ["cat"], stdin=True)
    reply = await worker.request("process/write", {"id": record["id"], "data": "not base64!!"})
    assert code(reply) == "invalid_request"


# --- export -----------------------------------------------------------------------------------------------


async def read_export(client: WorkerClient, token: str, chunk: int) -> tuple[bytes, list[bool]]:
    data, eofs = b"", list[bool]()
    while not eofs or not eofs[-1]:
        assert len(eofs) < 10_000
        reply = ok(
            await client.request("export/read", {"token": token, "offset": len(data), "max_bytes": chunk})
        )
        data += base64.b64decode(reply["data"], validate=True)
        eofs.append(reply["eof"])
    return data, eofs


async def test_export_gives_size_sha256_and_chunks_that_reassemble(worker: WorkerClient, root: Path) -> None:
    content = os.urandom(200_000)
    (root / "artifact.bin").write_bytes(content)
    opened = ok(await worker.request("export/open", {"path": "artifact.bin"}))
    assert opened["size"] == len(content)
    assert opened["sha256"] == hashlib.sha256(content).hexdigest()
    data, eofs = await read_export(worker, opened["token"], 65_536)
    assert data == content
    assert eofs == [False, False, False, True]
    past = ok(await worker.request("export/read", {"token": opened["token"], "offset": len(content)}))
    assert past == {"data": "", "eof": True}
    assert ok(await worker.request("export/close", {"token": opened["token"]})) == {}
    reply = await worker.request("export/read", {"token": opened["token"], "offset": 0})
    assert code(reply) == "not_found"


async def test_an_export_snapshot_does_not_change_with_the_file(worker: WorkerClient, root: Path) -> None:
    original = b"version one\n" * 1000
    (root / "report.txt").write_bytes(original)
    opened = ok(await worker.request("export/open", {"path": "report.txt"}))
    (root / "report.txt").write_bytes(b"version two, longer than the first\n" * 2000)
    data, _ = await read_export(worker, opened["token"], 4096)
    assert data == original
    (root / "report.txt").unlink()
    data, _ = await read_export(worker, opened["token"], 1 * MIB)
    assert data == original
    assert hashlib.sha256(data).hexdigest() == opened["sha256"]


async def test_export_read_returns_at_most_one_mib_by_default(worker: WorkerClient, root: Path) -> None:
    content = os.urandom(MIB + 10)
    (root / "big.bin").write_bytes(content)
    opened = ok(await worker.request("export/open", {"path": "big.bin"}))
    first = ok(await worker.request("export/read", {"token": opened["token"], "offset": 0}))
    assert base64.b64decode(first["data"]) == content[:MIB] and first["eof"] is False
    reply = await worker.request(
        "export/read", {"token": opened["token"], "offset": 0, "max_bytes": 8 * MIB + 1}
    )
    assert code(reply) == "invalid_request"


async def test_exporting_a_file_over_256_mib_gets_artifact_too_large(
    worker: WorkerClient, root: Path
) -> None:
    with (root / "huge.bin").open("wb") as handle:
        handle.truncate(256 * MIB + 1)  # sparse: no disk space used
    assert code(await worker.request("export/open", {"path": "huge.bin"})) == "artifact_too_large"


async def test_an_unknown_export_token_gets_not_found(worker: WorkerClient) -> None:
    assert code(await worker.request("export/read", {"token": "nope", "offset": 0})) == "not_found"
    assert code(await worker.request("export/close", {"token": "nope"})) == "not_found"


async def test_exporting_a_missing_file_gets_not_found(worker: WorkerClient) -> None:
    assert code(await worker.request("export/open", {"path": "missing.bin"})) == "not_found"


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink-file", "symlink-dir"])
async def test_exporting_a_path_outside_the_root_gets_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], kind: str
) -> None:
    assert code(await worker.request("export/open", {"path": escapes[kind]})) == "path_outside_root"


# --- the end of the connection ----------------------------------------------------------------------------


async def test_eof_stops_every_process_tree_and_the_worker_exits_cleanly(worker: WorkerClient) -> None:
    pids: list[int] = []
    ids = []
    for argv in (PLAIN_TREE, STUBBORN_TREE):
        record = await start(worker, argv)
        ids.append(record["id"])
        pids += [int(line) for line in await lines(worker, record["id"], 2)]
    assert all(alive(pid) for pid in pids)
    outcome = await worker.close(budget=DEADLINE)
    assert outcome.returncode == 0 and not outcome.killed, outcome
    await assert_gone(*pids)
    for process_id in ids:
        events = [(e["Type"], e["Cause"]) for e in wire_events(worker, process_id)]
        assert events == [("started", "start"), ("stopped", "shutdown")], process_id


async def test_eof_cancels_a_running_exec_command_and_ends_its_tree(worker: WorkerClient, root: Path) -> None:
    pending = asyncio.create_task(
        run(worker, "exec_command", argv=["sh", "-c", "echo $$ > pid.txt; exec sleep 1000"])
    )
    pid = await pid_from_file(root / "pid.txt", pending)
    outcome = await worker.close(budget=DEADLINE)
    assert outcome.returncode == 0 and not outcome.killed, outcome
    assert code(await pending) == "cancelled"
    await assert_gone(pid)


# --- FIFOs, the largest offsets and escaped descendants (bugs found by these tests, now fixed) -----------

FIFO_CALLS = {
    "read_file": {"path": "fifo"},
    "write_file": {"path": "fifo", "content": "x"},
    "edit_file": {"path": "fifo", "old_string": "a", "new_string": "b"},
}


def release_fifo(fifo: Path) -> None:
    """Open both ends of `fifo` without blocking, so that a worker stuck opening it gets on."""
    fds = []
    for flags in (os.O_RDONLY, os.O_WRONLY):
        with contextlib.suppress(OSError):
            fds.append(os.open(fifo, flags | os.O_NONBLOCK))
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("tool", FIFO_CALLS)
async def test_a_file_tool_on_a_fifo_does_not_block_the_connection(
    worker: WorkerClient, root: Path, tool: str
) -> None:
    fifo = root / "fifo"
    os.mkfifo(fifo)
    pending = asyncio.create_task(
        worker.request("execute", tool_request(tool, FIFO_CALLS[tool]), request_id="fifo-call")
    )
    try:
        # Handlers overlap, and a cancel is answered at once.
        ok(await asyncio.wait_for(worker.request("process/list", {}), 5))
        cancel = ok(await asyncio.wait_for(worker.request("cancel", {"id": "fifo-call"}), 5))
        reply = await asyncio.wait_for(pending, DEADLINE)
        if cancel["cancelled"]:
            assert code(reply) == "cancelled"
        else:  # refused at once, as not a regular file
            assert "error" in reply or reply["data"]["is_error"] is True, reply
    finally:
        release_fifo(fifo)
        pending.cancel()
    assert (await worker.close(budget=5)).clean


async def test_exporting_a_fifo_does_not_keep_the_worker_from_exiting(
    worker: WorkerClient, root: Path
) -> None:
    fifo = root / "fifo"
    os.mkfifo(fifo)
    pending = asyncio.create_task(worker.request("export/open", {"path": "fifo"}, request_id="export-fifo"))
    try:
        ok(await asyncio.wait_for(worker.request("process/list", {}), 5))
        await worker.request("cancel", {"id": "export-fifo"})
        assert code(await asyncio.wait_for(pending, DEADLINE)) in {"cancelled", "invalid_request"}
        outcome = await worker.close(budget=5)
    finally:
        release_fifo(fifo)
        pending.cancel()
    assert outcome.clean, outcome


async def test_read_file_at_the_largest_offset_reads_nothing_with_eof(
    worker: WorkerClient, root: Path
) -> None:
    (root / "a.txt").write_text("hello")
    result = ok(await run(worker, "read_file", path="a.txt", offset_bytes=2**63 - 1))
    assert result["output"] == ""
    assert result["metadata"] == {"size": 5, "offset_bytes": 2**63 - 1, "returned_bytes": 0, "eof": True}


async def test_export_read_at_the_largest_offset_reads_nothing_with_eof(
    worker: WorkerClient, root: Path
) -> None:
    (root / "a.txt").write_text("hello")
    opened = ok(await worker.request("export/open", {"path": "a.txt"}))
    reply = await worker.request("export/read", {"token": opened["token"], "offset": 2**63 - 1})
    assert ok(reply) == {"data": "", "eof": True}


# A shell whose background child starts a session of its own (leaves the process group) but stays its child.
SESSION_LEAVER = ["sh", "-c", "setsid sleep 1000 & echo $!; wait"]


async def own_session(pid: int) -> None:
    """Wait until `pid` leads a session of its own (setsid has run)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        if int(stat[stat.rindex(b")") + 2 :].split()[3]) == pid:
            return
        assert time.monotonic() < deadline, f"{pid} never left its session"
        await asyncio.sleep(0.02)


async def test_process_stop_ends_descendants_that_left_the_process_group(worker: WorkerClient) -> None:
    record = await start(worker, SESSION_LEAVER)
    (line,) = await lines(worker, record["id"], 1)
    pid = int(line)
    try:
        await own_session(pid)
        stopped = ok(await worker.request("process/stop", {"id": record["id"], "grace_ms": 200}))
        assert stopped["status"] == "stopped"
        await assert_gone(pid, timeout_s=3)
    finally:
        if alive(pid):
            os.kill(pid, 9)


async def test_eof_ends_descendants_that_left_the_process_group(worker: WorkerClient) -> None:
    record = await start(worker, SESSION_LEAVER)
    (line,) = await lines(worker, record["id"], 1)
    pid = int(line)
    try:
        await own_session(pid)
        outcome = await worker.close(budget=DEADLINE)
        assert outcome.returncode == 0 and not outcome.killed, outcome
        await assert_gone(pid, timeout_s=3)
    finally:
        if alive(pid):
            os.kill(pid, 9)
