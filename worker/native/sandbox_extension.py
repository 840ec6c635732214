"""The worker's side of a sandbox.process@1 extension (spec/schema/config/sandbox_process.schema.json): the
program `WUU_SANDBOX_PROCESS` names confines the commands of a mode when the built-in backend cannot.

The program is probed once per policy; then each command is spawned as `PROGRAM run --mode M [--writable D]...
--status-fd N -- ARGV`, and the spawn returns only once the program has reported `confined` on N. Whatever else
happens (another report, none, the program ending) fails the spawn with the program's reason, after its
process group is killed: the command never runs unconfined.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any

from wuu.generated.plain import Invalid, SandboxProcessProbe

from .environment import MINIMAL_PATH
from .spawner import SPAWNED, SandboxSpawner, abandon

CONFINED = b"confined\n"
PROBE_TIMEOUT_S = 30.0
REPORT_TIMEOUT_S = 30.0
"""How long a program may take to report on one command before the spawn fails."""
_REASON_MAX = 4096


class ExtensionUnavailable(Exception):
    """The extension cannot confine this mode; the message says why."""


class ExtensionSandbox:
    """A mode's commands confined by the extension `program` (probed here: ExtensionUnavailable if it
    cannot), writing only beneath `writable`."""

    def __init__(self, program: str, mode: str, writable: tuple[str, ...], *, no_tcp: bool = False) -> None:
        self.name = probe(program, mode, no_tcp=no_tcp)
        self._spawner = ExtensionSpawner(program, mode, writable, no_tcp=no_tcp)

    @property
    def spawner(self) -> ExtensionSpawner:
        return self._spawner

    def close(self) -> None:
        """Later spawns fail instead of running unconfined."""
        self._spawner.close()


def probe(program: str, mode: str, *, no_tcp: bool = False) -> str:
    """Run `program probe`; its name when it enforces `mode` (and `no_tcp` when asked), else
    ExtensionUnavailable saying why."""
    try:
        answered = subprocess.run(
            [program, "probe"], capture_output=True, timeout=PROBE_TIMEOUT_S, env={"PATH": MINIMAL_PATH}
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ExtensionUnavailable(f"the sandbox extension {program} cannot run: {error}") from None
    if answered.returncode != 0:
        said = answered.stderr.decode(errors="replace").strip()
        raise ExtensionUnavailable(f"the sandbox extension {program} cannot confine commands here: {said}")
    try:
        report = SandboxProcessProbe.model_validate_json(answered.stdout.strip())
    except Invalid as error:
        raise ExtensionUnavailable(
            f"the sandbox extension {program} answered its probe with no SandboxProcessProbe: {error}"
        ) from None
    if mode not in report.modes:
        raise ExtensionUnavailable(f"the sandbox extension {report.name} does not enforce {mode}")
    if no_tcp and "no_tcp" not in (report.network or ()):
        raise ExtensionUnavailable(
            f"the sandbox extension {report.name} does not enforce command_network no_tcp"
        )
    return report.name


class ExtensionSpawner(SandboxSpawner):
    """Starts each child as `program run` of its policy, and returns it once the program says it is confined."""

    def __init__(self, program: str, mode: str, writable: tuple[str, ...], *, no_tcp: bool = False) -> None:
        super().__init__()
        self._program = program
        self._mode = mode
        self._writable = writable
        self._no_tcp = no_tcp

    async def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        self._refuse_when_closed()
        report, status = os.pipe()
        wrapped = [self._program, "run", "--mode", self._mode]
        for directory in self._writable:
            wrapped += ["--writable", directory]
        if self._no_tcp:
            wrapped += ["--network", "no_tcp"]
        wrapped += ["--status-fd", str(status), "--", *argv]
        passed = (*options.pop("pass_fds", ()), status)
        try:
            child = SPAWNED.popen(wrapped, {**options, "pass_fds": passed})
        except BaseException:
            os.close(report)
            raise
        finally:
            os.close(status)
        reading = asyncio.ensure_future(asyncio.to_thread(_read_report, report))
        try:
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that comes as the report does, and the
            # command would run on for a request that was cancelled.
            done, _ = await asyncio.wait((reading,), timeout=REPORT_TIMEOUT_S)
            if not done:
                raise subprocess.SubprocessError(
                    f"the sandbox extension said nothing within {REPORT_TIMEOUT_S:g} s"
                )
            said = reading.result()
        except BaseException:
            await abandon(child)  # which also ends the report, and so the thread reading it
            raise
        if said != CONFINED:
            await abandon(child)
            reason = said.decode(errors="replace").strip() or f"it ended with status {child.wait()}"
            raise subprocess.SubprocessError(f"the sandbox extension did not confine the command: {reason}")
        return child


def _read_report(fd: int) -> bytes:
    """What the program wrote on its status descriptor until it closed it (closes `fd`)."""
    with os.fdopen(fd, "rb") as report:
        return report.read(_REASON_MAX)
