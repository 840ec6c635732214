"""Cancelling plugin calls (`plugin/client/cancel`, spec/schema/userhost/plugin.schema.json): answered at once,
exactly one response for the cancelled request, connection-local ids, the typed client's task cancellation,
and the revocation of the call's foreground authority (admitted work goes on, no new work is admitted).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE, until
from wuu.generated.models import (
    AgentsHistorySearchParams,
    AgentsHistorySearchResult,
    AgentsMainSessionParams,
    AgentsMainSessionResult,
    UserHostErrorCode,
)
from wuu.host.userhost import Plugin, PluginCall, UnixServer, UserHost
from wuu.host.userhost.client import ConnectionLost, UserHostClient
from wuu.host.userhost.envelope import FRAMING
from wuu.host.userhost.errors import UserHostError

INIT_PARAMS = {"protocol_version": 1, "client_info": {"name": "t", "version": "1"}}
CANCELLED = {"code": -32000, "data": {"code": "cancelled"}}


class Line:
    """A raw connection to the host's socket: JSON messages out, the host's lines in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path: Path) -> Line:
        line = cls(*await asyncio.open_unix_connection(str(path), limit=FRAMING.stream_limit))
        await line.send(0, "initialize", INIT_PARAMS)
        assert "result" in await line.read()
        return line

    async def send(self, request_id: int | str, method: str, params: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.writer.write(json.dumps(message).encode() + b"\n")
        await self.writer.drain()

    async def search(self, request_id: int | str, query: str) -> None:
        """Send `agents.history.search` of the test plugin with `query` (`sleep:S`: it takes S seconds)."""
        params = {"session_id": "main", "query": query}
        call = {"plugin_id": "wuu.test", "method": "agents.history.search", "params": params}
        await self.send(request_id, "plugin/client/request", call)

    async def read(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(await asyncio.wait_for(self.reader.readline(), DEADLINE))
        message.get("error", {}).pop("message", None)  # not normative
        return message

    async def next_is_answer_to_a_new_request(self) -> None:
        """Nothing more was sent for earlier requests: the next line answers a request sent now."""
        await self.send("probe", "plugin/client/cancel", {"id": "none"})
        assert await self.read() == {"jsonrpc": "2.0", "id": "probe", "result": {"cancelled": False}}

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def lines(server: UnixServer) -> AsyncIterator[list[Line]]:
    """Raw connections the test opens (`Line.open`), closed after it."""
    opened: list[Line] = []
    yield opened
    for line in opened:
        line.close()


async def opened(server: UnixServer, lines: list[Line]) -> Line:
    line = await Line.open(server.path)
    lines.append(line)
    return line


async def test_a_cancel_is_answered_at_once_and_the_call_gets_exactly_one_response(
    server: UnixServer, lines: list[Line]
) -> None:
    line = await opened(server, lines)
    await line.search(1, "sleep:30")
    await line.send(2, "plugin/client/cancel", {"id": 1})
    answers = [await line.read(), await line.read()]
    assert sorted(answers, key=lambda message: message["id"]) == [
        {"jsonrpc": "2.0", "id": 1, "error": CANCELLED},
        {"jsonrpc": "2.0", "id": 2, "result": {"cancelled": True}},
    ]
    await line.next_is_answer_to_a_new_request()
    # The cancelled call is gone: cancelling it again delivers nothing.
    await line.send(3, "plugin/client/cancel", {"id": 1})
    assert await line.read() == {"jsonrpc": "2.0", "id": 3, "result": {"cancelled": False}}


async def test_a_string_id_is_cancelled_by_its_string_only(server: UnixServer, lines: list[Line]) -> None:
    line = await opened(server, lines)
    await line.search("7", "sleep:30")
    await line.send(2, "plugin/client/cancel", {"id": 7})
    assert await line.read() == {"jsonrpc": "2.0", "id": 2, "result": {"cancelled": False}}
    await line.send(3, "plugin/client/cancel", {"id": "7"})
    answers = [await line.read(), await line.read()]
    assert sorted(answers, key=lambda message: str(message["id"])) == [
        {"jsonrpc": "2.0", "id": 3, "result": {"cancelled": True}},
        {"jsonrpc": "2.0", "id": "7", "error": CANCELLED},
    ]


async def test_cancelling_an_unknown_or_finished_call_delivers_nothing(
    server: UnixServer, lines: list[Line]
) -> None:
    line = await opened(server, lines)
    await line.send(1, "plugin/client/cancel", {"id": 12345})
    assert await line.read() == {"jsonrpc": "2.0", "id": 1, "result": {"cancelled": False}}
    await line.search(2, "quick")
    assert await line.read() == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"result": {"messages": [], "next_page_token": None}},
    }
    await line.send(3, "plugin/client/cancel", {"id": 2})
    assert await line.read() == {"jsonrpc": "2.0", "id": 3, "result": {"cancelled": False}}
    # A request that is not a plugin call cannot be cancelled either (the cancel itself, for one).
    await line.send(4, "plugin/client/cancel", {"id": 4})
    assert await line.read() == {"jsonrpc": "2.0", "id": 4, "result": {"cancelled": False}}
    await line.next_is_answer_to_a_new_request()


