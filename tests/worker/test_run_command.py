"""run_command, the native worker's exec_command (wuu.worker.native.processes), with real processes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.helpers import MINIMAL_ENV, STUBBORN_TREE, alive, assert_gone, until
from wuu.worker.native.processes import run_command


def processes_in(cwd: Path) -> list[int]:
    """The live processes whose working directory is `cwd` (each test's commands run in its own tmp_path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cwd").resolve() == cwd.resolve() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def assert_none_left_in(cwd: Path) -> None:
    """Wait until no process runs in `cwd`; fail after 5 s."""
    await until(lambda: not processes_in(cwd), f"the processes in {cwd} to end", timeout_s=5)


async def test_run_command_collects_output_and_status(tmp_path: Path) -> None:
    outcome = await run_command(
        ["sh", "-c", "echo out; echo err >&2; exit 7"],
        cwd=tmp_path,
        env=MINIMAL_ENV,
        preexec_fn=None,
        timeout_ms=None,
        max_output_bytes=1 << 20,
    )
    assert outcome.output == b"out\nerr\n"
    assert (outcome.exit_code, outcome.signal, outcome.timed_out, outcome.start_error) == (
        7,
        None,
        False,
        None,
    )
    assert outcome.metadata().to_wire()["exit_code"] == 7


async def test_run_command_timeout_kills_the_tree(tmp_path: Path) -> None:
    started = time.monotonic()
    outcome = await run_command(
        [*STUBBORN_TREE],
        cwd=tmp_path,
        env=MINIMAL_ENV,
        preexec_fn=None,
        timeout_ms=300,
        max_output_bytes=1 << 20,
    )
    assert time.monotonic() - started < 5
    assert outcome.timed_out and outcome.signal == "KILL" and outcome.exit_code is None
    await assert_gone(int(outcome.output.split(b"\n", 1)[0]), timeout_s=5)


async def test_run_command_keeps_the_tail_and_kills_leftovers(tmp_path: Path) -> None:
    outcome = await run_command(
        ["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!; printf 0123456789"],
        cwd=tmp_path,
        env=MINIMAL_ENV,
        preexec_fn=None,
        timeout_ms=None,
        max_output_bytes=4,
    )
    assert outcome.output == b"6789" and outcome.truncated
    assert outcome.exit_code == 0
    assert outcome.total_bytes > 10
    # The leftover's pid is in the lost head of the output; no sleep 1000 of this test survives.
    await assert_none_left_in(tmp_path)


async def test_run_command_program_not_found(tmp_path: Path) -> None:
    outcome = await run_command(
        ["/nonexistent/program"],
        cwd=tmp_path,
        env=MINIMAL_ENV,
        preexec_fn=None,
        timeout_ms=None,
        max_output_bytes=10,
    )
    assert outcome.start_error is not None
    assert outcome.exit_code == 127 and outcome.output == b""


async def test_run_command_program_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho hi\n")
    outcome = await run_command(
        [str(script)], cwd=tmp_path, env=MINIMAL_ENV, preexec_fn=None, timeout_ms=None, max_output_bytes=10
    )
    assert outcome.start_error is not None and outcome.exit_code == 126


async def test_cancelled_run_command_kills_the_tree(tmp_path: Path) -> None:
    running = asyncio.create_task(
        run_command(
            [*STUBBORN_TREE],
            cwd=tmp_path,
            env=MINIMAL_ENV,
            preexec_fn=None,
            timeout_ms=None,
            max_output_bytes=100,
        )
    )
    await until(lambda: processes_in(tmp_path), "the command to start")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await assert_none_left_in(tmp_path)
