"""The `ssh` backend: the worker runs on a Unix server, reached over SSH with asyncssh (seed 000, DESIGN §6).

Connection: the profile's `host` (`[user@]host` or an alias of the user's SSH configuration), `port`,
`identity_file` (then only that key: no agent, no configured keys) and `known_hosts_file`. Host keys are
verified strictly: an unknown or changed key fails with a message saying how to verify the server first.
No key is ever accepted or added by this backend, and no SSH configuration can turn the check off: the
known-hosts file is always passed explicitly (the profile's, else ~/.ssh/known_hosts).

The conversation: `<workspace>/<conversation>` on the server. The conversation id is the host's
`WUU_CONVERSATION` (in the adapter's environment); without it, a persistent profile uses one id derived
from the profile's name (a later connection finds the same workspace and worker, like a persistent docker
profile) and any other profile a fresh random id per connection. The worker binds the subdirectory as
its root: an `initialize` whose root is the profile's `workspace` is given the subdirectory instead, the
same rewrite on every initialize (an equal re-initialize, and a reconnect, stay equal). The worker
creates it at that initialize, unless the binding has `require_existing_workspace` (a reconnect to
retained state): then a missing subdirectory is `workspace_missing`, never silently an empty one. Any
other absolute root names a path on the server and is used as given, with the binding's own flags (the
conformance runner does this).

The worker's own files are beside the subdirectory, never in it (the root holds only what the tools put
there): `<workspace>/.wuu-<conversation>/` (mode 0700) has its socket, log and start lock. It is created
over SSH before the worker starts, which also checks that the remote account can create directories in
the workspace.

The worker is the persistent native worker, detached on the server. A small POSIX sh launcher starts
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
import hashlib
import logging
import os
import posixpath
import re
import shlex
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import asyncssh
import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES
from wuu.worker.errors import CleanupFailed

from ..profiles import Profile, ProfileError

log = logging.getLogger("wuu.host.ssh")

CONVERSATION_VARIABLE = "WUU_CONVERSATION"
SOCKET_NAME = "worker.sock"  # its log is worker.log, beside it (the native worker's rule)
LOG_NAME = "worker.log"
DEFAULT_WORKER = (sys.executable, "-m", "wuu.worker")
CONNECT_TIMEOUT_S = 30.0
KEEPALIVE_INTERVAL_S = 15.0
# sockaddr_un.sun_path holds 108 bytes on Linux, the terminating NUL included.
MAX_SOCKET_PATH = 107
_CONVERSATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# Run by the server's shell as `sh -c LAUNCHER wuu-ssh-launch SUBDIR RUNDIR LIFETIME PERSISTENT WORKER...`.
# A running worker holds a lock on RUNDIR for its whole life (fd 8, inherited by `serve`); launchers take
# turns on RUNDIR/launch.lock; a worker that is ending (its lock held, its socket gone) is waited for, so
# that its removal of the directories never races a new worker.
DAEMON = f"""exec 8<"$2" && flock -n 8 || exit 0
S=$1 R=$2 N=$3 P=$4
shift 4
"$@" serve --socket "$R/{SOCKET_NAME}" --lifetime-seconds "$N" || exit
[ "$P" = 1 ] || rm -rf -- "$S" "$R"
"""
LAUNCHER = f"""set -u
S=$1 R=$2 N=$3 P=$4
shift 4
SOCK=$R/{SOCKET_NAME} LOG=$R/{LOG_NAME}
DAEMON='{DAEMON}'
tries=0
while :; do
  tries=$((tries + 1))
  if [ "$tries" -gt 200 ]; then
    echo "wuu ssh: the previous worker of $S did not end; its log is $LOG" >&2
    exit 1
  fi
  if ! mkdir -p -m 0700 -- "$R" || ! command exec 9>>"$R/launch.lock"; then
    sleep 0.05
    continue
  fi
  if ! flock -w 10 9; then
    echo "wuu ssh: another connection holds the start lock of $R" >&2
    exit 1
  fi
  if flock -n "$R" true; then
    rm -f -- "$SOCK"
    setsid sh -c "$DAEMON" wuu-worker-daemon "$S" "$R" "$N" "$P" "$@" </dev/null >>"$LOG" 2>&1 9>&- &
    i=0
    until [ -S "$SOCK" ]; do
      i=$((i + 1))
      if [ "$i" -gt 500 ] || {{ [ "$i" -gt 50 ] && flock -n "$R" true; }}; then
        echo "wuu ssh: the worker did not start; the end of its log $LOG:" >&2
        tail -n 20 "$LOG" >&2
        exit 1
      fi
      sleep 0.02
    done
    break
  fi
  [ -S "$SOCK" ] && break
  exec 9>&-
  sleep 0.05
