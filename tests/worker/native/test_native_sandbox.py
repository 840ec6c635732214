"""The permission modes on the native worker: `read_only` refuses file mutations, and the OS sandbox keeps
commands and background processes from writing where their mode does not allow.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import code, ok, run_tool, same_path, start, wait_ended
from wuu.worker.client import WorkerClient
from wuu.worker.native import landlock


async def test_read_only_refuses_file_mutations_with_permission_denied(
    worker: WorkerClient, root: Path
) -> None:
    (root / "a.txt").write_text("original")
    reply = await run_tool(worker, "write_file", mode="read_only", path="a.txt", content="changed")
    assert code(reply) == "permission_denied"
    reply = await run_tool(worker, "write_file", mode="read_only", path="new.txt", content="new")
    assert code(reply) == "permission_denied"
    reply = await run_tool(
        worker, "edit_file", mode="read_only", path="a.txt", old_string="orig", new_string="X"
    )
    assert code(reply) == "permission_denied"
    assert (root / "a.txt").read_text() == "original"
    assert not (root / "new.txt").exists()


async def test_read_only_still_runs_commands(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("readable\n")
    result = ok(await run_tool(worker, "exec_command", mode="read_only", argv=["cat", "a.txt"]))
    assert result["output"] == "readable\n" and result["is_error"] is False


async def test_read_only_commands_cannot_write_files(worker: WorkerClient, root: Path) -> None:
    (root / "existing.txt").write_text("keep me")
    result = ok(await run_tool(worker, "exec_command", mode="read_only", argv=["sh", "-c", "echo x > f"]))
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]
    assert not (root / "f").exists()
    result = ok(
        await run_tool(worker, "exec_command", mode="read_only", argv=["sh", "-c", "echo x >> existing.txt"])
    )
    assert result["is_error"] is True
    assert (root / "existing.txt").read_text() == "keep me"
    result = ok(
        await run_tool(worker, "exec_command", mode="read_only", argv=["sh", "-c", 'echo x > "$TMPDIR/t"'])
    )
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]


async def test_read_only_background_processes_cannot_write_files(worker: WorkerClient, root: Path) -> None:
    record = await start(worker, ["sh", "-c", "echo x > f"], permission_mode="read_only")
    ended = await wait_ended(worker, record["id"])
    assert ended["status"] == "exited" and ended["exit_code"] != 0
    assert not (root / "f").exists()


async def test_standard_commands_write_inside_the_root(worker: WorkerClient, root: Path) -> None:
    result = ok(await run_tool(worker, "exec_command", argv=["sh", "-c", "mkdir -p d && echo x > d/f"]))
    assert result["is_error"] is False, result
    assert (root / "d" / "f").read_text() == "x\n"


async def test_standard_commands_cannot_write_outside_the_root(worker: WorkerClient, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "f"
    result = ok(await run_tool(worker, "exec_command", argv=["sh", "-c", f"echo x > '{target}'"]))
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]
    assert not target.exists()


async def test_standard_commands_cannot_write_through_a_symlink_that_leaves_the_root(
    worker: WorkerClient, root: Path, outside: Path
) -> None:
    (root / "link_dir").symlink_to(outside)
    result = ok(await run_tool(worker, "exec_command", argv=["sh", "-c", "echo x > link_dir/f"]))
    assert result["is_error"] is True
    assert "Permission denied" in result["output"]
    assert not (outside / "f").exists()


async def test_standard_commands_write_their_private_tmpdir(worker: WorkerClient, root: Path) -> None:
    script = 'echo data > "$TMPDIR/t.txt" && cat "$TMPDIR/t.txt" && echo "$TMPDIR"'
    result = ok(await run_tool(worker, "exec_command", argv=["sh", "-c", script]))
    assert result["is_error"] is False, result
    data, tmpdir = result["output"].splitlines()
    assert data == "data"
    assert os.path.isabs(tmpdir) and not same_path(tmpdir, "/tmp")
    assert not os.path.realpath(tmpdir).startswith(os.path.realpath(root) + "/")


async def test_unconfined_commands_may_write_outside_the_root(worker: WorkerClient, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    result = ok(
        await run_tool(worker, "exec_command", mode="unconfined", argv=["sh", "-c", f"echo x > '{target}'"])
    )
    assert result["is_error"] is False, result
    assert target.read_text() == "x\n"


requires_scopes = pytest.mark.skipif(
    landlock.abi_version() < 6, reason=f"needs Landlock ABI 6+ (ABI {landlock.abi_version()})"
)

# Run by a confined command: try to signal (signal 0) and to ptrace-attach every thread of its parent, the
# worker; print one line per thread.
REACH_THE_WORKER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
worker = os.getppid()
for tid in sorted(int(name) for name in os.listdir(f"/proc/{worker}/task")):
    try:
        os.kill(tid, 0)
        signalled = "signalled"
    except PermissionError:
        signalled = "refused"
    if libc.ptrace(16, tid, 0, 0) == 0:  # PTRACE_ATTACH: let go at once, the worker must go on
        os.waitpid(tid, 0x40000000)  # __WALL
        libc.ptrace(17, tid, 0, 0)  # PTRACE_DETACH
        traced = "traced"
    else:
        traced = "refused"
    print(tid, signalled, traced)
"""

