"""The OS sandbox for commands in the confined permission modes, on Linux Landlock.

spec/schema/permissions/permission_modes.schema.json and spec/schema/worker/execute.schema.json state the rules.

`read_only` commands may write no file anywhere; `standard` commands may write only beneath the execution root
and a private temporary directory. Both may read and execute everything, and both may write the few character
devices that ordinary commands open for writing. Where Landlock has ABI 6, a command also may not signal, nor
connect to an abstract Unix socket of, a process outside its own domain. The ruleset is built once per policy
in the worker; each command enters it in its own process before it execs (`confine.HelperSpawner`, or
`spawner.ConfinedSpawner` where the helper was not built), so that every command has a domain of its own,
which holds its descendants and no thread of the worker:

    sandbox = Sandbox(SandboxPolicy(PermissionMode.STANDARD, (root, private_tmp)))
    child = await sandbox.spawner.popen(argv, cwd=root)

If the ruleset cannot be built or enforced, `Sandbox` raises SandboxUnavailable; a child that fails to enter it
makes its spawn raise `subprocess.SubprocessError`, and runs nothing. `open_sandbox` falls back to a configured
sandbox.process@1 extension (sandbox_extension.py) where Landlock cannot run, never to an unconfined run.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wuu.generated.plain import PermissionMode
from wuu.worker.native import confine, landlock
from wuu.worker.native.confine import HelperSpawner
from wuu.worker.native.landlock import AccessFs
from wuu.worker.native.sandbox_extension import ExtensionSandbox, ExtensionUnavailable
from wuu.worker.native.spawner import ConfinedSpawner, SandboxSpawner

# ABI 3 is the first that restricts truncation; below it a confined command could still empty any file it can
# open for reading.
MIN_ABI = 3

# Character devices that commands routinely open for writing (`> /dev/null`, `dd of=/dev/zero`, prompts on
# /dev/tty). /dev/pts/* is left out on purpose: a pseudo-terminal a command inherits needs no rule (Landlock
# checks at open), while opening another one would let a command type into the user's other terminals.
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")

_READ_EXECUTE = AccessFs.READ_FILE | AccessFs.READ_DIR | AccessFs.EXECUTE
# No IOCTL_DEV: device ioctls (TIOCSTI on /dev/tty, say) are not something a confined command needs. TRUNCATE
# because the shell opens `> /dev/null` with O_TRUNC.
_DEVICE_WRITE = AccessFs.READ_FILE | AccessFs.WRITE_FILE | AccessFs.TRUNCATE


BACKEND_VARIABLE = "WUU_SANDBOX_BACKEND"
"""`auto` (the default: Landlock where it runs, else the extension) or `extension` (always the extension)."""
PROGRAM_VARIABLE = "WUU_SANDBOX_PROCESS"
"""The absolute path of the sandbox.process@1 extension program (spec/schema/config/sandbox_process.schema.json)."""


class SandboxUnavailable(Exception):
    """No working OS sandbox for this policy; the worker answers `sandbox_unavailable` and runs nothing."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What a confined command may write.

    `mode` is `standard` or `read_only`; `unconfined` never gets a sandbox. `writable` holds absolute directory
    paths: the root and the command's private temporary directory in `standard`, nothing in `read_only`.
    """

    mode: PermissionMode
    writable: tuple[Path, ...]
    no_tcp: bool = False
    """Whether commands may neither bind nor connect TCP sockets (the binding's `command_network`)."""

    def __post_init__(self) -> None:
        if self.mode is PermissionMode.UNCONFINED:
            raise ValueError("unconfined commands run without a sandbox")
        if self.mode is PermissionMode.READ_ONLY and self.writable:
            raise ValueError("a read_only policy has no writable paths")
        relative = [str(path) for path in self.writable if not path.is_absolute()]
        if relative:
            raise ValueError(f"writable paths must be absolute: {', '.join(relative)}")


def sandbox_abi() -> int:
    """The running kernel's Landlock ABI version, 0 if it has none."""
    return landlock.abi_version()


class Sandbox:
    """Prepared once per policy (the ruleset, checked once); cheap per command."""

    def __init__(self, policy: SandboxPolicy) -> None:
        """Build the Landlock ruleset for `policy`; raises SandboxUnavailable when it cannot be enforced."""
        abi = sandbox_abi()
        if abi == 0:
            raise SandboxUnavailable(f"Landlock is unavailable: {landlock.unavailable_reason()}")
        if abi < MIN_ABI:
            raise SandboxUnavailable(
                f"Landlock ABI {abi} is too old: confined commands need ABI {MIN_ABI} or later"
            )
        rules: dict[str | os.PathLike[str], AccessFs] = {"/": _READ_EXECUTE}
        for device in WRITABLE_DEVICES:
            # A container may lack some of them; only real character devices get write access.
            try:
                if stat.S_ISCHR(os.stat(device).st_mode):
                    rules[device] = _DEVICE_WRITE
            except FileNotFoundError:
                continue
        for path in policy.writable:
            rules[path] = landlock.ALL_ACCESS_FS
        try:
            self._fd = landlock.create_ruleset(rules, abi, no_tcp=policy.no_tcp)
        except OSError as error:
            raise SandboxUnavailable(f"the Landlock ruleset cannot be built: {error}") from error
        try:
            _probe(self._fd)
        except OSError as error:
            os.close(self._fd)
            raise SandboxUnavailable(f"the Landlock ruleset cannot be enforced: {error}") from error
        self._spawner: SandboxSpawner | None = None

    @property
    def spawner(self) -> SandboxSpawner:
        """The spawner whose children run confined by this policy, each in a domain of its own: through the
        compiled helper where the installation built it, else by a fork of the worker.

        No command sees the ruleset fd: it is close-on-exec, and the helper closes its copy before it execs.
        """
        if self._spawner is None:
            fd = self._fd
            found = confine.helper()
            self._spawner = (
                HelperSpawner(found, fd) if found else ConfinedSpawner(lambda: landlock.restrict_self(fd))
            )
            if fd < 0:  # closed before its first spawn
                self._spawner.close()
        return self._spawner

    def close(self) -> None:
        """Close the ruleset fd and stop the spawner; later spawns fail instead of running unconfined."""
        if self._spawner is not None:
            self._spawner.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _probe(ruleset_fd: int) -> None:
    """Enforce the ruleset on a thread that then ends, so that a kernel (or a seccomp filter) that refuses
    it is told here, with its reason, rather than by every spawn; raises its OSError."""
    failure: list[OSError] = []

    def enforce() -> None:
        try:
            landlock.restrict_self(ruleset_fd)
        except OSError as error:
            failure.append(error)

    thread = threading.Thread(target=enforce, name="wuu-landlock-probe")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def open_sandbox(policy: SandboxPolicy, environ: Mapping[str, str]) -> Sandbox | ExtensionSandbox:
    """The sandbox of `policy`: Landlock, or the configured sandbox.process@1 extension where Landlock cannot
    run or `WUU_SANDBOX_BACKEND` is `extension`; SandboxUnavailable saying why when neither can."""
    choice = environ.get(BACKEND_VARIABLE) or "auto"
    if choice not in ("auto", "extension"):
        raise SandboxUnavailable(f"{BACKEND_VARIABLE}: {choice!r} is neither auto nor extension")
    program = environ.get(PROGRAM_VARIABLE, "")
    builtin = ""
    if choice == "auto":
        try:
            return Sandbox(policy)
        except SandboxUnavailable as error:
            if not program:
                raise
            builtin = f"{error}; "
    if not os.path.isabs(program):
        raise SandboxUnavailable(
            f"{builtin}{PROGRAM_VARIABLE}: {program!r} is not the absolute path of a program"
        )
    try:
        return ExtensionSandbox(
            program, policy.mode.value, tuple(str(path) for path in policy.writable), no_tcp=policy.no_tcp
        )
    except ExtensionUnavailable as error:
        raise SandboxUnavailable(f"{builtin}{error}") from None
