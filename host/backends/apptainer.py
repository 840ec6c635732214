"""The `apptainer` and `singularity` backends: the worker runs in a container of the profile's image, started
by the installed runtime as a child process of the adapter.

The profiles are ApptainerExecutionProfile and SingularityExecutionProfile
(spec/schema/config/execution_environments.schema.json); the backend's name is the runtime's program
(`apptainer`, or SingularityCE's `singularity`), looked up on PATH. The command:

    RUNTIME exec --containall --pwd WORKSPACE --bind SOURCE:WORKSPACE[:ro] [--cpus N]
        [--memory NM --memory-swap NM] [--net --network none|bridge] IMAGE WORKER...

`--containall` gives the container its own PID and IPC namespaces, an empty /tmp and home, and a clean
environment: the worker sees only what the binding forwards. `memory_mb` allows no swap on top. The
runtime's configuration must permit the resource and network options (cgroups v2 for `cpus` and
`memory_mb`; root or `allow net networks` for a network namespace). When it does not, the runtime refuses
to start with its own message on the adapter's stderr, and the connection ends before `initialize`:
never a container without the option. `network: host` is the runtime's default and adds nothing.

The workspace is `host_workspace` when the profile mounts one (read-only with `mount_read_only`; it is the
user's directory, never created or removed here). Otherwise it is a directory of this machine,
`$WUU_HOME/environments/<backend>/<profile>-<hash>/<conversation>` (WUU_HOME defaults to ~/.wuu; the
conversation as `conversations.py` names it, and one directory for all the conversations of a `shared`
profile). Without `persistent` it is removed once the connection has closed cleanly, a shared one only by
the last of its connections (each holds a shared lock on `<directory>.users` while it runs); a failed
worker cleanup leaves it for inspection. With `persistent` it stays. Missing retained state is an error:
when this connection had to create the directory, the worker is told so (`--new-environment`) and refuses
a reconnect's binding (`require_existing_workspace`) with `workspace_missing`, and the directory made for
it is removed again. A profile's own `worker` command gets no such option: it is run as given.

The worker is the native stdio worker of the image (`python3 -m wuu.worker`), one per connection: the
runtime keeps no worker across connections, so a reconnect finds the files, not the processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from wuu.generated.plain import ApptainerExecutionProfile, SingularityExecutionProfile
from wuu.worker.errors import CleanupFailed

from ..errors import BackendUnavailable
from ..profiles import Profile
from .base import ChildProcess
from .conversations import conversation_id, environment_directory, shared_environment

ContainerProfile = ApptainerExecutionProfile | SingularityExecutionProfile
IMAGE_WORKER = ("python3", "-m", "wuu.worker")
"""The worker command of the image: its own installation's native worker."""


class ApptainerEnvironment(ChildProcess):
    """A container of the profile's image, run by the installed runtime, with the worker as its command."""

    def __init__(self, profile: Profile[ContainerProfile], environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        settings = self.settings = profile.settings
        self.profile = profile
        self.runtime = profile.backend
        program = shutil.which(self.runtime, path=environ.get("PATH"))
        if program is None:
            raise BackendUnavailable(
                f"profile {profile.name!r}: the {self.runtime} runtime is not installed here "
                f"(no `{self.runtime}` on PATH)"
            )
        self.program = program
        self.directory: Path | None = None
        if not settings.host_workspace:
            identity = shared_environment(profile) if settings.shared else conversation_id(profile, environ)
            self.directory = environment_directory(profile, identity, environ)
        self.new = False  # whether this connection made the workspace directory (known at `start`)
        self._users: int | None = None  # the shared lock of a shared directory, held while connected
        super().__init__(self.command(program))

    def worker_command(self) -> list[str]:
        """The profile's `worker`, else the image's native worker (told when its workspace is new)."""
        if self.settings.worker:
            return list(self.settings.worker)
        return [*IMAGE_WORKER, "--new-environment"] if self.new else list(IMAGE_WORKER)

    def command(self, program: str) -> list[str]:
        """The runtime's command line that runs the worker in the container."""
        settings = self.settings
        source = settings.host_workspace or str(self.directory)
        bind = f"{source}:{settings.workspace}" + (":ro" if settings.mount_read_only else "")
        argv = [program, "exec", "--containall", "--pwd", settings.workspace, "--bind", bind]
        if settings.cpus is not None:
            argv += ["--cpus", f"{settings.cpus:g}"]
        if settings.memory_mb is not None:
            argv += ["--memory", f"{settings.memory_mb}M", "--memory-swap", f"{settings.memory_mb}M"]
        if settings.network.value != "host":
            argv += ["--net", "--network", settings.network.value]
        return [*argv, settings.image, *self.worker_command()]

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        directory = self.directory
        if directory is not None:
            directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if (
                self.settings.shared
            ):  # first: the last connection of a shared directory removes it under LOCK_EX
                self._users = os.open(self._users_path(), os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self._users, fcntl.LOCK_SH)
            self.new = not directory.exists()
            directory.mkdir(mode=0o700, exist_ok=True)
            self._argv = tuple(self.command(self.program))
        return await super().start()

    async def close(self, budget: float) -> None:
        try:
            await super().close(budget)
        except CleanupFailed:
            self._leave(remove=False)
            raise
        refused = self.new and self.reconnect  # made for a reconnect that found nothing: not retained
        self._leave(remove=not self.settings.persistent or refused)

    def _users_path(self) -> Path:
        assert self.directory is not None
        return self.directory.with_name(f"{self.directory.name}.users")

    def _leave(self, remove: bool) -> None:
        """Let go of a shared directory, and remove the directory if asked (a shared one only if no other
        connection holds it)."""
        users, self._users = self._users, None
        if users is not None:
            os.close(users)
        if self.directory is None or not remove:
            return
        if not self.settings.shared:
            shutil.rmtree(self.directory, ignore_errors=True)
            return
        with contextlib.suppress(FileNotFoundError), open(self._users_path(), "rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another connection still uses it
            shutil.rmtree(self.directory, ignore_errors=True)
