"""Starting a `local` worker while the adapter validates its configuration.

An adapter's own start-up (its interpreter, asyncio, the relay) takes about as long as the native worker
takes to start. For a profile whose backend is `local`, the adapter therefore starts the worker first, from
a plain reading of the file (only the standard library), and validates afterwards: the two start-ups
overlap. The worker gets no frame until the profile is valid and selects exactly the command that was
started; otherwise it gets EOF, before it has been initialized, so it has done nothing, and the command the
valid profile selects is started as usual. A `command` adapter may act as soon as it starts, so it is
started only once the profile is valid and its `forward_env` is set (`start_validated`), when nothing
could stop the connection any more, but still before the adapter imports asyncio and the relay. Remote
environments are started by their backends.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from os import PathLike

    from .profiles import Profile

INSTALLED_WORKER = (sys.executable, "-m", "wuu.worker")
"""The native worker of this installation: a profile's `worker` when it is omitted, where the worker
runs with this installation's paths (locally, or on a server installed alike)."""

LOCAL = "local"


class Prestarted:
    """A worker started before its profile was validated; `claim` it with the argv the profile selects.

    A plain class, as this module imports nothing it need not before the worker is spawned (dataclasses
    alone, with the inspect module it loads, is a tenth of the worker's own start-up).
    """

    def __init__(self, argv: tuple[str, ...], process: subprocess.Popen[bytes] | None) -> None:
        self.argv = argv
        self.process = process

    def claim(self, argv: tuple[str, ...]) -> subprocess.Popen[bytes] | None:
        """The process if it runs `argv` (then it is the caller's), else None (then it is discarded)."""
        process, self.process = self.process, None
        if process is not None and argv != self.argv:
            discard(process)
            return None
        return process

    def discard(self) -> None:
        """End the worker unclaimed: EOF, then wait for it (it has not been initialized)."""
        process, self.process = self.process, None
        if process is not None:
            discard(process)


def discard(process: subprocess.Popen[bytes]) -> None:
    """Close the worker's stdin and reap it; it exits at EOF with nothing to clean up."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def local_worker_argv(config: str | PathLike[str], name: str | None) -> tuple[str, ...] | None:
    """The command of the selected profile when it is a `local` one, read without validating; else None."""
    try:
        with open(config, encoding="utf-8") as file:
            document = json.load(file)
        environments = document.get("execution_environments", {})
        chosen = name if name is not None else environments.get("default", LOCAL)
        profile = {"backend": LOCAL} if chosen == LOCAL else environments.get("profiles", {}).get(chosen)
        if not isinstance(profile, dict) or profile.get("backend") != LOCAL:
            return None
        worker = profile.get("worker", INSTALLED_WORKER)
    except (OSError, ValueError, AttributeError):
        return None  # validation says what is wrong
    if not isinstance(worker, list | tuple) or not worker or not all(isinstance(arg, str) for arg in worker):
        return None
    return tuple(worker)


def spawn(argv: tuple[str, ...], env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a worker with pipes for its stdio, in a process group of its own (see `ChildProcess`)."""
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, process_group=0)


def prestart(config: str | PathLike[str], name: str | None) -> Prestarted | None:
    """Start the selected `local` profile's worker now, or None (another backend, or an unreadable file)."""
    argv = local_worker_argv(config, name)
    if argv is None:
        return None
    try:
        return Prestarted(argv, spawn(argv))
    except OSError:
        return None  # started again after validation, which then reports the failure


def start_validated(profile: Profile[Any], environ: Mapping[str, str]) -> Prestarted | None:
    """Start a valid `command` profile's adapter now, or None (another backend)."""
    if profile.backend != "command":
        return None
    profile.forwarded_environment(environ)  # a missing variable stops the connection before anything starts
    argv = tuple(profile.settings.command)
    try:
        return Prestarted(argv, spawn(argv))
    except OSError:
        return None  # started again by the backend, which then reports the failure
