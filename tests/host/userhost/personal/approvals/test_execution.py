"""Approved Personal actions run through a real native worker bound to a real files root: files appear on disk,
commands exit with their status, the worker's own guards still refuse, input reaches an interactive process,
a worker killed during a call leaves an unknown outcome that is never replayed, and `close` leaves nothing
running."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers import alive, assert_gone, children, until
from wuu.generated.models import EditFileArguments, ExecCommandArguments, WriteFileArguments
from wuu.host.profiles import parse
from wuu.host.userhost.personal.approvals.execution import (
    ActionExecutor,
    Completed,
    Outcome,
    Refused,
    Unavailable,
    Unknown,
)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    return root


@pytest.fixture
async def executor(files: Path) -> AsyncIterator[ActionExecutor]:
    executor = ActionExecutor(files, session="main")
    yield executor
    await executor.close()


def completed(outcome: Outcome) -> Completed:
    assert isinstance(outcome, Completed), outcome
    return outcome


def workers() -> list[int]:
    """The native workers this test process started: each runs `wuu.worker` under a reaper of its own
    (`wuu.host.reaper`), a child of this process."""
    found = []
    for reaper in children(os.getpid()):
        try:
            if b"wuu.host.reaper" not in Path(f"/proc/{reaper}/cmdline").read_bytes():
                continue
            found += [pid for pid in children(reaper) if alive(pid)]
        except OSError:
            continue  # it ended while we looked
    return found


async def test_file_actions_change_the_files_root(executor: ActionExecutor, files: Path) -> None:
    written = completed(
        await executor.write_file(
            WriteFileArguments(path="notes/todo.txt", content="buy milk\n", create_dirs=True), "call-1"
        )
    )
    assert not written.result.is_error
    assert (files / "notes" / "todo.txt").read_text() == "buy milk\n"
    edited = completed(
        await executor.edit_file(
            EditFileArguments(path="notes/todo.txt", old_string="milk", new_string="bread"), "call-2"
        )
    )
    assert edited.result.metadata == {"replacements": 1}
    assert (files / "notes" / "todo.txt").read_text() == "buy bread\n"
    missing = completed(
        await executor.edit_file(
            EditFileArguments(path="notes/todo.txt", old_string="milk", new_string="tea"), "call-3"
        )
    )
    assert missing.result.is_error
    assert (files / "notes" / "todo.txt").read_text() == "buy bread\n"


async def test_a_command_runs_to_completion_in_the_files_root(executor: ActionExecutor, files: Path) -> None:
    (files / "work").mkdir()
    arguments = ExecCommandArguments(
        argv=["sh", "-c", 'printf "%s" "$GREETING" > made.txt; exit 3'],
        cwd="work",
        env={"GREETING": "hello"},
        timeout_ms=20_000,
    )
    ran = completed(await executor.exec_command(arguments, "call-1"))
    assert ran.result.is_error
    assert ran.exit_code == 3
    assert (files / "work" / "made.txt").read_text() == "hello"


async def test_a_command_past_its_limit_is_killed(executor: ActionExecutor) -> None:
    ran = completed(
        await executor.exec_command(ExecCommandArguments(argv=["sleep", "30"], timeout_ms=200), "call-1")
    )
    assert ran.result.is_error
    assert ran.result.metadata is not None and ran.result.metadata["timed_out"] is True


async def test_the_workers_own_guards_still_refuse(
    executor: ActionExecutor, files: Path, tmp_path: Path
) -> None:
    sensitive = await executor.write_file(WriteFileArguments(path=".env", content="TOKEN=1"), "call-1")
    assert isinstance(sensitive, Refused) and sensitive.code == "sensitive_path", sensitive
    outside = await executor.write_file(WriteFileArguments(path="../escaped.txt", content="x"), "call-2")
    assert isinstance(outside, Refused) and outside.code == "path_outside_root", outside
    escape = await executor.exec_command(
        ExecCommandArguments(argv=["sh", "-c", f"echo x > {tmp_path}/sandboxed.txt"], timeout_ms=20_000),
        "call-3",
    )
    assert completed(escape).result.is_error
    assert not (files / ".env").exists()
    assert not (tmp_path / "escaped.txt").exists()
    assert not (tmp_path / "sandboxed.txt").exists()


async def test_input_reaches_an_interactive_process(executor: ActionExecutor, files: Path) -> None:
    started = completed(await executor.process_start(["sh", "-c", 'read line; echo "got $line" > got.txt']))
    assert started.process_id is not None
    process_id = started.process_id
    assert executor.knows_process(process_id)
    assert not (files / "got.txt").exists()  # starting it sent nothing
    completed(await executor.process_write(process_id, "hello\n"))
    await until(
        lambda: (files / "got.txt").exists() and (files / "got.txt").read_text() == "got hello\n", "got.txt"
    )


async def test_input_for_a_process_the_worker_did_not_start_is_refused(executor: ActionExecutor) -> None:
    assert not executor.knows_process("proc_unknown")
    refused = await executor.process_write("proc_unknown", "hello\n")
    assert isinstance(refused, Refused) and refused.code == "not_found", refused
    assert workers() == []  # refused before any worker was needed


async def test_close_ends_the_worker_and_its_processes(files: Path) -> None:
    executor = ActionExecutor(files, session="main")
    started = completed(await executor.process_start(["sleep", "300"]))
    assert started.process is not None and started.process.pid is not None
    running = [*workers(), started.process.pid]
    assert len(running) == 2 and all(alive(pid) for pid in running)
    await executor.close()
    await assert_gone(*running)
    assert workers() == []
    closed = await executor.write_file(WriteFileArguments(path="late.txt", content="x"), "call-1")
    assert isinstance(closed, Unavailable)
    assert not (files / "late.txt").exists()


async def test_a_call_cut_short_by_the_worker_dying_is_unknown_and_not_replayed(
    executor: ActionExecutor, files: Path
) -> None:
    arguments = ExecCommandArguments(
        argv=["sh", "-c", "echo ran >> runs.txt; echo $$ > pid.txt; exec sleep 300"], timeout_ms=600_000
    )
    call = asyncio.create_task(executor.exec_command(arguments, "call-1"))
    await until(
        lambda: (files / "pid.txt").exists() and (files / "pid.txt").read_text().endswith("\n"), "pid.txt"
    )
    command = int((files / "pid.txt").read_text())
    [worker] = workers()
    os.kill(worker, 9)
    outcome = await asyncio.wait_for(call, 20)
    assert isinstance(outcome, Unknown), outcome
    # The next call gets a new worker; the old one's command is ended, and the cut-short call is not sent again.
    completed(await executor.write_file(WriteFileArguments(path="after.txt", content="x"), "call-2"))
    assert workers() != [worker]
    await assert_gone(command)
    assert (files / "runs.txt").read_text() == "ran\n"
    assert (files / "after.txt").read_text() == "x"


async def test_a_process_of_a_dead_worker_gets_no_input(executor: ActionExecutor, files: Path) -> None:
    command = ["sh", "-c", 'read line; printf "%s" "$line" >> got.txt']
    old = completed(await executor.process_start(command))
    assert old.process_id is not None and old.process is not None
    [worker] = workers()
    os.kill(worker, 9)
    await until(lambda: not executor.knows_process(str(old.process_id)), "the process to be forgotten")
    new = completed(await executor.process_start(command))
    assert new.process is not None and new.process.id == old.process.id  # the new worker reuses its ids
    assert new.process_id != old.process_id
    refused = await executor.process_write(old.process_id, "meant for the old one\n")
    assert isinstance(refused, Refused) and refused.code == "not_found", refused
    completed(await executor.process_write(str(new.process_id), "meant for the new one\n"))
    await until(lambda: (files / "got.txt").exists() and (files / "got.txt").read_text() != "", "got.txt")
    assert (files / "got.txt").read_text() == "meant for the new one"


async def test_a_profile_forwards_its_variables_to_commands(files: Path) -> None:
    profile = parse(
        {
            "execution_environments": {
                "profiles": {"mine": {"backend": "local", "forward_env": ["WUU_FORWARDED"]}}
            }
        }
    ).select("mine")
    executor = ActionExecutor(files, session="main", profile=profile, environ={"WUU_FORWARDED": "passed"})
    try:
        ran = completed(
            await executor.exec_command(
                ExecCommandArguments(argv=["sh", "-c", 'printf "%s" "$WUU_FORWARDED"']),  # the default limit
                "call-1",
            )
        )
    finally:
        await executor.close()
    assert ran.result.output == "passed"


async def test_an_environment_that_cannot_start_leaves_the_action_unexecuted(files: Path) -> None:
    profile = parse(
        {
            "execution_environments": {
                "profiles": {"broken": {"backend": "local", "worker": ["/nonexistent/worker"]}}
            }
        }
    ).select("broken")
    executor = ActionExecutor(files, session="main", profile=profile)
    try:
        outcome = await executor.write_file(WriteFileArguments(path="todo.txt", content="x"), "call-1")
    finally:
        await executor.close()
    assert isinstance(outcome, Unavailable), outcome
    assert "broken" in outcome.reason
    assert not (files / "todo.txt").exists()
