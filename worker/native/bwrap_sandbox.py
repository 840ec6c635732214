"""`wuu-bwrap-sandbox`: a sandbox.process@1 extension on bubblewrap (spec/schema/config/sandbox_process.schema.json),
for machines where the worker's built-in Landlock backend cannot run.

A command runs in a mount namespace of its own where the whole file system is read-only (`--ro-bind / /`)
but the `--writable` directories, with a private /dev (null, zero, full, random, urandom, tty, and a /dev/shm
that nothing outside sees). Processes, signals, the network and the environment are not isolated, as under
Landlock below ABI 6.

The `confined` report comes from inside the sandbox: bwrap starts this file there again (`inner`), which
writes it on a pipe to this program, puts its standard error back on the command's output, and runs the
command, reporting on the same pipe whether a signal ended it (this program then ends by that signal, so
that the worker sees the command's own end). This program relays `confined` to the worker's status
descriptor; when none comes (bwrap failed: no user namespaces, a missing directory), it relays bwrap's own
error instead, and the command has not run. Both stay parents (of bwrap, of the command), with the signals
that stop commands caught and dropped: the command's process group gets them too, and the command its
grace. The descriptors the worker passed (a `run_code` interpreter's message pipe) reach the command.

Only the standard library, and nothing of the worker: it starts twice for every confined command, the
inner one as a plain script (`python -I -S`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

PROTOCOL = "sandbox.process@1"
NAME = "wuu-bwrap-sandbox 1"
MODES = ("standard", "read_only")
_REASON_MAX = 4096
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def bwrap_argv(bwrap: str, mode: str, writable: Sequence[str], inside: Sequence[str]) -> list[str]:
    """The bwrap command line that runs `inside` confined by `mode`."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev"]
    if mode == "standard":
        for directory in writable:
            argv += ["--bind", directory, directory]
    return [*argv, "--", *inside]


def inner_argv(report: int, stderr: int, command: Sequence[str]) -> list[str]:
    """This file run as `inner` inside the sandbox: it reports on `report`, and `stderr` becomes its stderr."""
    here = os.path.abspath(__file__)
    return [
        sys.executable,
        "-I",
        "-S",
        here,
        "inner",
        "--report-fd",
        str(report),
        "--stderr-fd",
        str(stderr),
        "--",
        *command,
    ]


def probe() -> int:
    """Print the SandboxProcessProbe when bwrap can confine a command here; else say why, exit 1."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        print("wuu-bwrap-sandbox: bwrap (Debian's bubblewrap) is not installed", file=sys.stderr)
        return 1
    try:
        trial = subprocess.run(bwrap_argv(bwrap, "read_only", (), ["true"]), capture_output=True, timeout=30)
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        print(f"wuu-bwrap-sandbox: bwrap cannot run: {error}", file=sys.stderr)
        return 1
    if trial.returncode != 0:
        print(
            f"wuu-bwrap-sandbox: bwrap cannot confine here: {trial.stderr.decode(errors='replace')}",
            file=sys.stderr,
        )
        return 1
    report = {"protocol": PROTOCOL, "name": f"{NAME} ({version.strip()})", "modes": list(MODES)}
    print(json.dumps(report))
    return 0


def run(mode: str, writable: Sequence[str], status_fd: int, command: Sequence[str]) -> int:
    """Run `command` confined: its exit status, or this process ends by the signal that ended it; 1 when it
    never ran (the status descriptor then holds why)."""
    status = os.fdopen(status_fd, "wb", buffering=0)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        status.write(b"bwrap (Debian's bubblewrap) is not installed")
        return 1
    inherited = _open_descriptors() - {status_fd}
    report_r, report_w = os.pipe()
    reason_r, reason_w = os.pipe()
    output = os.dup(2)
    _drop_stop_signals()
    try:
        child = subprocess.Popen(
            bwrap_argv(bwrap, mode, writable, inner_argv(report_w, output, command)),
            stderr=reason_w,
            pass_fds=(report_w, output, *inherited),
        )
    except OSError as error:
        status.write(f"bwrap cannot start: {error}".encode())
        return 1
    finally:
        for fd in (report_w, reason_w, output):
            os.close(fd)
    report = os.fdopen(report_r, "rb")
    if report.readline() != b"confined\n":
        child.wait()
        with os.fdopen(reason_r, "rb") as reason:
            status.write(reason.read(_REASON_MAX).strip() or f"bwrap exited with {child.returncode}".encode())
        return 1
    status.write(b"confined\n")
    status.close()
    # bwrap writes nothing more of its own once the command runs; whatever it does goes to the output.
    threading.Thread(target=_copy, args=(reason_r, 2), daemon=True).start()
    code = child.wait()
    ended = report.read().split()
    if ended[:1] == [b"signal"]:
        _die_by(int(ended[1]))
    return code


def inner(report: int, stderr: int, command: Sequence[str]) -> int:
    """Inside the sandbox: report `confined`, take the command's stderr back, run the command with every
    other descriptor this process got, and report `signal N` when a signal ended it."""
    _drop_stop_signals()
    os.write(report, b"confined\n")
    os.set_inheritable(report, False)
    os.dup2(stderr, 2)
    os.close(stderr)
    try:
        child = subprocess.Popen(command, close_fds=False)
    except OSError as error:
        print(f"{command[0]}: {error.strerror}", file=sys.stderr)
        # As a shell answers: found but not executable, or not found at all.
        return 126 if isinstance(error, PermissionError) else 127
    code = child.wait()
    if code < 0:
        os.write(report, f"signal {-code}\n".encode())
        return 128 - code
    return code


def _drop_stop_signals() -> None:
    """Catch and drop the signals that stop commands: the command gets them too, in the same process group.
    A handler, not SIG_IGN, so that what this process starts has the default disposition again."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: None)


def _die_by(signum: int) -> None:
    """End this process by `signum`, as the command was (exit 128 + signum where it cannot)."""
    if signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    sys.exit(128 + signum)


def _open_descriptors() -> set[int]:
    """The descriptors above stderr open in this process (what the worker passed)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.fstat(fd)
            except OSError:  # the listing's own descriptor, closed since
                continue
            found.add(fd)
    return found


def _copy(source: int, target: int) -> None:
    while chunk := os.read(source, 65536):
        os.write(target, chunk)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wuu-bwrap-sandbox", description="a sandbox.process@1 extension")
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("probe", help="say whether bwrap can confine commands here")
    running = steps.add_parser("run", help="run a command confined")
    running.add_argument("--mode", choices=MODES, required=True)
    running.add_argument("--writable", action="append", default=[])
    running.add_argument("--status-fd", type=int, required=True)
    running.add_argument("command", nargs="+")
    inside = steps.add_parser("inner", help="(inside the sandbox) report, then become the command")
    inside.add_argument("--report-fd", type=int, required=True)
    inside.add_argument("--stderr-fd", type=int, required=True)
    inside.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    if args.step == "probe":
        return probe()
    if args.step == "inner":
        return inner(args.report_fd, args.stderr_fd, args.command)
    return run(args.mode, args.writable, args.status_fd, args.command)


def entry() -> None:
    """The `wuu-bwrap-sandbox` command."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