async def test_a_cancel_affects_its_own_connection_only(server: UnixServer, lines: list[Line]) -> None:
    one, other = await opened(server, lines), await opened(server, lines)
    await one.search(5, "sleep:30")
    await other.search(5, "sleep:0.5")
    await other.send(6, "plugin/client/cancel", {"id": 99})
    assert await other.read() == {"jsonrpc": "2.0", "id": 6, "result": {"cancelled": False}}
    await one.send(6, "plugin/client/cancel", {"id": 5})
    answers = [await one.read(), await one.read()]
    assert {message["id"]: message for message in answers} == {
        5: {"jsonrpc": "2.0", "id": 5, "error": CANCELLED},
        6: {"jsonrpc": "2.0", "id": 6, "result": {"cancelled": True}},
    }
    # The other connection's request 5 ran on and completed.
    assert await other.read() == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {"result": {"messages": [], "next_page_token": None}},
    }


@dataclass
class Blocking:
    """A plugin whose `agents.history.search` admits work writing `before`, then waits until it is stopped;
    once stopped it tries to admit work writing `after`, and records what that raised."""

    state: Path
    started: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    revoked_when_stopped: bool | None = None
    admit_after_stop: UserHostErrorCode | None = None

    def plugin(self) -> Plugin:
        return Plugin(
            "wuu.block", "block-1", {"agents.history.search": self.search, "agents.main_session": self.main}
        )

    async def search(self, params: AgentsHistorySearchParams, call: PluginCall) -> AgentsHistorySearchResult:
        call.admit(write_later(self.state / "before"))
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.revoked_when_stopped = call.revoked.is_set()
            try:
                call.admit(write_later(self.state / "after"))
            except UserHostError as error:
                self.admit_after_stop = error.code
            self.stopped.set()
        raise AssertionError("unreachable: the call waits until it is cancelled")

    async def main(self, params: AgentsMainSessionParams, call: PluginCall) -> AgentsMainSessionResult:
        return AgentsMainSessionResult(session_id="main")


async def write_later(path: Path) -> None:
    await asyncio.sleep(0.2)
    path.write_text("done", encoding="utf-8")


@pytest.fixture
async def blocking(home: Path, run_dir: Path) -> AsyncIterator[tuple[Blocking, UserHost, UnixServer]]:
    """A host whose only plugin is `Blocking`, on a socket."""
    plugin = Blocking(home)
    host = await UserHost.start(
        user_space_id="local", product_domain="personal", home=home, plugins=[plugin.plugin()]
    )
    server = await UnixServer.start(host, run_dir / "block.sock")
    yield plugin, host, server
    await server.close()
    await host.close()


SEARCH = AgentsHistorySearchParams(session_id="main", query="q")


async def test_cancelling_the_task_of_a_plugin_call_cancels_it_on_the_host(
    blocking: tuple[Blocking, UserHost, UnixServer],
) -> None:
    plugin, host, server = blocking
    client = await UserHostClient.connect_unix(server.path)
    try:
        await client.initialize()
        call = asyncio.create_task(client.plugin_call("wuu.block", "agents.history.search", SEARCH))
        await asyncio.wait_for(plugin.started.wait(), DEADLINE)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The client sent plugin/client/cancel: the host stopped the handler and revoked its authority.
        await asyncio.wait_for(plugin.stopped.wait(), DEADLINE)
        assert plugin.revoked_when_stopped is True
        assert plugin.admit_after_stop is UserHostErrorCode.CANCELLED
        # Work admitted before the cancel is not undone; nothing was admitted after it.
        await until(lambda: (plugin.state / "before").exists(), "the work admitted before the cancel")
        await host.wait_idle()
        assert not (plugin.state / "after").exists()
        # The connection goes on (the cancelled call's one response was read and dropped).
        result = await client.plugin_call("wuu.block", "agents.main_session", AgentsMainSessionParams())
        assert result == AgentsMainSessionResult(session_id="main")
        assert client.lost is None
    finally:
        await client.close()


async def test_a_client_that_goes_away_revokes_its_calls(
    blocking: tuple[Blocking, UserHost, UnixServer],
) -> None:
    plugin, host, server = blocking
    client = await UserHostClient.connect_unix(server.path)
    await client.initialize()
    call = asyncio.create_task(client.plugin_call("wuu.block", "agents.history.search", SEARCH))
    await asyncio.wait_for(plugin.started.wait(), DEADLINE)
    await client.close()  # EOF, without a cancel
    await asyncio.wait_for(plugin.stopped.wait(), DEADLINE)
    assert plugin.revoked_when_stopped is True
    assert plugin.admit_after_stop is UserHostErrorCode.CANCELLED
    await until(lambda: (plugin.state / "before").exists(), "the work admitted before the client left")
    assert host.clients == 0
    with pytest.raises(ConnectionLost):
        await call
