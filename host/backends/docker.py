"""The `docker` backend: the worker runs in a container, reached through a Docker exec.

The profile is a DockerExecutionProfile (spec/schema/config/execution_environments.schema.json). The engine
is reached through `docker_engine` (the Engine API over its socket), so no SDK is imported.

The container is created from the profile's `image` with its limits (`cpus`, `memory_mb` with no swap on
top, a pid limit), its `network` (`none`, `bridge`, `host`), its `user` and the optional `host_workspace`
bind-mounted at `workspace` (read-only with `mount_read_only`). A sleep-forever command keeps it
running; the worker is a `docker exec` whose stdio is one hijacked two-way socket: stdin is written to
it, and stdout and stderr come back multiplexed (an 8-byte header per chunk: stream, 0, 0, 0, size).

`persistent: true` names the container after the profile, its workspace and the conversation
(`conversations.py`: the host's `WUU_CONVERSATION`, else one id per profile), so a later connection of the
conversation finds it and no other conversation does, and runs the persistent native worker
(`python3 -m wuu.worker attach`): a reconnect finds the worker's processes and their retained output. The
container stays at disconnect; the worker inside exits after `lifetime_seconds` without a connection.
Missing retained state is an error, never silently replaced: a container this connection had to create
holds nothing retained, so its worker is told so (`--new-environment`) and refuses a binding with
`require_existing_workspace` (a reconnect) with `workspace_missing`. The container made for that refused
reconnect is removed at shutdown, so a later reconnect finds no container and is refused too.
Without retention the container has a random name, the worker is the plain stdio worker (its exit status
is its cleanup's), and the container is removed at shutdown.

`shared: true`: the profile's conversations use one container (named after the profile and its workspace),
so one filesystem, and each runs a worker of its own in it, so their tool state and processes stay apart
(with `persistent`, each conversation's persistent worker has its own socket). A shared container is never
removed by one conversation's shutdown. Without `persistent` its main process is `SHARED_WATCHER`, and each
worker runs as a user of it (`JOIN`, a shared lock held for the worker's life): once the last worker has
ended, SIGKILLed adapters' included (their worker reads EOF), the container ends and Docker removes it. A
connection that finds it ending waits for its removal and makes a new one. The image needs `flock`.

The watchdog of a container without retention: its main process is a watcher (`WATCHER`) that reads its
stdin, which the adapter holds through an attach made before the container starts (`StdinOnce`). When
the adapter ends, however it ends (SIGKILL included), the attach closes, the watcher reads EOF and exits,
which ends every process of the container, and Docker removes it (`AutoRemove`): nothing is left running.
A failed shutdown that keeps the container for inspection tells the watcher so (`keep`) before it lets go.

Shutdown: EOF on the exec's stdin (a half-close: replies still come back), then the exec must end
within the budget (`shutdown_timeout_ms`, ProfileShutdownTimeoutMs in the schema). A worker that exits
non-zero, or does not end within the budget (its connection is then cut), fails the shutdown with
CleanupFailed, and its container is kept for an explicit recovery: a failed cleanup never removes the
workspace along with the evidence of what went wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from wuu.generated.plain import DockerExecutionProfile
from wuu.worker.errors import CleanupFailed
from wuu.worker.framing import reader_limit

from ..errors import DockerUnavailable
from ..profiles import Profile
from .base import Environment
from .conversations import conversation_id, label, profile_conversation, shared_environment
from .docker_engine import (
    FRAME,
    STDERR,
    STDOUT,
    ApiError,
    Engine,
    EngineError,
    NotFound,
    Unsupported,
    demultiplex,
)

LABEL_PROFILE = "wuu.profile"
LABEL_PERSISTENT = "wuu.persistent"
LABEL_CONVERSATION = "wuu.conversation"
LABEL_SHARED = "wuu.shared"
KEEP_RUNNING = ("sleep", "infinity")
# The main process of a container without retention: it ends with the adapter's attach, unless told to stay.
WATCHER = ("/bin/sh", "-c", 'read -r word; [ "$word" = keep ] && exec sleep infinity')
KEEP = b"keep\n"
# The persistent worker's socket: beside the workspace, never in it (a read-only mount could not hold it).
SOCKET_DIR = "/run/wuu"
SOCKET_PATH = f"{SOCKET_DIR}/.wuu-worker.sock"
# A shared container without retention: its workers hold a shared lock on USERS while they run; GATE orders
# a worker's joining against the container's ending, which ENDED marks.
USERS, GATE, JOINED, ENDED = (f"{SOCKET_DIR}/shared.{name}" for name in ("users", "gate", "joined", "ended"))
ENDED_STATES = ("exited", "dead", "removing")
"""The states of a shared container without retention whose main process has ended: Docker removes it. One
that another connection has only just created (`created`) is started, not waited for."""
ENDING_WAIT_S = 30
NAME_WAIT_S = 5.0
JOIN_REFUSED = 75
"""The exit status of a worker's join to a shared container that is ending."""
JOIN = (
    "/bin/sh",
    "-c",
    f"exec 8>>{GATE} && flock 8 || exit\n"
    f"if [ -e {ENDED} ]; then echo 'wuu docker: the shared container is ending; connect again' >&2; "
    f"exit {JOIN_REFUSED}; fi\n"
    f"exec 9>>{USERS} && flock -s 9 && : > {JOINED} || exit\n"
    "exec 8>&-\n"
    'exec "$@"',
    "wuu-join",
)
"""Run the worker command (its arguments) as a user of the shared container, holding the users lock (fd 9)."""
SHARED_WATCHER = (
    "/bin/sh",
    "-c",
    f"""i=0
until [ -e {JOINED} ]; do i=$((i + 1)); [ "$i" -le 600 ] || exit 0; sleep 0.1; done
while :; do
  flock -x {USERS} true
  exec 8>>{GATE} && flock 8
  if flock -n -x {USERS} true; then : > {ENDED}; exit 0; fi
  exec 8>&-
done""",
)
"""The main process of a shared container without retention: it ends once no worker is left (or none came
within a minute), after marking the container as ending under the gate, so that no worker joins it late."""
# A fork bomb in the workspace must not take the machine down; far above what a worker's commands need.
PIDS_LIMIT = 4096
EXEC_POLL_S = 0.02
T = TypeVar("T")


