"""run_command, the native worker's exec_command (wuu.worker.native.processes), with real processes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.helpers import MINIMAL_ENV, STUBBORN_TREE, alive, assert_gone, until
from wuu.worker.native.processes import run_command
from wuu.worker.native.spawner import Spawner


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
        spawner=Spawner(),
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
        spawner=Spawner(),
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
        spawner=Spawner(),
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
        spawner=Spawner(),
        timeout_ms=None,
        max_output_bytes=10,
    )
    assert outcome.start_error is not None
    assert outcome.exit_code == 127 and outcome.output == b""


async def test_run_command_program_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho hi\n")
    outcome = await run_command(
        [str(script)], cwd=tmp_path, env=MINIMAL_ENV, spawner=Spawner(), timeout_ms=None, max_output_bytes=10
    )
    assert outcome.start_error is not None and outcome.exit_code == 126


async def test_cancelled_run_command_kills_the_tree(tmp_path: Path) -> None:
    running = asyncio.create_task(
        run_command(
            [*STUBBORN_TREE],
            cwd=tmp_path,
            env=MINIMAL_ENV,
            spawner=Spawner(),
            timeout_ms=None,
            max_output_bytes=100,
        )
    )
    await until(lambda: processes_in(tmp_path), "the command to start")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await assert_none_left_in(tmp_path)


# A command that cleans up on TERM: with `cleanup` (shell code) run before it leaves a file behind.
def _cleans_up_on_term(cleanup: str = ":") -> list[str]:
    trap = f"trap '{cleanup}; echo done > cleaned; exit 0' TERM"
    return ["sh", "-c", f"{trap}; : > ready; while :; do sleep 0.02; done"]


def _cleaning_command(cwd: Path, cleanup: str = ":") -> asyncio.Task[object]:
    return asyncio.create_task(
        run_command(
            _cleans_up_on_term(cleanup),
            cwd=cwd,
            env=MINIMAL_ENV,
            spawner=Spawner(),
            timeout_ms=None,
            max_output_bytes=100,
        )
    )


async def test_a_cancelled_command_gets_term_and_the_call_ends_after_its_cleanup(tmp_path: Path) -> None:
    running = _cleaning_command(tmp_path)
    await until((tmp_path / "ready").exists, "the command to set its TERM handler")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    # The call ended only once the command had run its TERM handler and exited.
    assert (tmp_path / "cleaned").read_text() == "done\n"
    assert not processes_in(tmp_path)


async def test_a_second_cancel_does_not_cut_the_cleanup_short(tmp_path: Path) -> None:
    running = _cleaning_command(tmp_path, cleanup=": > cleaning; sleep 0.3")
    await until((tmp_path / "ready").exists, "the command to set its TERM handler")
    running.cancel()
    await until((tmp_path / "cleaning").exists, "the TERM handler to start its cleanup")
    running.cancel()  # as at EOF, which cancels every handler still in flight
    with pytest.raises(asyncio.CancelledError):
        await running
    # The call still ended only once the tree was gone (after its cleanup, or its KILL on a slow machine).
    assert not processes_in(tmp_path)


async def test_a_cancelled_command_that_ignores_term_is_killed_after_the_grace(tmp_path: Path) -> None:
    running = asyncio.create_task(
        run_command(
            [*STUBBORN_TREE],
            cwd=tmp_path,
            env=MINIMAL_ENV,
            spawner=Spawner(),
            timeout_ms=None,
            max_output_bytes=100,
        )
    )
    await until(lambda: len(processes_in(tmp_path)) == 2, "the command and its child to start")
    began = time.monotonic()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    elapsed = time.monotonic() - began
    assert 0.9 <= elapsed < 5, f"the cancelled call ended after {elapsed:.2f} s; the grace is 1 s"
    assert not processes_in(tmp_path)  # the tree was gone when the call ended
