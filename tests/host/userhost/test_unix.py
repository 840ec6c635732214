"""The user host's Unix socket (spec/schema/userhost/envelope.schema.json): mode 0600 in a private directory,
no start where a live host answers or on something that is not a socket, a stale socket replaced, and the
socket file removed when the server closes.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path
from unittest import mock

import pytest

from tests.helpers import DEADLINE
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.unix import SocketInUse


async def served(path: Path) -> None:
    """A client on `path` initializes, and the host binding answers."""
    client = await UserHostClient.connect_unix(path)
    try:
        assert (await client.initialize()).user_space_id == "local"
    finally:
        await client.close()


async def test_the_socket_is_mode_0600_and_removed_on_close(host: UserHost, run_dir: Path) -> None:
    path = run_dir / "userhost.sock"
    server = await UnixServer.start(host, path)
    info = path.lstat()
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    client = await UserHostClient.connect_unix(path)
    await client.initialize()
    await server.close()
    assert not path.exists()
    # Its clients were ended with it.
    await asyncio.wait_for(client.close(), DEADLINE)
    assert client.lost is not None
    assert host.clients == 0


async def test_the_path_appears_only_when_the_socket_accepts(host: UserHost, run_dir: Path) -> None:
    """Bound and listening under a staging name, then linked into place: nothing else is left in the
    directory, and the socket at the path accepts (no window in which it exists but refuses)."""
    path = run_dir / "userhost.sock"
    bound: list[list[str]] = []
    real_listen = socket.socket.listen

    def listen(self: socket.socket, backlog: int = socket.SOMAXCONN) -> None:
        bound.append(sorted(os.listdir(run_dir)))  # what a client polling the directory sees before listen
        real_listen(self, backlog)

    with mock.patch.object(socket.socket, "listen", listen):
        server = await UnixServer.start(host, path)
    try:
        assert bound == [[f".w{os.getpid():x}"]], "before listen, only the staging name exists"
        assert sorted(os.listdir(run_dir)) == ["userhost.sock"]
        client = await UserHostClient.connect_unix(path)
        await client.initialize()
        await client.close()
    finally:
        await server.close()


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o711, 0o701, 0o707, 0o770])
async def test_a_directory_others_can_enter_is_refused(host: UserHost, run_dir: Path, mode: int) -> None:
    directory = run_dir / "shared"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(SocketInUse, match=str(directory)):
        await UnixServer.start(host, directory / "userhost.sock")
    assert list(directory.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user takes root")
async def test_a_directory_of_another_user_is_refused(host: UserHost, run_dir: Path) -> None:
    directory = run_dir / "theirs"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    with pytest.raises(SocketInUse, match=str(directory)):
        await UnixServer.start(host, directory / "userhost.sock")
    assert list(directory.iterdir()) == []


async def test_a_missing_directory_is_created_private(host: UserHost, run_dir: Path) -> None:
    path = run_dir / "new" / "userhost.sock"
    server = await UnixServer.start(host, path)
    try:
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        await served(path)
    finally:
        await server.close()


async def test_a_directory_that_is_a_file_is_refused(host: UserHost, run_dir: Path) -> None:
    (run_dir / "file").write_text("x")
    with pytest.raises(SocketInUse, match="not a directory"):
        await UnixServer.start(host, run_dir / "file" / "userhost.sock")


async def test_a_live_host_on_the_path_is_refused_and_keeps_serving(
    server: UnixServer, host: UserHost
) -> None:
    with pytest.raises(SocketInUse, match="already answers"):
        await UnixServer.start(host, server.path)
    assert server.path.exists()
    await served(server.path)


async def test_a_stale_socket_is_replaced(host: UserHost, run_dir: Path) -> None:
    path = run_dir / "userhost.sock"
    # A socket bound and closed without unlinking: its file stays, nobody answers on it.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    assert stat.S_ISSOCK(path.lstat().st_mode)
    server = await UnixServer.start(host, path)
    try:
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        await served(path)
    finally:
        await server.close()


async def test_a_path_that_is_not_a_socket_is_refused_untouched(host: UserHost, run_dir: Path) -> None:
    path = run_dir / "userhost.sock"
    path.write_text("keep me")
    with pytest.raises(SocketInUse, match="not a socket"):
        await UnixServer.start(host, path)
    assert path.read_text() == "keep me"
    # A symlink is not followed either.
    target = run_dir / "target"
    target.write_text("keep me too")
    link = run_dir / "link.sock"
    link.symlink_to(target)
    with pytest.raises(SocketInUse, match="not a socket"):
        await UnixServer.start(host, link)
    assert link.is_symlink() and target.read_text() == "keep me too"


async def test_a_path_over_the_socket_limit_is_refused(host: UserHost, run_dir: Path) -> None:
    path = run_dir / ("s" * (108 - len(os.fsencode(run_dir)) - 1))
    assert len(os.fsencode(path)) == 108
    with pytest.raises(SocketInUse, match="107 bytes"):
        await UnixServer.start(host, path)
    assert not path.exists()