def container_name(profile: Profile[DockerExecutionProfile], conversation: str | None) -> str:
    """`wuu-<profile>-<id>`: when shared, stable per profile and workspace; when retained, stable per profile,
    workspace and conversation (a reconnect of the conversation finds it, and no other conversation does);
    else random."""
    settings = profile.settings
    name = label(profile)
    if settings.shared:
        parts = [profile.name, settings.workspace, settings.host_workspace or "", shared_environment(profile)]
        suffix = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    elif settings.persistent:
        parts = [profile.name, settings.workspace, settings.host_workspace or ""]
        # The profile's own conversation keeps the name its container had before conversations were told
        # apart, so that the container a persistent profile already has is still found.
        if conversation is not None and conversation != profile_conversation(profile):
            parts.append(conversation)
        suffix = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    else:
        suffix = secrets.token_hex(8)
    return f"wuu-{name}-{suffix}"


def default_user(settings: DockerExecutionProfile) -> str | None:
    """The profile's `user`; with a host mount on Linux the host user's uid:gid (ownership); else the image's."""
    if settings.user:
        return settings.user
    if settings.host_workspace and sys.platform == "linux":
        return f"{os.getuid()}:{os.getgid()}"
    return None


class _ExecProtocol(asyncio.StreamReaderProtocol):
    """The exec's socket: demultiplexes its stdout into the reader and its stderr onto ours."""

    def __init__(self, stdout: asyncio.StreamReader, pending: bytes) -> None:
        super().__init__(stdout)
        self._buffer = bytearray(pending)
        self.ended = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._buffer:
            self.data_received(b"")  # what arrived with the answer to the exec's start

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= FRAME.size:
            stream, size = FRAME.unpack_from(buffer, start)
            end = start + FRAME.size + size
            if len(buffer) < end:
                break
            payload = bytes(buffer[start + FRAME.size : end])
            start = end
            if stream == STDOUT:
                super().data_received(payload)
            elif stream == STDERR:
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.buffer.write(payload)
                    sys.stderr.buffer.flush()
        del buffer[:start]

    def eof_received(self) -> bool:
        self.ended.set()
        return bool(super().eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended.set()
        super().connection_lost(exc)


class _StdinTransport(asyncio.WriteTransport):
    """The write side of the exec's socket: closing it half-closes the socket, so the worker sees EOF on
    its stdin while its replies still come back."""

    def __init__(self, inner: asyncio.WriteTransport) -> None:
        super().__init__()
        self._inner = inner
        self._closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._inner.write(data)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if not self._closed:
            self._closed = True
            if not self._inner.is_closing():
                with contextlib.suppress(OSError):  # the worker's side may be gone already
                    self._inner.write_eof()

    def close(self) -> None:
        self.write_eof()

    def is_closing(self) -> bool:
        return self._closed or self._inner.is_closing()

    def abort(self) -> None:
        self._closed = True
        self._inner.abort()

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._inner.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._inner.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)


