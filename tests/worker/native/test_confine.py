"""wuu-confine, the compiled helper that starts confined commands: built by the installation, the command found
and refused exactly as an unconfined spawn finds and refuses it, nothing run when the domain cannot be entered,
no fd of its own left to the command, and nothing left behind by a cancelled spawn."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, carrying
from wuu.generated.models import PermissionMode
from wuu.worker.native import confine
from wuu.worker.native.confine import HelperSpawner
from wuu.worker.native.sandbox import MIN_ABI, Sandbox, SandboxPolicy, sandbox_abi
from wuu.worker.native.spawner import Spawner

pytestmark = pytest.mark.skipif(
    sandbox_abi() < MIN_ABI or confine.helper() is None,
    reason="needs Landlock and the built helper (test_the_installation_builds_the_helper says why it is absent)",
)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    opened = Sandbox(SandboxPolicy(PermissionMode.STANDARD, (tmp_path,)))
    yield opened
    opened.close()


async def outcome(spawner: Spawner, argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[object, ...]:
    """How a spawn of `argv` ends: the error's type, errno and file name, or the command's status and output."""
    try:
        child = await spawner.popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as error:
        return type(error), error.errno, error.filename
    output, _ = await asyncio.to_thread(child.communicate, timeout=DEADLINE)
    return child.returncode, output


@pytest.mark.skipif(sandbox_abi() < MIN_ABI, reason="needs Landlock")
def test_the_installation_builds_the_helper() -> None:
    # setup.py builds it wherever a C compiler is on PATH; without one the worker forks instead.
    compiler = os.environ.get("CC", "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the installation could not build the helper")
    assert confine.helper() == confine.HELPER


async def test_a_command_is_found_and_refused_as_an_unconfined_spawn_would(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for directory in (first, second):
        directory.mkdir()
    (first / "shadowed").write_text("#!/bin/sh\necho first\n")  # not executable: the next one runs
    (second / "shadowed").write_text("#!/bin/sh\necho second\n")
    (second / "shadowed").chmod(0o755)
    (first / "plain").write_text("#!/bin/sh\necho plain\n")  # not executable anywhere: EACCES, not ENOENT
    (second / "no-interpreter-line").write_text("echo run by sh?\n")
    (second / "no-interpreter-line").chmod(0o755)
    (tmp_path / "here").write_text("#!/bin/sh\necho here\n")
    (tmp_path / "here").chmod(0o755)
    path = f"{first}:{second}"
    cases: list[tuple[list[str], dict[str, str]]] = [
        (["shadowed"], {"PATH": path}),
        (["plain"], {"PATH": path}),
        (["no-interpreter-line"], {"PATH": path}),
        (["missing-command"], {"PATH": path}),
        ([str(tmp_path / "missing")], {"PATH": path}),
        ([str(first)], {"PATH": path}),
        (["./here"], {"PATH": path}),
        (["here"], {"PATH": f":{first}"}),  # an empty entry is the current directory
        (["echo", "no PATH at all"], {}),
    ]
    for argv, env in cases:
        confined = await outcome(sandbox.spawner, argv, tmp_path, env)
        assert confined == await outcome(Spawner(), argv, tmp_path, env), argv


async def test_nothing_runs_where_the_domain_cannot_be_entered(tmp_path: Path) -> None:
    read, write = os.pipe()  # an fd, but no ruleset
    try:
        spawner = HelperSpawner(confine.HELPER, read)
        with pytest.raises(subprocess.SubprocessError, match="the sandbox could not be applied: "):
            await spawner.popen(["touch", str(tmp_path / "ran")])
    finally:
        os.close(read)
        os.close(write)
    assert not (tmp_path / "ran").exists()


async def test_a_missing_helper_is_the_sandboxes_failure_not_the_commands(tmp_path: Path) -> None:
    spawner = HelperSpawner(tmp_path / "wuu-confine", 0)
    with pytest.raises(
        subprocess.SubprocessError, match=f"the sandbox helper {tmp_path}/wuu-confine cannot run"
    ):
        await spawner.popen(["true"])


async def test_the_command_gets_the_callers_fds_and_none_of_the_helpers(sandbox: Sandbox) -> None:
    read, write = os.pipe()
    try:
        child = await sandbox.spawner.popen(
            ["sh", "-c", "ls /proc/$$/fd"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            pass_fds=(write,),
        )
        output, _ = await asyncio.to_thread(child.communicate, timeout=DEADLINE)
    finally:
        os.close(read)
        os.close(write)
    # Neither the ruleset nor the helper's report pipe: only the standard three and the one passed.
    assert sorted(int(name) for name in output.split()) == [0, 1, 2, write]


async def test_a_cancelled_spawn_leaves_no_process(sandbox: Sandbox) -> None:
    marker = f"wuu-confine-{uuid.uuid4().hex}"
    for _ in range(20):
        task = asyncio.create_task(
            sandbox.spawner.popen(["sh", "-c", "sleep 30; :", marker], start_new_session=True)
        )
        await asyncio.sleep(0)
        if not task.cancel():
            child = task.result()
            child.kill()
            await asyncio.to_thread(child.wait)
        with pytest.raises(asyncio.CancelledError):
            await task
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while carrying(marker):
        assert loop.time() < deadline, "a cancelled spawn left its command running"
        await asyncio.sleep(0.01)
