"""The permission modes on the native worker: `read_only` refuses file mutations, and the OS sandbox keeps
commands and background processes from writing where their mode does not allow.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import code, ok, run_tool, same_path, start, wait_ended
from wuu.worker.client import WorkerClient


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
