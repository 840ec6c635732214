"""The user-host RPC on a Unix socket: NDJSON clients, each a transport of its own (at most 16 at once).

The socket is created with mode 0600 in a private directory (owned by this user, closed to everyone else;
created 0700 when missing). A host that answers on the path already makes the start fail; a socket left
by a host that is gone is replaced. Closing the server removes the socket file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from pathlib import Path

from .authority import UserHost
from .envelope import FRAMING
from .ndjson import DEFAULT_OUTBOX_BYTES, NdjsonConnection

log = logging.getLogger("wuu.host.userhost")

# sockaddr_un.sun_path holds 108 bytes on Linux, the terminating NUL included.
MAX_SOCKET_PATH = 107


class SocketInUse(Exception):
    """The socket's path cannot be used: a live host answers there, or the path or its directory is unsafe."""


class UnixServer:
    """Serves a user host's clients on a Unix socket. Start it with `UnixServer.start`."""

    def __init__(self, host: UserHost, path: Path, max_queued_bytes: int) -> None:
        self.host = host
        self.path = path
        self._max_queued_bytes = max_queued_bytes
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], NdjsonConnection] = {}

    @classmethod
    async def start(
        cls, host: UserHost, path: Path, *, max_queued_bytes: int = DEFAULT_OUTBOX_BYTES
    ) -> UnixServer:
        """Listen on `path`; SocketInUse when it cannot be used safely."""
        server = cls(host, path, max_queued_bytes)
        await server._listen()
        return server

    async def _listen(self) -> None:
        await prepare_socket_path(self.path)
        self._server = await asyncio.start_unix_server(
            self._accept, path=str(self.path), limit=FRAMING.stream_limit
        )
        os.chmod(self.path, 0o600)
        log.info("listening", extra={"transport": "unix", "path": str(self.path)})

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = NdjsonConnection(
            self.host, reader, writer, "unix", max_queued_bytes=self._max_queued_bytes
        )
        self._connections[task] = connection
        try:
            await connection.serve()
        finally:
            del self._connections[task]

    async def close(self) -> None:
        """Stop accepting, end every connection, and remove the socket file."""
        if self._server is not None:
            self._server.close()
        for connection in self._connections.values():
            connection.stop()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


async def prepare_socket_path(path: Path) -> None:
    """Make `path` ready for a new socket: its directory private, nothing there but a stale socket (removed);
    SocketInUse otherwise."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketInUse(f"{path}: longer than {MAX_SOCKET_PATH} bytes, the limit of a Unix socket path")
    _private_directory(path.parent)
    await _clear_stale(path)


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
