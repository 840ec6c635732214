"""wuu-confine, the compiled helper that starts confined commands: built by the installation, the command found,
refused and given its environment exactly as an unconfined spawn does it, that environment kept from the helper
itself, nothing run when the domain cannot be entered, no fd of its own left to the command, and nothing left
behind by a cancelled spawn."""

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
from wuu.worker.native import confine, landlock
from wuu.worker.native.confine import HelperSpawner
from wuu.worker.native.landlock import AccessFs
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
        (["env"], {"PATH": path, "ONE": "1", "EMPTY": ""}),  # exactly its own environment
        (["n" * 300], {"PATH": path}),  # a name longer than a file name may be
        (["n" * 5000], {"PATH": path}),  # a path longer than a path may be
    ]
    for argv, env in cases:
        confined = await outcome(sandbox.spawner, argv, tmp_path, env)
        assert confined == await outcome(Spawner(), argv, tmp_path, env), argv


EVIL = """
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void escape(void) {
    const char *marker = getenv("MARKER");
    if (marker != NULL) close(open(marker, O_CREAT | O_WRONLY, 0600));
}
"""


async def test_the_commands_environment_does_not_act_on_the_helper(tmp_path: Path) -> None:
    # A dynamically linked helper (where no static C library is installed, the build makes one) would run
    # LD_PRELOAD's constructor before it enters the domain; the command's environment never reaches it.
    compiler = os.environ.get("CC", "cc").split()[0]
    source = Path(confine.__file__).with_name("confine.c")
    (tmp_path / "evil.c").write_text(EVIL)
    built = [
        subprocess.run([compiler, *argv], capture_output=True, check=False)
        for argv in (
            ["-shared", "-fPIC", "-o", str(tmp_path / "evil.so"), str(tmp_path / "evil.c")],
            ["-std=c11", "-o", str(tmp_path / "dynamic-confine"), str(source)],
        )
    ]
    assert all(result.returncode == 0 for result in built), [result.stderr for result in built]
    outside = tmp_path.parent / f"{tmp_path.name}-escaped"
    ruleset = landlock.create_ruleset(
        {"/": AccessFs.READ_FILE | AccessFs.READ_DIR | AccessFs.EXECUTE}, sandbox_abi()
    )
    try:
        spawner = HelperSpawner(tmp_path / "dynamic-confine", ruleset)
        env = {"PATH": os.environ["PATH"], "LD_PRELOAD": str(tmp_path / "evil.so"), "MARKER": str(outside)}
        child = await spawner.popen(["true"], env=env)
        assert await asyncio.to_thread(child.wait) == 0
    finally:
        os.close(ruleset)
    # The command itself ran the constructor too, but confined: the file outside its root is not there.
    assert not outside.exists()


async def test_options_that_would_run_another_program_are_refused(sandbox: Sandbox) -> None:
    for options in ({"executable": "/bin/sh"}, {"shell": True}):
        with pytest.raises(ValueError, match="no `executable`, no `shell`"):
            await sandbox.spawner.popen(["true"], **options)


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
