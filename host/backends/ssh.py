"""The `ssh` backend: the worker runs on a Unix server, reached over SSH with asyncssh.

The profile is an SshExecutionProfile (spec/schema/config/execution_environments.schema.json).
Connection: the profile's `host` (`[user@]host` or an alias of the user's SSH configuration), `port`,
`identity_file` (then only that key: no agent, no configured keys) and `known_hosts_file`. Host keys are
verified strictly: an unknown or changed key fails with a message saying how to verify the server first.
No key is ever accepted or added by this backend, and no SSH configuration can turn the check off: the
known-hosts file is always passed explicitly (the profile's, else ~/.ssh/known_hosts).

The conversation: `<workspace>/<conversation>` on the server. The conversation id is the host's
`WUU_CONVERSATION` (in the adapter's environment); without it, a persistent profile uses one id derived
from the profile's name (a later connection finds the same workspace and worker, like a persistent docker
profile) and any other profile a fresh random id per connection. The worker binds the subdirectory as
its root: `rewrite_initialize` gives an `initialize` whose root is the profile's `workspace` the
subdirectory instead (the adapter's relay applies it to every initialize, so an equal re-initialize,
and a reconnect, stay equal). The worker creates the subdirectory at that initialize, unless the
binding has `require_existing_workspace` (a reconnect to retained state): then a missing subdirectory
is `workspace_missing`, never silently an empty one. Any other absolute root names a path on the server
and is used as given, with the binding's own flags (the conformance runner does this).

`shared`: the conversations of the profile share one subdirectory, `<workspace>/s-<hash of the profile's
name>`, each with a worker of its own (so their tool state and processes stay apart); every such worker
holds a shared lock on `<workspace>/.wuu-s-<hash>.users` while it runs, and without `persistent` the last
one to exit removes the subdirectory (the others keep it).

The worker's own files are beside the subdirectory, never in it (the root holds only what the tools put
there): `<workspace>/.wuu-<conversation>/` (mode 0700) has its socket, log and start lock. It is created
over SSH on a channel of its own, which also checks that the remote account can create directories in
the workspace; the launcher's channel opens at the same time (the launcher creates the directory too,
when it is first), so the check costs no round trip of its own.

The worker is the persistent native worker, detached on the server. A small POSIX sh launcher
(`ssh_launcher.sh`, package data, sent as the command's text) starts
`<worker> serve --socket .../worker.sock --lifetime-seconds N` in its own session when none runs (under
a lock: connections of one conversation never start two), then execs `<worker> attach ...`, which
relays the SSH channel to it. The worker keeps its processes across connections and exits after
`lifetime_seconds` without one. Without `persistent`, the launcher's wrapper then removes the
subdirectory and the worker's directory, once the worker has exited cleanly (a worker whose cleanup
failed, or that was killed, leaves them for inspection); `persistent` keeps them. The profile's `worker`
is the server's worker command (`serve`/`attach` and their options are appended); omitted, it is this
installation's `<python> -m wuu.worker`, for a server with the same installation path. The server needs
POSIX sh, `flock` and `setsid` (util-linux).

Shutdown: EOF on the channel (a half-close: replies still come back), then the relay must end within the
budget, with status 0; otherwise the channel is cut and CleanupFailed raised. Either way the detached
worker stays, as at any disconnect, until its idle timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import shlex
import sys
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import asyncssh

from wuu.generated.plain import SshExecutionProfile
from wuu.worker.errors import CleanupFailed
from wuu.worker.framing import reader_limit

from ..errors import ProfileError, SshUnavailable
from ..prestart import INSTALLED_WORKER
from ..profiles import Profile
from .base import Environment
from .conversations import conversation_id, shared_environment

log = logging.getLogger("wuu.host.ssh")

SOCKET_NAME = "worker.sock"  # in RUNDIR; ssh_launcher.sh uses the same name
CONNECT_TIMEOUT_S = 30.0
KEEPALIVE_INTERVAL_S = 15.0
# sockaddr_un.sun_path holds 108 bytes on Linux, the terminating NUL included.
MAX_SOCKET_PATH = 107
LAUNCHER = resources.files(__package__).joinpath("ssh_launcher.sh").read_text(encoding="utf-8")
"""The launcher's POSIX sh text, run by the server's shell as `sh -c LAUNCHER wuu-ssh-launch SUBDIR RUNDIR
LIFETIME PERSISTENT USERS WORKER...` (its header says more)."""


def split_destination(host: str) -> tuple[str | None, str]:
    """`user@host` -> (user, host); a bare host -> (None, host)."""
    user, at, name = host.rpartition("@")
    return (user, name) if at else (None, host)


def remote_path(path: str) -> str:
    """A server path in its normal form (no trailing slash, no `.` or `..` components)."""
    return posixpath.normpath(path)


class _ChannelTransport(asyncio.Transport):
    """The SSH channel as the transport of an asyncio stream pair: closing is a half-close (EOF on the
    worker's stdin; its replies still come back)."""

    def __init__(self, channel: asyncssh.SSHClientChannel[bytes]) -> None:
        super().__init__()
        self._channel = channel
        self._eof = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof:
            raise RuntimeError("write after EOF on the worker's channel")
        self._channel.write(bytes(data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._eof:
            return
        self._eof = True
        if not self._channel.is_closing():
            self._channel.write_eof()

    def close(self) -> None:
        self.write_eof()

    def is_closing(self) -> bool:
        return self._eof or self._channel.is_closing()

    def abort(self) -> None:
        self._eof = True
        self._channel.abort()

    def pause_reading(self) -> None:
        self._channel.pause_reading()

    def resume_reading(self) -> None:
        self._channel.resume_reading()

    def is_reading(self) -> bool:
        return not self._channel.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._channel.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._channel.set_write_buffer_limits(high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._channel.get_extra_info(name, default)


class _WorkerSession(asyncssh.SSHClientSession[bytes]):
    """The channel's events, handed to an asyncio StreamReaderProtocol; stderr goes to ours."""

    def __init__(self, protocol: asyncio.StreamReaderProtocol) -> None:
        self.protocol = protocol
        self.transport: _ChannelTransport | None = None
        self.closed = asyncio.Event()
        self.error: Exception | None = None

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.transport = _ChannelTransport(chan)
        self.protocol.connection_made(self.transport)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.buffer.write(data)
                sys.stderr.buffer.flush()
        else:
            self.protocol.data_received(data)

    def eof_received(self) -> bool:
        self.protocol.eof_received()
        return True  # half-open: the worker's stdin stays writable until the host's EOF

    def pause_writing(self) -> None:
        self.protocol.pause_writing()

    def resume_writing(self) -> None:
        self.protocol.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.error = exc
        self.closed.set()
        self.protocol.connection_lost(exc)


class SshEnvironment(Environment):
    """A conversation's subdirectory on an SSH server, with the detached worker relayed over one channel."""

    def __init__(
        self, profile: Profile[SshExecutionProfile], environ: Mapping[str, str] | None = None
    ) -> None:
        settings = self.settings = profile.settings
        self.profile = profile
        self.conversation = conversation_id(profile, os.environ if environ is None else environ)
        self.workspace = remote_path(settings.workspace)
        if settings.shared:
            shared = shared_environment(profile)
            self.subdirectory = posixpath.join(self.workspace, shared)
            self.users: str | None = posixpath.join(self.workspace, f".wuu-{shared}.users")
        else:
            self.subdirectory = posixpath.join(self.workspace, self.conversation)
            self.users = None
        self.rundir = posixpath.join(self.workspace, f".wuu-{self.conversation}")
        self.socket = posixpath.join(self.rundir, SOCKET_NAME)
        if len(self.socket.encode()) > MAX_SOCKET_PATH:
            raise ProfileError(
                f"profile {profile.name!r}: workspace: the worker's socket {self.socket} is longer than "
                f"{MAX_SOCKET_PATH} bytes, the limit of a Unix socket path; choose a shorter workspace"
            )
        self.user, self.host = split_destination(settings.host)
        self.connection: asyncssh.SSHClientConnection | None = None
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self.session: _WorkerSession | None = None

    # --- the command on the server ---------------------------------------------------------------

    def worker_command(self) -> list[str]:
        """The server's worker command (`serve` and `attach` are appended to it)."""
        return list(self.settings.worker or INSTALLED_WORKER)

    def command(self) -> str:
        """The command line the server's shell runs: the launcher with its arguments."""
        persistent = "1" if self.settings.persistent else "0"
        # `exec`: the login shell becomes the launcher (then the relay), so the channel reports the
        # relay's own exit status or signal.
        return "exec " + shlex.join(
            [
                "sh",
                "-c",
                LAUNCHER,
                "wuu-ssh-launch",
                self.subdirectory,
                self.rundir,
                str(self.settings.lifetime_seconds),
                persistent,
                self.users or "",
                *self.worker_command(),
            ]
        )

    def rewrite_initialize(self, data: dict[str, Any]) -> dict[str, Any]:
        """An initialize whose root is the profile's workspace binds the conversation's subdirectory
        instead; any other root (a relative one is the worker's to refuse) is used as given."""
        root = data.get("root")
        if isinstance(root, str) and root.startswith("/") and remote_path(root) == self.workspace:
            return {**data, "root": self.subdirectory}
        return data

    # --- connecting ------------------------------------------------------------------------------

    def _where(self) -> str:
        destination = f"{self.user}@{self.host}" if self.user else self.host
        return f"{destination} port {self.settings.port}" if self.settings.port else destination

    def _verify_first(self, known_hosts: str) -> str:
        options = f"-o UserKnownHostsFile={shlex.quote(known_hosts)}"
        port = f"-p {self.settings.port} " if self.settings.port else ""
        destination = f"{self.user}@{self.host}" if self.user else self.host
        return (
            f"connect once with the normal SSH client (`ssh {port}{options} {destination}`), check the "
            f"fingerprint it shows against the server's own, and accept it; then try again"
        )

    def _known_hosts(self) -> str:
        path = self.settings.known_hosts_file or str(Path("~/.ssh/known_hosts").expanduser())
        if not Path(path).is_file():
            raise SshUnavailable(
                f"profile {self.profile.name!r}: the known-hosts file {path} does not exist, so the host key "
                f"of {self._where()} cannot be verified; {self._verify_first(path)}"
            )
        return path

    async def _connect(self) -> asyncssh.SSHClientConnection:
        known_hosts = self._known_hosts()
        identity = self.settings.identity_file
        options: dict[str, Any] = {
            "known_hosts": known_hosts,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "keepalive_interval": KEEPALIVE_INTERVAL_S,
        }
        if self.settings.port:
            options["port"] = self.settings.port
        if self.user:
            options["username"] = self.user
        if identity:
            # Only this key: no agent, no keys of the SSH configuration.
            options["client_keys"] = [identity]
            options["agent_path"] = None
        name = self.profile.name
        try:
            return await asyncssh.connect(self.host, **options)
        except asyncssh.HostKeyNotVerifiable as error:
            raise SshUnavailable(
                f"profile {name!r}: the host key of {self._where()} is not in {known_hosts} or does not match "
                f"it ({error.reason}); the connection was refused. If the server is the one you mean, "
                f"{self._verify_first(known_hosts)}"
            ) from None
        except asyncssh.PermissionDenied as error:
            key = f"the key {identity}" if identity else "the keys of your SSH setup"
            raise SshUnavailable(
                f"profile {name!r}: {self._where()} refused the login with {key}: {error.reason}"
            ) from None
        except asyncssh.KeyImportError as error:
            raise SshUnavailable(f"profile {name!r}: identity_file {identity}: {error}") from None
        except (OSError, asyncssh.Error, TimeoutError) as error:
            reason = getattr(error, "reason", None) or str(error) or type(error).__name__
            raise SshUnavailable(f"profile {name!r}: cannot connect to {self._where()}: {reason}") from None

    async def _make_rundir(self, connection: asyncssh.SSHClientConnection) -> None:
        command = shlex.join(["mkdir", "-p", "-m", "0700", "--", self.rundir])
        result = await connection.run(command, check=False)
        if result.exit_status != 0:
            output = str(result.stderr or result.stdout or "").strip()
            raise SshUnavailable(
                f"profile {self.profile.name!r}: the remote account cannot create directories in the "
                f"workspace {self.workspace} on {self.host}: {output or f'exit status {result.exit_status}'}"
            )

    # --- the Environment interface ---------------------------------------------------------------

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        connection = self.connection = await self._connect()
        try:
            reader = asyncio.StreamReader(limit=reader_limit(), loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            session = _WorkerSession(protocol)
            # No pty, and no environment variables of the SSH configuration: only named ones are
            # forwarded, in the binding.
            opened = connection.create_session(
                lambda: session, self.command(), encoding=None, request_pty=False, env=None, send_env=None
            )
            _, (channel, _) = await asyncio.gather(self._make_rundir(connection), opened)
        except BaseException:
            connection.abort()
            raise
        self.channel, self.session = channel, session
        assert session.transport is not None
        return reader, asyncio.StreamWriter(session.transport, protocol, reader, loop)

    async def close(self, budget: float) -> None:
        connection, channel, session = self.connection, self.channel, self.session
        if connection is None:
            return
        if channel is None or session is None or session.transport is None:
            connection.abort()
            return
        deadline = time.monotonic() + budget
        kept = (
            f"a detached worker that still runs keeps {self.subdirectory} on {self.host} until its idle "
            f"timeout of {self.settings.lifetime_seconds} s"
        )
        try:
            if session.closed.is_set():
                log.warning("the worker's relay on %s ended before the host's EOF", self.host)
            session.transport.write_eof()
            try:
                await asyncio.wait_for(session.closed.wait(), budget)
            except TimeoutError:
                channel.abort()
                raise CleanupFailed(
                    f"the worker's relay on {self.host} did not exit within the shutdown budget of {budget:g} s; "
                    f"its SSH channel was cut, and {kept}"
                ) from None
            status, signal = channel.get_exit_status(), channel.get_exit_signal()
            if signal is not None:
                raise CleanupFailed(f"the worker's relay on {self.host} was killed by SIG{signal[0]}; {kept}")
            if status is None:
                reason = session.error or "the channel closed without an exit status"
                raise CleanupFailed(f"the SSH connection to {self.host} was lost ({reason}); {kept}")
            if status != 0:
                raise CleanupFailed(
                    f"the worker's relay on {self.host} exited with status {status} (its messages are above)"
                )
        finally:
            connection.close()
            remaining = deadline - time.monotonic()
            try:
                await asyncio.wait_for(connection.wait_closed(), max(remaining, 0.001))
            except TimeoutError:
                connection.abort()
