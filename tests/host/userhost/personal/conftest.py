"""Fixtures of the Personal tests: a host with the Personal composition on a real SQLite file, its Unix
socket, initialized clients, and helpers to build inputs, call the plugin raw or typed, and look into the
store's file."""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wuu.generated.models import AgentsMainSessionParams, AgentsMainSessionResult, UserHostErrorCode
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import PLUGIN_ID, Agent, PersonalPlugin, personal
from wuu.worker.framing import Frame


class Clock:
    """A clock the test moves: starts at 2026-03-01T12:00:00Z and advances 1 ms per reading unless held."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
        self.step = timedelta(milliseconds=1)

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


@dataclass
class Space:
    """A started Personal host and what a test needs of it."""

    host: UserHost
    plugin: PersonalPlugin
    home: Path
    clock: Clock
    main: str = ""

    @property
    def state(self) -> Path:
        return self.host.layout.state

    @property
    def files(self) -> Path:
        return self.host.layout.files

    @property
    def database(self) -> Path:
        return self.state / "personal.sqlite"

    def rows(self, sql: str, *arguments: Any) -> list[tuple[Any, ...]]:
        """Rows of the store's file, read on a connection of the test's own."""
        with sqlite3.connect(self.database) as connection:
            return connection.execute(sql, arguments).fetchall()

    def count(self, table: str) -> int:
        return int(self.rows(f"SELECT count(*) FROM {table}")[0][0])

    async def idle(self) -> None:
        """Wait until the main agent has no step running and the host no admitted work."""
        await self.plugin.agent.idle.wait()
        await self.host.wait_idle()


StartSpace = Callable[..., Awaitable[Space]]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def start_space(home: Path, clock: Clock) -> AsyncIterator[StartSpace]:
    """Starts Personal hosts on the test's home (the same space each time: a restart sees the same store);
    each is closed after the test. Keyword arguments go to `personal()`."""
    started: list[UserHost] = []

    async def start(**options: Any) -> Space:
        plugins: list[PersonalPlugin] = []
        options.setdefault("clock", clock)
        host = await UserHost.start(
            user_space_id="local",
            product_domain="personal",
            home=home,
            composition_profile="personal",
            compose=[personal(started=plugins.append, **options)],
        )
        started.append(host)
        space = Space(host, plugins[0], home, clock)
        space.main = await plugins[0].store.main_session()
        return space

    yield start
    for host in started:
        await host.close()


@pytest.fixture
async def space(start_space: StartSpace) -> Space:
    """A started Personal host with the stand-in agent."""
    return await start_space()


@pytest.fixture
async def server(space: Space, run_dir: Path) -> AsyncIterator[UnixServer]:
    unix = await UnixServer.start(space.host, run_dir / "personal.sock")
    yield unix
    await unix.close()


Connect = Callable[[], Awaitable[UserHostClient]]


@pytest.fixture
async def connect(server: UnixServer) -> AsyncIterator[Connect]:
    """Opens initialized clients of the host's socket; every one is closed after the test."""
    clients: list[UserHostClient] = []

    async def open_client() -> UserHostClient:
        client = await UserHostClient.connect_unix(server.path)
        clients.append(client)
        await client.initialize()
        return client

    yield open_client
    for client in clients:
        await client.close()


@pytest.fixture
async def client(connect: Connect) -> UserHostClient:
    return await connect()


Attach = Callable[[Space | UserHost], Awaitable[UserHostClient]]


@pytest.fixture
async def attach(start_space: StartSpace, run_dir: Path) -> AsyncIterator[Attach]:
    """Serves a given host on a socket of its own and opens an initialized client of it (for tests that
    start hosts themselves); everything is closed after the test, before the hosts."""
    servers: list[UnixServer] = []
    clients: list[UserHostClient] = []

    async def open_client(target: Space | UserHost) -> UserHostClient:
        host = target.host if isinstance(target, Space) else target
        server = await UnixServer.start(host, run_dir / f"attach-{len(servers)}.sock")
        servers.append(server)
        client = await UserHostClient.connect_unix(server.path)
        clients.append(client)
        await client.initialize()
        return client

    yield open_client
    for client in clients:
        await client.close()
    for server in servers:
        await server.close()


def serve_command(home: Path, socket: Path) -> list[str]:
    """`wuu-userhost serve` of the Personal composition on `home`, listening on `socket`, as a process."""
    return [
        *(sys.executable, "-m", "wuu.host.userhost", "serve", "--user-space", "local"),
        *("--product-domain", "personal", "--composition-profile", "personal"),
        *("--home", str(home), "--listen", f"unix:{socket}"),
    ]


# --- building calls ----------------------------------------------------------------------------------


def attachment(content: bytes, filename: str = "note.txt", media_type: str = "text/plain") -> dict[str, Any]:
    """One `UserInputAttachment` of `content`, with its true size and digest."""
    return {
        "filename": filename,
        "media_type": media_type,
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "data": base64.b64encode(content).decode("ascii"),
    }


@dataclass
class Inputs:
    """Makes `user_input` envelopes with fresh IDs."""

    made: int = 0
    prefix: str = "in"
    sent: list[dict[str, Any]] = field(default_factory=list)

    def __call__(
        self, text: str = "hello", attachments: Sequence[dict[str, Any]] = (), **fields: Any
    ) -> dict[str, Any]:
        self.made += 1
        envelope: dict[str, Any] = {
            "client_input_id": f"{self.prefix}-{self.made}",
            "request_id": f"req-{self.made}",
            "text": text,
        }
        if attachments:
            envelope["attachments"] = list(attachments)
        envelope.update(fields)
        return envelope


@pytest.fixture
def inputs() -> Inputs:
    return Inputs()


async def call(
    client: UserHostClient,
    method: str,
    params: dict[str, Any],
    user_input: dict[str, Any] | None = None,
    plugin_id: str = PLUGIN_ID,
) -> Frame:
    """One raw `plugin/client/request` (nothing checked on the client's side); the whole response."""
    request: dict[str, Any] = {"plugin_id": plugin_id, "method": method, "params": params}
    if user_input is not None:
        request["user_input"] = user_input
    return await client.request("plugin/client/request", request)


def result(response: Frame) -> dict[str, Any]:
    """The plugin method's result of a successful response; fails the test on an error response."""
    assert "result" in response, response
    inner: dict[str, Any] = response["result"]["result"]
    return inner


def error(response: Frame, code: UserHostErrorCode, field: str | None = None) -> dict[str, Any]:
    """The error of an error response, checked to have `code` (and `field`, when given)."""
    assert "error" in response, response
    found: dict[str, Any] = response["error"]
    assert found["data"]["code"] == code.value, found
    if field is not None:
        assert found["data"].get("field") == field, found
    return found


async def send(client: UserHostClient, session_id: str, user_input: dict[str, Any]) -> Frame:
    return await call(client, "agents.send", {"session_id": session_id}, user_input)


async def main_session(client: UserHostClient) -> str:
    found = await client.plugin_call(PLUGIN_ID, "agents.main_session", AgentsMainSessionParams())
    assert isinstance(found, AgentsMainSessionResult)
    return found.session_id


def files_in(folder: Path) -> list[Path]:
    """Every file under `folder` (recursively)."""
    return sorted(path for path in folder.rglob("*") if path.is_file())


class SilentAgent:
    """An agent that takes no step at all: inputs stay unread (no context includes them)."""

    async def step(self, step: Any) -> None:
        return None


def silent() -> Agent:
    return SilentAgent()
