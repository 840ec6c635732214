"""The user-host RPC on a Unix socket: NDJSON clients, each a transport of its own (at most 16 at once).

The socket is created with mode 0600 in a private directory (owned by this user, closed to everyone else;
created 0700 when missing); it appears at its path only once it accepts connections. A host that answers on
the path already makes the start fail; a socket left by a host that is gone is replaced. Closing the server
removes the socket file. A connection is pending (`listener.Pending`) until its client completes
`initialize`, which it must do within the initialize deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from pathlib import Path

from .authority import UserHost
from .envelope import FRAMING
from .listener import DEFAULT_MAX_PENDING, AcceptLoop, Pending
from .ndjson import DEFAULT_INITIALIZE_SECONDS, DEFAULT_OUTBOX_BYTES, NdjsonConnection
from .server import Listener

log = logging.getLogger("wuu.host.userhost")

# sockaddr_un.sun_path holds 108 bytes on Linux, the terminating NUL included.
MAX_SOCKET_PATH = 107


class SocketInUse(Exception):
    """The socket's path cannot be used: a live host answers there, or the path or its directory is unsafe."""


class UnixServer(Listener):
    """Serves a user host's clients on a Unix socket. Start it with `UnixServer.start`."""

    def __init__(
        self, host: UserHost, path: Path, max_queued_bytes: int, initialize_timeout: float, max_pending: int
    ) -> None:
        self.host = host
        self.path = path
        self._max_queued_bytes = max_queued_bytes
        self._initialize_timeout = initialize_timeout
        self._pending = Pending(max_pending)
        self._accepting: AcceptLoop | None = None
        self._connections: set[NdjsonConnection] = set()
        self._closing = False

    @classmethod
    async def start(
        cls,
        host: UserHost,
        path: Path,
        *,
        max_queued_bytes: int = DEFAULT_OUTBOX_BYTES,
        initialize_timeout: float = DEFAULT_INITIALIZE_SECONDS,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> UnixServer:
        """Listen on `path`; SocketInUse when it cannot be used safely. A client has `initialize_timeout`
        seconds to complete `initialize`; at most `max_pending` connections that have not are held."""
        server = cls(host, path, max_queued_bytes, initialize_timeout, max_pending)
        await server._listen()
        return server

    async def _listen(self) -> None:
        await prepare_socket_path(self.path)
        # Bound and listening under a staging name first, then linked into place: a socket at the path is
        # always one that accepts, 0600 from the start (a client polling for the path connects at once, and a
        # host starting meanwhile never takes it for a stale one).
        staging = _staging(self.path)
        staging.unlink(missing_ok=True)
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listening.bind(str(staging))
            os.chmod(staging, 0o600)
            listening.listen(socket.SOMAXCONN)
            try:
                os.link(staging, self.path)
            except FileExistsError:
                raise SocketInUse(f"{self.path}: another host took the path meanwhile") from None
        except BaseException:
            listening.close()
            raise
        finally:
            staging.unlink(missing_ok=True)
        self._accepting = AcceptLoop(listening, self._serve, self._pending, "unix")
        log.info("listening", extra={"transport": "unix", "path": str(self.path)})

    async def _serve(self, accepted: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=accepted, limit=FRAMING.stream_limit)
        except BaseException:
            accepted.close()
            raise
        if self._closing:  # accepted just before the server closed: not served
            writer.close()
            return
        self._pending.add(writer.transport)
        connection = NdjsonConnection(
            self.host,
            reader,
            writer,
            "unix",
            max_queued_bytes=self._max_queued_bytes,
            initialize_timeout=self._initialize_timeout,
            initialized=lambda: self._pending.admit(writer.transport),
        )
        self._connections.add(connection)
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)

    @property
    def pending(self) -> int:
        """How many connections have not completed `initialize`."""
        return len(self._pending)

    @property
    def transport(self) -> str:
        """`unix:PATH`."""
        return f"unix:{self.path}"

    async def close(self) -> None:
        """Stop accepting, end every connection, and remove the socket file."""
        self._closing = True
        if self._accepting is not None:
            await self._accepting.close()
        for connection in self._connections:
            connection.stop()
        if self._accepting is not None:
            await self._accepting.wait_connections()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


async def prepare_socket_path(path: Path) -> None:
    """Make `path` ready for a new socket: its directory private, nothing there but a stale socket (removed);
    SocketInUse otherwise."""
    for bound in (path, _staging(path)):
        if len(os.fsencode(bound)) > MAX_SOCKET_PATH:
            raise SocketInUse(
                f"{bound}: longer than {MAX_SOCKET_PATH} bytes, the limit of a Unix socket path"
            )
    _private_directory(path.parent)
    await _clear_stale(path)


def _staging(path: Path) -> Path:
    """Where the socket is bound before it is linked into place: beside it, a short name of this process."""
    return path.with_name(f".w{os.getpid():x}")


def _private_directory(directory: Path) -> None:
    """Create the socket's directory 0700, or check that the existing one is this user's alone."""
    try:
        directory.mkdir(mode=0o700, parents=True)
        return
    except FileExistsError:
        pass
    info = directory.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise SocketInUse(f"{directory}: not a directory")
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise SocketInUse(
            f"{directory}: the socket's directory must be private (owned by you, mode 0700 or stricter); "
            f"it is mode {stat.S_IMODE(info.st_mode):o} and owned by uid {info.st_uid}"
        )


async def _clear_stale(path: Path) -> None:
    """Refuse a path where a live host answers or that is not a socket; remove a socket nobody answers."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketInUse(f"{path}: exists and is not a socket")
    try:
        _, writer = await asyncio.open_unix_connection(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)
        log.info("replaced a stale socket", extra={"path": str(path)})
        return
    writer.close()
    raise SocketInUse(f"{path}: a user host already answers there")