done
exec 9>&-
exec "$@" attach --socket "$SOCK" --lifetime-seconds "$N"
"""


class SshUnavailable(ProfileError):
    """The profile's server cannot be used: unreachable, its host key not verified, login or setup refused."""


def conversation_id(profile: Profile, environ: Mapping[str, str]) -> str:
    """`WUU_CONVERSATION`; else a stable id for a persistent profile, a fresh one otherwise."""
    given = environ.get(CONVERSATION_VARIABLE)
    if given is not None:
        if not _CONVERSATION.fullmatch(given):
            raise ProfileError(
                f"{CONVERSATION_VARIABLE}={given!r}: a conversation id is 1 to 64 letters, digits, "
                "'.', '_' or '-', starting with a letter or digit"
            )
        return given
    if profile.settings.persistent:
        return "p-" + hashlib.sha256(profile.name.encode()).hexdigest()[:16]
    return uuid.uuid4().hex[:16]


def split_destination(host: str) -> tuple[str | None, str]:
    """`user@host` -> (user, host); a bare host -> (None, host)."""
    user, at, name = host.rpartition("@")
    return (user, name) if at else (None, host)


def remote_path(path: str) -> str:
    """A server path in its normal form (no trailing slash, no `.` or `..` components)."""
    return posixpath.normpath(path)


class _Binding:
    """Rewrites `initialize` frames whose root is the profile's workspace to the conversation's subdirectory.

    Frames are NDJSON lines; a line split across writes is kept until it is complete.
    """

    def __init__(self, workspace: str, subdirectory: str) -> None:
        self.workspace = remote_path(workspace)
        self.subdirectory = subdirectory
        self._partial = bytearray()
        self._passthrough = False  # the rest of an oversized line goes as it is (the worker refuses it)

    def rewrite(self, line: bytes) -> bytes:
        if b'"initialize"' not in line:
            return line
        try:
            frame = orjson.loads(line)
        except orjson.JSONDecodeError:
            return line  # the worker judges malformed frames
        if not isinstance(frame, dict) or frame.get("method") != "initialize":
            return line
        data = frame.get("data")
        root = data.get("root") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(root, str) or not root.startswith("/"):
            return line
        if remote_path(root) != self.workspace:
            return line
        data["root"] = self.subdirectory
        return orjson.dumps(frame) + b"\n"

    def feed(self, data: bytes) -> bytes:
        """The bytes to send for `data`: complete lines, rewritten; an incomplete last line is kept."""
        if (
            not self._partial
            and not self._passthrough
            and data.endswith(b"\n")
            and b'"initialize"' not in data
        ):
            return data  # whole frames, none of them an initialize: the usual case
        out = bytearray()
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            if newline < 0:
                rest = data[start:]
                if self._passthrough:
                    out += rest
                elif len(self._partial) + len(rest) > WORKER_MAX_FRAME_BYTES:
                    out += self._partial + rest
                    self._partial.clear()
                    self._passthrough = True
                else:
                    self._partial += rest
                break
            line = data[start : newline + 1]
            start = newline + 1
            if self._passthrough:
                out += line
                self._passthrough = False
            elif self._partial:
                self._partial += line
                out += self.rewrite(bytes(self._partial))
                self._partial.clear()
            else:
                out += self.rewrite(line)
        return bytes(out)

    def flush(self) -> bytes:
        """What is left at EOF: an incomplete last line, as it is."""
        rest = bytes(self._partial)
        self._partial.clear()
        return rest


class _ChannelTransport(asyncio.Transport):
    """The SSH channel as the transport of an asyncio stream pair: writes go through the binding rewrite,
    closing is a half-close (EOF on the worker's stdin; its replies still come back)."""

    def __init__(self, channel: asyncssh.SSHClientChannel[bytes], binding: _Binding) -> None:
        super().__init__()
        self._channel = channel
        self._binding = binding
        self._eof = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof:
            raise RuntimeError("write after EOF on the worker's channel")
        out = self._binding.feed(bytes(data))
        if out:
            self._channel.write(out)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._eof:
            return
        self._eof = True
        if self._channel.is_closing():
            return
        rest = self._binding.flush()
        if rest:
            self._channel.write(rest)
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

    def __init__(self, protocol: asyncio.StreamReaderProtocol, binding: _Binding) -> None:
        self.protocol = protocol
        self.binding = binding
        self.transport: _ChannelTransport | None = None
        self.closed = asyncio.Event()
        self.error: Exception | None = None

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.transport = _ChannelTransport(chan, self.binding)
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