class DockerEnvironment(Environment):
    """A container from the profile's image, with the worker started in it through an exec."""

    def __init__(
        self, profile: Profile[DockerExecutionProfile], environ: Mapping[str, str] | None = None
    ) -> None:
        self.profile = profile
        self.settings = profile.settings
        self.persistent = self.settings.persistent
        self.shared = self.settings.shared
        # Only a retained worker is kept under its conversation: another one goes with its adapter.
        self.conversation = (
            conversation_id(profile, os.environ if environ is None else environ) if self.persistent else None
        )
        self.name = container_name(profile, self.conversation)
        # In a shared container each conversation's persistent worker has a socket of its own.
        self.socket = f"{SOCKET_DIR}/{self.conversation}.sock" if self.shared else SOCKET_PATH
        self.user = default_user(self.settings)
        self.engine: Engine | None = None
        self.container: str | None = None  # its id
        self.exec_id: str | None = None
        self._created = False
        self._watch: socket.socket | None = None  # the watcher's stdin, without retention
        self._transport: asyncio.Transport | None = None
        self._stdin: _StdinTransport | None = None
        self._protocol: _ExecProtocol | None = None

    # --- the worker's command ------------------------------------------------------------------

    def worker_command(self) -> list[str]:
        """The profile's `worker`, else the persistent worker (`persistent`; told when its container is new)
        or the stdio worker; in a shared container without retention, as a user of it (JOIN)."""
        if self.settings.worker:
            command = list(self.settings.worker)
        elif self.persistent:
            lifetime = str(self.settings.lifetime_seconds)
            command = [
                "python3",
                "-m",
                "wuu.worker",
                "attach",
                "--socket",
                self.socket,
                "--lifetime-seconds",
                lifetime,
            ]
            if self._created:
                command.append("--new-environment")
        else:
            command = ["python3", "-m", "wuu.worker"]
        return [*JOIN, *command] if self.shared and not self.persistent else command

    # --- provisioning (blocking calls to the engine, run in a thread) ----------------------------

    def _connect(self) -> Engine:
        try:
            return Engine.connect(os.environ)
        except Unsupported as error:
            raise DockerUnavailable(f"profile {self.profile.name!r}: {error}") from None
        except EngineError as error:
            where = os.environ.get("DOCKER_HOST", "the default socket")
            raise DockerUnavailable(
                f"profile {self.profile.name!r}: the Docker engine at {where} is not reachable: {error}"
            ) from None

    def _create_body(self) -> dict[str, Any]:
        """The container's configuration (the engine's `POST /containers/create`)."""
        settings = self.settings
        labels = {
            LABEL_PROFILE: self.profile.name,
            LABEL_PERSISTENT: "true" if self.persistent else "false",
            LABEL_SHARED: "true" if self.shared else "false",
        }
        host: dict[str, Any] = {"NetworkMode": settings.network.value, "PidsLimit": PIDS_LIMIT}
        body: dict[str, Any] = {
            "Image": settings.image,
            "WorkingDir": settings.workspace,
            "Labels": labels,
            "StopSignal": "SIGKILL",  # pid 1 ignores SIGTERM; nothing else needs a warning
            "HostConfig": host,
        }
        if self.persistent:
            assert self.conversation is not None
            if not self.shared:
                labels[LABEL_CONVERSATION] = self.conversation
            body["Cmd"] = list(KEEP_RUNNING)
        elif self.shared:  # it ends once its last worker has, and removes itself
            body["Cmd"] = list(SHARED_WATCHER)
            host["AutoRemove"] = True
        else:  # the watchdog: the watcher's stdin is attached once (StdinOnce), and the container removes itself
            body.update(Cmd=list(WATCHER), OpenStdin=True, StdinOnce=True, AttachStdin=True)
            body.update(AttachStdout=True, AttachStderr=True)
            host["AutoRemove"] = True
        if self.user:
            body["User"] = self.user
        if settings.cpus is not None:
            host["NanoCpus"] = round(settings.cpus * 1e9)
        if settings.memory_mb is not None:
            host["Memory"] = host["MemorySwap"] = (
                settings.memory_mb << 20
            )  # equal: no swap on top of the limit
        if settings.host_workspace:
            mount = {"Target": settings.workspace, "Source": settings.host_workspace, "Type": "bind"}
            host["Mounts"] = [{**mount, "ReadOnly": settings.mount_read_only}]
        return body

    def _find(self, engine: Engine) -> dict[str, Any] | None:
        """The container that holds this connection's name (the engine's inspection of it), or None."""
        try:
            found: dict[str, Any] = engine.call("GET", engine.path("containers", self.name, "json"))
        except NotFound:
            return None
        return found

    def _find_named(self, engine: Engine) -> dict[str, Any] | None:
        """The container that holds this name, which another connection has just created: the engine
        reserves a name a moment before the container can be inspected, so it is looked for until a deadline."""
        deadline = time.monotonic() + NAME_WAIT_S
        while (found := self._find(engine)) is None and time.monotonic() < deadline:
            time.sleep(EXEC_POLL_S)
        return found

    def _wait_removed(self, engine: Engine, container: str, timeout: float) -> None:
        """Return once the container is gone (NotFound if it is already); Unreachable after `timeout`."""
        path = engine.path("containers", container, "wait", query={"condition": "removed"})
        engine.call("POST", path, timeout=timeout)

    def _provision(self, engine: Engine) -> str:
        """The running container's id: a shared or retained one when it exists (a retained one started again
        if stopped), else a new one. A shared container without retention that is ending is waited for, and
        then made anew."""
        for _ in range(3):
            container, status = self._provision_once(engine)
            if self._prepared(engine, container, status):
                return container
            try:
                self._wait_removed(engine, container, ENDING_WAIT_S)
            except NotFound:
                pass
            except EngineError:
                raise DockerUnavailable(
                    f"profile {self.profile.name!r}: the shared container {self.name} was ending and was not "
                    f"removed within {ENDING_WAIT_S:g} s"
                ) from None
            self._created = False
        raise DockerUnavailable(
            f"profile {self.profile.name!r}: the shared container {self.name} kept ending as this connection "
            "joined it; connect again"
        )

    def _provision_once(self, engine: Engine) -> tuple[str, str]:
        """The container's id and status: the one this connection may reuse, else a new one; started."""
        image = self.settings.image
        found = self.persistent or self.shared
        info = self._find(engine) if found else None
        if info is None:
            create = engine.path("containers", "create", query={"name": self.name})
            try:
                info = {
                    "Id": engine.call("POST", create, self._create_body())["Id"],
                    "State": {"Status": "created"},
                }
                self._created = True
            except NotFound:
                raise DockerUnavailable(
                    f"profile {self.profile.name!r}: the image {image!r} is not in the Docker engine "
                    "(build it with `make docker-image`; no registry is consulted)"
                ) from None
            except ApiError as error:
                info = self._find_named(engine) if found and error.status == 409 else None
                if info is None:
                    raise DockerUnavailable(
                        f"profile {self.profile.name!r}: creating the container failed: {error.explanation}"
                    ) from None
                # created meanwhile by another connection of the same profile
        container, status = str(info["Id"]), str(info["State"]["Status"])
        self.container = container
        if self.shared and not self.persistent and status in ENDED_STATES:
            return container, status  # ended, so Docker is removing it: `_prepared` says so
        if self._created and not self.persistent and not self.shared:
            self._attach_watcher(engine, container)
        if status != "running":
            try:
                engine.call("POST", engine.path("containers", container, "start"))
                status = str(
                    engine.call("GET", engine.path("containers", container, "json"))["State"]["Status"]
                )
            except ApiError as error:
                raise DockerUnavailable(
                    f"profile {self.profile.name!r}: the container {self.name} did not start: {error.explanation}"
                ) from None
            if status != "running":
                raise DockerUnavailable(
                    f"profile {self.profile.name!r}: the container {self.name} is {status}, not running"
                )
        return container, status

    def _attach_watcher(self, engine: Engine, container: str) -> None:
        """Hold the watcher's stdin: from now on the container ends when this process does."""
        attach = engine.path("containers", container, "attach", query={"stdin": "1", "stream": "1"})
        try:
            self._watch, _ = engine.upgrade("POST", attach)
        except ApiError as error:
            raise DockerUnavailable(
                f"profile {self.profile.name!r}: attaching to the container {self.name} failed: {error.explanation}"
            ) from None

    def _release_watcher(self, keep: bool) -> None:
        """Let go of the watcher; with `keep` it stays (and the container with it) for an explicit recovery."""
        watch, self._watch = self._watch, None
        if watch is None:
            return
        with contextlib.suppress(OSError), watch:
            if keep:
                watch.sendall(KEEP)

    def _run(self, engine: Engine, command: list[str], user: str | None = None) -> tuple[int, bytes]:
        """Run `command` in the container (as `user`), to its end: its exit code and its output."""
        body: dict[str, Any] = {"AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": command}
        if user is not None:
            body["User"] = user
        assert self.container is not None
        exec_id = str(engine.call("POST", engine.path("containers", self.container, "exec"), body)["Id"])
        stream = engine.output("POST", engine.path("exec", exec_id, "start"), {"Detach": False, "Tty": False})
        state = engine.call("GET", engine.path("exec", exec_id, "json"))
        code = state.get("ExitCode")
        return (int(code) if code is not None else -1), b"".join(demultiplex(stream))

    def _hold(self) -> None:
        """Keep a shared container without retention for inspection: a user of it that never ends."""
        assert self.container is not None and self.engine is not None
        engine = self.engine
        body = {"Tty": False, "Cmd": ["flock", "-s", USERS, "sleep", "infinity"]}
        with contextlib.suppress(EngineError):
            exec_id = str(engine.call("POST", engine.path("containers", self.container, "exec"), body)["Id"])
            engine.call("POST", engine.path("exec", exec_id, "start"), {"Detach": True, "Tty": False})

    def _prepared(self, engine: Engine, container: str, status: str) -> bool:
        """Prepare the container (`_prepare`) where it needs it; False if it is a shared one that is ending."""
        ending = self.shared and not self.persistent
        if ending and status in ENDED_STATES:
            return False
        # Every time for a retained or shared container: another connection may have created it a moment ago.
        if self.persistent or self.shared or (self.user and not self.settings.host_workspace):
            return self._prepare(engine, ending)
        return True

    def _prepare(self, engine: Engine, ending: bool) -> bool:
        """As root: the persistent worker's socket directory, and a workspace the container user owns (Docker
        creates the working directory as root; a host mount is left as it is). With `ending`, False when the
        shared container is ending."""
        settings = self.settings
        steps = [f"mkdir -p {SOCKET_DIR}", f"chmod 0700 {SOCKET_DIR}"]
        if ending:
            steps.insert(0, f"{{ [ ! -e {ENDED} ] || exit {JOIN_REFUSED}; }}")
        if self.user:
            steps.append(f"chown {shlex.quote(self.user)} {SOCKET_DIR}")
        if not settings.host_workspace:
            steps.append(f"mkdir -p {shlex.quote(settings.workspace)}")
            if self.user:
                steps.append(f"chown {shlex.quote(self.user)} {shlex.quote(settings.workspace)}")
        try:
            code, output = self._run(engine, ["/bin/sh", "-c", " && ".join(steps)], user="0")
        except ApiError as error:
            if ending and error.status == 409:  # the container stopped meanwhile
                return False
            raise
        if ending and code == JOIN_REFUSED:
            return False
        if code != 0:
            raise DockerUnavailable(
                f"profile {self.profile.name!r}: preparing the container {self.name} failed: "
                f"{output.decode(errors='replace').strip()}"
            )
        return True

    def _start_exec(self, engine: Engine, container: str) -> tuple[socket.socket, bytes]:
        body = {
            "AttachStdin": True,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": False,
            "Cmd": self.worker_command(),
            "WorkingDir": self.settings.workspace,
        }
        self.exec_id = str(engine.call("POST", engine.path("containers", container, "exec"), body)["Id"])
        sock, pending = engine.upgrade(
            "POST", engine.path("exec", self.exec_id, "start"), {"Detach": False, "Tty": False}
        )
        sock.setblocking(False)
        return sock, pending

    def _setup(self) -> tuple[socket.socket, bytes]:
        engine = self.engine = self._connect()
        try:
            return self._start_exec(engine, self._provision(engine))
        except EngineError as error:
            self._discard()
            raise DockerUnavailable(
                f"profile {self.profile.name!r}: the Docker engine failed: {error}"
            ) from None
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        """After a failed start: a container this connection created without retention goes again."""
        if self.container is not None and self._created and not self.persistent and not self.shared:
            with contextlib.suppress(EngineError):
                self._remove()
        self._release_watcher(keep=False)

    def _exit_code(self, deadline: float) -> int | None:
        """The exec's exit code once Docker reports it ended; None if it still runs at the deadline."""
        assert self.engine is not None and self.exec_id is not None
        engine = self.engine
        while True:
            state = engine.call("GET", engine.path("exec", self.exec_id, "json"))
            if not state.get("Running"):
                code = state.get("ExitCode")
                return int(code) if code is not None else -1
            if time.monotonic() >= deadline:
                return None
            time.sleep(EXEC_POLL_S)

    def _remove(self) -> None:
        """Remove the container, and wait until it is gone (it may be removing itself already)."""
        assert self.container is not None and self.engine is not None
        engine = self.engine
        try:
            engine.call("DELETE", engine.path("containers", self.container, query={"force": "1"}))
        except NotFound:
            return
        except ApiError as error:
            if error.status != 409:  # 409: a removal is in progress (its own AutoRemove)
                raise
            with contextlib.suppress(NotFound):
                self._wait_removed(engine, self.container, ENDING_WAIT_S)

    # --- the Environment interface ---------------------------------------------------------------

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock, pending = await _in_thread(self._setup)
        loop = asyncio.get_running_loop()
        stdout = asyncio.StreamReader(limit=reader_limit(), loop=loop)
        try:
            transport, protocol = await loop.create_connection(
                lambda: _ExecProtocol(stdout, pending), sock=sock
            )
        except BaseException:
            sock.close()
            await _in_thread(self._discard)
            raise
        self._transport, self._protocol = transport, protocol
        self._stdin = _StdinTransport(transport)
        return stdout, asyncio.StreamWriter(self._stdin, protocol, stdout, loop)

    async def close(self, budget: float) -> None:
        if self._protocol is None or self._stdin is None or self._transport is None:
            return
        keep = False  # a failed cleanup keeps the container: the watcher is told to stay
        try:
            deadline = time.monotonic() + budget
            kept = f"the container {self.name} is kept for inspection (remove it with `docker rm -f {self.name}`)"
            self._stdin.write_eof()
            code: int | None = None
            try:
                await asyncio.wait_for(self._protocol.ended.wait(), budget)
                code = await asyncio.wait_for(_in_thread(self._exit_code, deadline), budget)
            except TimeoutError:
                pass
            except EngineError as error:
                self._transport.abort()
                keep = True
                raise CleanupFailed(f"the worker's exit status is unknown: {error}; {kept}") from None
            finally:
                if code is None:
                    self._transport.abort()
                else:
                    self._transport.close()
            keep = code != 0
            if code is None:
                raise CleanupFailed(
                    f"the worker did not exit within its shutdown budget of {budget:g} s; its connection was cut "
                    f"and {kept}"
                )
            if code != 0:
                raise CleanupFailed(
                    f"the worker exited with status {code}; its cleanup may be incomplete; {kept}"
                )
            # A shared container is left to its other users (without retention it ends after the last one).
            if self.shared or (self.persistent and not (self._created and self.reconnect)):
                return
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                await asyncio.wait_for(_in_thread(self._remove), remaining)
            except TimeoutError:
                raise CleanupFailed(
                    f"the container {self.name} was not removed within the shutdown budget of {budget:g} s"
                ) from None
            except EngineError as error:
                raise CleanupFailed(f"removing the container {self.name} failed: {error}") from None
        finally:
            self._release_watcher(keep)
            if keep and self.shared and not self.persistent:
                self._hold()


def _in_thread(function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`function(*args)` in a daemon thread: a blocking call to the engine that outlives a budget never holds up
    exit (asyncio's default executor is joined at the end of `asyncio.run`)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(cast(T, result))

    def run() -> None:
        try:
            result = function(*args)
        except BaseException as error:
            with contextlib.suppress(RuntimeError):  # the loop may be closed by then
                loop.call_soon_threadsafe(settle, None, error)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="wuu-docker", daemon=True).start()
    return future
