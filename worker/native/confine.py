"""Starting a confined command through `wuu-confine`, the compiled helper built from confine.c.

The worker spawns the helper as it spawns an unconfined command (a vfork and an exec, on the event loop's
thread); the helper enters a Landlock domain of its own and execs the command, so the command gets the
domain as a `preexec_fn` would give it, without a fork of the whole worker (a few milliseconds for a
Python process; the exec of the small static helper costs a fraction of one). The installation builds the
helper (setup.py); where it could not, `sandbox.Sandbox` falls back to `spawner.ConfinedSpawner`.

The helper runs with an empty environment and gives the command its own, passed in its arguments, so that
nothing a request puts in a command's environment (LD_PRELOAD, say) acts on the helper before it is confined.
It reports on a pipe whose write end is close-on-exec in it: end of file means the command is running; a
line `landlock ERRNO` or `exec ERRNO` means it is not, and the helper has exited.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wuu.worker.native.spawner import SPAWNED, SandboxSpawner, abandon

HELPER = Path(__file__).with_name("wuu-confine")
"""Where the installation puts the helper: beside this module."""


def helper() -> Path | None:
    """The helper, if the installation built it and it can be run."""
    return HELPER if os.access(HELPER, os.X_OK) else None


class HelperSpawner(SandboxSpawner):
    """Starts children that enter the Landlock ruleset `ruleset_fd` before their command runs, each in a
    domain of its own, through the helper.

    A child that cannot enter the domain runs nothing, and its spawn raises SubprocessError; a command that
    cannot be executed raises OSError as `subprocess.Popen` would (FileNotFoundError for a missing one).
    """

    def __init__(self, helper: Path, ruleset_fd: int) -> None:
        super().__init__()
        self._helper = str(helper)
        self._ruleset_fd = ruleset_fd

    async def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        self._refuse_when_closed()
        if "executable" in options or options.get("shell"):
            raise ValueError("a confined spawn runs argv itself: no `executable`, no `shell`")
        environment = _entries(options.pop("env", None))
        report, status = os.pipe()
        wrapped = [
            self._helper,
            str(self._ruleset_fd),
            str(status),
            str(len(environment)),
            *environment,
            *argv,
        ]
        passed = (*options.pop("pass_fds", ()), self._ruleset_fd, status)
        try:
            # The helper itself gets no environment: the command's is in its arguments.
            child = SPAWNED.popen(wrapped, {**options, "env": {}, "pass_fds": passed})
        except BaseException as error:
            os.close(report)
            if isinstance(error, OSError) and error.filename == self._helper:
                raise subprocess.SubprocessError(
                    f"the sandbox helper {self._helper} cannot run: {error}"
                ) from None
            raise
        finally:
            os.close(status)
        try:
            said = await _read_to_end(report)
        except BaseException:
            await abandon(child)
            raise
        if not said:
            return child
        await asyncio.to_thread(child.wait)  # the helper exits right after its report
        stage, _, number = said.decode(errors="replace").partition(" ")
        code = int(number) if number.strip().isdigit() else errno.EIO
        if stage == "exec":
            raise OSError(code, os.strerror(code), argv[0])
        raise subprocess.SubprocessError(f"the sandbox could not be applied: {os.strerror(code)}")


def _entries(env: Mapping[str, str] | None) -> list[str]:
    """The command's environment (`env`, else this process's) as `NAME=VALUE` entries, refused as
    `subprocess.Popen` refuses it."""
    entries = []
    for name, value in (os.environ if env is None else env).items():
        if "=" in name:
            raise ValueError("illegal environment variable name")
        entries.append(f"{name}={value}")
    return entries


async def _read_to_end(fd: int) -> bytes:
    """What the helper writes to the report pipe `fd` until its end, read without blocking the loop; closes
    `fd`. Only the helper can write to it, a line at most: the command never holds it."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    received = bytearray()

    def readable() -> None:
        if ended.done():
            return
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return
        received.extend(chunk)
        if not chunk:
            ended.set_result(None)

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return bytes(received)
