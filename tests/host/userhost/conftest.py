"""Fixtures of the user-host tests: a started host with the test plugin, its Unix socket, its gRPC server,
and clients of each."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.host.userhost.plugins import make_test_plugin
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.grpc_client import UserHostGrpcClient
from wuu.host.userhost.grpc_service import GrpcServer

Connect = Callable[[], Awaitable[UserHostClient]]
GrpcConnect = Callable[[], Awaitable[UserHostGrpcClient]]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The host's home (empty, private: a group-writable home, as a umask of 002 makes it, is refused)."""
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A short private directory for sockets (a socket path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="uh-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def host(home: Path) -> AsyncIterator[UserHost]:
    """A host bound to `local`/`personal` with the test plugin in its graph."""
    started: list[UserHost] = []
    state = home / "user-spaces" / "local" / "personal" / "state"
    started.append(
        await UserHost.start(
            user_space_id="local",
            product_domain="personal",
            home=home,
            plugins=[make_test_plugin(started, state)],
        )
    )
    yield started[0]
    await started[0].close()


@pytest.fixture
async def server(host: UserHost, run_dir: Path) -> AsyncIterator[UnixServer]:
    """The host's Unix socket."""
    unix = await UnixServer.start(host, run_dir / "userhost.sock")
    yield unix
    await unix.close()


@pytest.fixture
async def connect(server: UnixServer) -> AsyncIterator[Connect]:
    """Opens clients of the host's socket; every one is closed after the test."""
    clients: list[UserHostClient] = []

    async def open_client() -> UserHostClient:
        client = await UserHostClient.connect_unix(server.path)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.close()


@pytest.fixture
async def grpc_server(host: UserHost, run_dir: Path) -> AsyncIterator[GrpcServer]:
    """The host's gRPC server on a Unix socket."""
    served = await GrpcServer.start(host, f"unix:{run_dir / 'grpc.sock'}")
    yield served
    await served.close()


@pytest.fixture
async def grpc_connect(grpc_server: GrpcServer) -> AsyncIterator[GrpcConnect]:
    """Opens gRPC clients of the host (not yet initialized); every one is closed after the test."""
    clients: list[UserHostGrpcClient] = []

    async def open_client() -> UserHostGrpcClient:
        client = await UserHostGrpcClient.connect(grpc_server.address)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.close()