class SshEnvironment:
    """A conversation's subdirectory on an SSH server, with the detached worker relayed over one channel."""

    def __init__(self, profile: Profile, environ: Mapping[str, str] | None = None) -> None:
        settings = profile.settings
        if getattr(settings, "shared", False):
            raise NotImplementedError(
                f"profile {profile.name!r}: shared ssh environments are not available yet"
            )
        self.profile = profile
        self.persistent = bool(settings.persistent)
        self.conversation = conversation_id(profile, os.environ if environ is None else environ)
        self.workspace = remote_path(str(settings.workspace))
        self.subdirectory = posixpath.join(self.workspace, self.conversation)
        self.rundir = posixpath.join(self.workspace, f".wuu-{self.conversation}")
        self.socket = posixpath.join(self.rundir, SOCKET_NAME)
        if len(self.socket.encode()) > MAX_SOCKET_PATH:
            raise ProfileError(
                f"profile {profile.name!r}: workspace: the worker's socket {self.socket} is longer than "
                f"{MAX_SOCKET_PATH} bytes, the limit of a Unix socket path; choose a shorter workspace"
            )
        self.user, self.host = split_destination(str(settings.host))
        self.port: int | None = int(settings.port) if settings.port else None
        self.lifetime = profile.lifetime_seconds or 600
        self.connection: asyncssh.SSHClientConnection | None = None
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self.session: _WorkerSession | None = None

    # --- the command on the server ---------------------------------------------------------------

    def worker_command(self) -> list[str]:
        """The server's worker command (`serve` and `attach` are appended to it)."""
        worker = getattr(self.profile.settings, "worker", None)
        return [str(part) for part in worker] if worker else list(DEFAULT_WORKER)

    def command(self) -> str:
        """The command line the server's shell runs: the launcher with its arguments."""
        persistent = "1" if self.persistent else "0"
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
                str(self.lifetime),
                persistent,
                *self.worker_command(),
            ]
        )

    # --- connecting ------------------------------------------------------------------------------

    def _where(self) -> str:
        destination = f"{self.user}@{self.host}" if self.user else self.host
        return f"{destination} port {self.port}" if self.port else destination

    def _verify_first(self, known_hosts: str) -> str:
        options = f"-o UserKnownHostsFile={shlex.quote(known_hosts)}"
        port = f"-p {self.port} " if self.port else ""
        destination = f"{self.user}@{self.host}" if self.user else self.host
        return (
            f"connect once with the normal SSH client (`ssh {port}{options} {destination}`), check the "
            f"fingerprint it shows against the server's own, and accept it; then try again"
        )

    def _known_hosts(self) -> str:
        given = getattr(self.profile.settings, "known_hosts_file", None)
        path = str(given) if given else str(Path("~/.ssh/known_hosts").expanduser())
        if not Path(path).is_file():
            raise SshUnavailable(
                f"profile {self.profile.name!r}: the known-hosts file {path} does not exist, so the host key "
                f"of {self._where()} cannot be verified; {self._verify_first(path)}"
            )
        return path

    async def _connect(self) -> asyncssh.SSHClientConnection:
        known_hosts = self._known_hosts()
        identity = getattr(self.profile.settings, "identity_file", None)
        options: dict[str, Any] = {
            "known_hosts": known_hosts,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "keepalive_interval": KEEPALIVE_INTERVAL_S,
        }
        if self.port:
            options["port"] = self.port
        if self.user:
            options["username"] = self.user
        if identity:
            # Only this key: no agent, no keys of the SSH configuration.
            options["client_keys"] = [str(identity)]
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
            await self._make_rundir(connection)
            reader = asyncio.StreamReader(limit=WORKER_MAX_FRAME_BYTES, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            session = _WorkerSession(protocol, _Binding(self.workspace, self.subdirectory))
            # No pty, and no environment variables of the SSH configuration: only named ones are
            # forwarded, in the binding.
            channel, _ = await connection.create_session(
                lambda: session, self.command(), encoding=None, request_pty=False, env=None, send_env=None
            )
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
            f"timeout of {self.lifetime} s"
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