CONNECT = "import socket, sys; socket.socket(socket.AF_UNIX).connect('\\0' + sys.argv[1]); print('connected')"


@pytest.fixture
def outsider() -> Iterator[int]:
    """The pid of a process the test started itself, outside every command's domain."""
    process = subprocess.Popen(["sleep", "1000"])
    yield process.pid
    process.kill()
    process.wait()


@requires_scopes
@pytest.mark.parametrize("mode", ["standard", "read_only"])
async def test_confined_commands_signal_only_their_own_processes(
    worker: WorkerClient, outsider: int, mode: str
) -> None:
    outside = ok(await run_tool(worker, "exec_command", mode=mode, argv=["kill", "-0", str(outsider)]))
    assert outside["is_error"] is True
    assert "Operation not permitted" in outside["output"]
    own = ok(await run_tool(worker, "exec_command", mode=mode, argv=["sh", "-c", "sleep 1000 & kill $!"]))
    assert own["is_error"] is False, own
    unconfined = ok(
        await run_tool(worker, "exec_command", mode="unconfined", argv=["kill", "-0", str(outsider)])
    )
    assert unconfined["is_error"] is False, unconfined


@requires_scopes
async def test_each_confined_command_has_a_domain_of_its_own(worker: WorkerClient) -> None:
    record = await start(worker, ["sleep", "1000"])
    result = ok(await run_tool(worker, "exec_command", argv=["kill", "-0", str(record["pid"])]))
    assert result["is_error"] is True
    assert "Operation not permitted" in result["output"]


@requires_scopes
@pytest.mark.parametrize("mode", ["standard", "read_only"])
async def test_confined_commands_can_neither_signal_nor_trace_the_worker(
    worker: WorkerClient, tmp_path: Path, mode: str
) -> None:
    script = tmp_path / "reach.py"
    script.write_text(REACH_THE_WORKER)
    result = ok(await run_tool(worker, "exec_command", mode=mode, argv=[sys.executable, str(script)]))
    assert result["is_error"] is False, result
    lines = result["output"].splitlines()
    assert lines and all(line.endswith(" refused refused") for line in lines), lines


@requires_scopes
@pytest.mark.parametrize("mode", ["standard", "read_only"])
async def test_confined_commands_cannot_connect_to_an_abstract_socket_outside(
    worker: WorkerClient, mode: str
) -> None:
    name = f"wuu-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("\0" + name)
        listener.listen()
        argv = [sys.executable, "-c", CONNECT, name]
        confined = ok(await run_tool(worker, "exec_command", mode=mode, argv=argv))
        assert confined["is_error"] is True
        assert "PermissionError" in confined["output"]
        unconfined = ok(await run_tool(worker, "exec_command", mode="unconfined", argv=argv))
        assert unconfined["output"] == "connected\n"
