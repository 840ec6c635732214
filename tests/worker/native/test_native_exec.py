"""exec_command on the native worker: output, exit status, timeouts, the working directory and cancel.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, alive, assert_gone, code, ok, pid_from_file, run_tool, same_path
from wuu.worker.client import WorkerClient


async def test_exec_command_returns_combined_output_and_exit_code_zero(worker: WorkerClient) -> None:
    result = ok(await run_tool(worker, "exec_command", argv=["sh", "-c", "echo out; echo err >&2"]))
    assert result["output"] == "out\nerr\n"
    assert result["is_error"] is False
    metadata = result["metadata"]
    assert metadata["exit_code"] == 0 and metadata["signal"] is None and metadata["timed_out"] is False
    assert isinstance(metadata["duration_ns"], int) and metadata["duration_ns"] >= 0


async def test_exec_command_with_a_non_zero_exit_is_an_error_result(worker: WorkerClient) -> None:
    result = ok(await run_tool(worker, "exec_command", argv=["sh", "-c", "echo failing; exit 3"]))
    assert result["is_error"] is True
    assert result["output"] == "failing\n"
    assert result["metadata"]["exit_code"] == 3 and result["metadata"]["timed_out"] is False


async def test_exec_command_timeout_kills_the_command_and_sets_timed_out(worker: WorkerClient) -> None:
    began = time.monotonic()
    result = ok(await run_tool(worker, "exec_command", argv=["sleep", "60"], timeout_ms=300))
    assert time.monotonic() - began < DEADLINE
    assert result["is_error"] is True
    assert result["metadata"]["timed_out"] is True
    assert result["metadata"]["exit_code"] is None and result["metadata"]["signal"] is not None


async def test_exec_command_runs_in_cwd_relative_to_the_root(worker: WorkerClient, root: Path) -> None:
    (root / "sub").mkdir()
    result = ok(await run_tool(worker, "exec_command", argv=["pwd"], cwd="sub"))
    assert same_path(result["output"].strip(), root / "sub")
    default = ok(await run_tool(worker, "exec_command", argv=["pwd"]))
    assert same_path(default["output"].strip(), root)


async def test_exec_command_reports_an_unstartable_program_as_a_shell_would(
    worker: WorkerClient, root: Path
) -> None:
    missing = ok(await run_tool(worker, "exec_command", argv=["no-such-program-wuu"]))
    assert missing["is_error"] is True and missing["metadata"]["exit_code"] == 127
    (root / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "script.sh").chmod(0o644)
    not_executable = ok(await run_tool(worker, "exec_command", argv=["./script.sh"]))
    assert not_executable["is_error"] is True and not_executable["metadata"]["exit_code"] == 126


async def test_cancelling_exec_command_ends_its_process_tree(worker: WorkerClient, root: Path) -> None:
    pending = asyncio.create_task(
        run_tool(worker, "exec_command", argv=["sh", "-c", "echo $$ > pid.txt; exec sleep 1000"])
    )
    pid = await pid_from_file(root / "pid.txt", pending)
    request_id = next(
        json.loads(raw)["id"] for direction, raw in worker.transcript.entries if b'"exec_command"' in raw
    )
    assert ok(await worker.request("cancel", {"id": request_id})) == {"cancelled": True}
    assert code(await asyncio.wait_for(pending, DEADLINE)) == "cancelled"
    await assert_gone(pid)


async def test_a_cancelled_exec_command_is_answered_after_its_command_cleaned_up(
    worker: WorkerClient, root: Path
) -> None:
    script = "trap 'echo done > cleaned.txt; exit 0' TERM; echo $$ > pid.txt; while :; do sleep 0.02; done"
    pending = asyncio.create_task(run_tool(worker, "exec_command", argv=["sh", "-c", script]))
    pid = await pid_from_file(root / "pid.txt", pending)
    request_id = next(
        json.loads(raw)["id"] for direction, raw in worker.transcript.entries if b'"exec_command"' in raw
    )
    assert ok(await worker.request("cancel", {"id": request_id})) == {"cancelled": True}
    assert code(await asyncio.wait_for(pending, DEADLINE)) == "cancelled"
    # The command got TERM and the reply waited for its handler: the file was there when `cancelled` came.
    assert (root / "cleaned.txt").read_text() == "done\n"
    assert not alive(pid)


# Commands that leave a `sleep` running when their first process exits, and write its pid to `pid.txt`.
LEFT_BEHIND = {
    "in its process group": "sleep 1000 >/dev/null 2>&1 & echo $! > pid.txt",
    # The subshell ends at once: the sleep has left the session and has no parent in the command any more.
    "in a session of its own, orphaned": "(setsid sleep 1000 >/dev/null 2>&1 & echo $! > pid.txt)",
    "orphaned and holding the output": "(setsid sleep 1000 & echo $! > pid.txt)",
}


@pytest.mark.parametrize("mode", ["standard", "unconfined"])
@pytest.mark.parametrize("script", sorted(LEFT_BEHIND))
async def test_what_a_command_leaves_running_is_gone_when_it_is_answered(
    worker: WorkerClient, root: Path, mode: str, script: str
) -> None:
    result = ok(await run_tool(worker, "exec_command", mode=mode, argv=["sh", "-c", LEFT_BEHIND[script]]))
    assert result["is_error"] is False and result["metadata"]["timed_out"] is False
    # Already gone, not going: the reply came after the tree had ended.
    assert not alive(int((root / "pid.txt").read_text()))


@pytest.mark.parametrize("mode", ["standard", "unconfined"])
async def test_exec_command_timeout_ends_descendants_that_left_the_command(
    worker: WorkerClient, root: Path, mode: str
) -> None:
    script = f"{LEFT_BEHIND['in a session of its own, orphaned']}; sleep 1000"
    result = ok(await run_tool(worker, "exec_command", mode=mode, argv=["sh", "-c", script], timeout_ms=500))
    assert result["metadata"]["timed_out"] is True
    assert not alive(int((root / "pid.txt").read_text()))
