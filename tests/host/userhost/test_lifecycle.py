"""The life of user-host clients on a Unix socket (spec/schema/userhost/envelope.schema.json): `shutdown` and EOF
detach only their client, admitted work outlives it, notifications reach the attached clients of their graph
generation only, and the host takes at most 16 client transports.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from tests.helpers import DEADLINE, until
from tests.host.userhost.conftest import Connect
from tests.host.userhost.plugins import make_test_plugin
from wuu.generated.catalog import USERHOST_MAX_CLIENT_TRANSPORTS
from wuu.generated.models import (
    AgentsHistorySearchParams,
    AgentsMainSessionParams,
    AgentsMainSessionResult,
    AgentsReactParams,
    PluginClientInvalidateParams,
)
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.envelope import FRAMING

INIT_PARAMS = {"protocol_version": 1, "client_info": {"name": "t", "version": "1"}}
MAIN = AgentsMainSessionParams()


async def raw_request(
    writer: asyncio.StreamWriter,
    reader: asyncio.StreamReader,
    request_id: int | str,
    method: str,
    params: Any,
) -> dict[str, Any]:
    """Send one request on a raw connection; the host's next line."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    writer.write(json.dumps(message).encode() + b"\n")
    await writer.drain()
    answer: dict[str, Any] = json.loads(await asyncio.wait_for(reader.readline(), DEADLINE))
    return answer


async def works(client: UserHostClient) -> None:
    """`client` is attached and served."""
    assert await client.plugin_call("wuu.test", "agents.main_session", MAIN) == AgentsMainSessionResult(
        session_id="main"
    )


def notice(generation: int, seq: int) -> PluginClientInvalidateParams:
    return PluginClientInvalidateParams(
        graph_generation=generation,
        plugin_id="wuu.test",
        topic="reactions",
        session_id="main",
        message_seqs=[seq],
    )


def react(seq: int) -> AgentsReactParams:
    """An `agents.react` call; the test plugin then notifies the host's current generation about `seq`."""
    return AgentsReactParams(
        session_id="main", message_seq=seq, emoji="👍", expected_revision=0, request_id=f"r{seq}"
    )


async def next_notice(client: UserHostClient) -> PluginClientInvalidateParams:
    return await asyncio.wait_for(anext(client.notifications()), DEADLINE)


async def test_shutdown_answers_then_detaches_only_its_client(
    connect: Connect, server: UnixServer, host: UserHost
) -> None:
    other = await connect()
    await other.initialize()
    reader, writer = await asyncio.open_unix_connection(str(server.path), limit=FRAMING.stream_limit)
    try:
        assert "result" in await raw_request(writer, reader, 1, "initialize", INIT_PARAMS)
        assert host.clients == 2
        assert await raw_request(writer, reader, 2, "shutdown", {}) == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {},
        }
        # Nothing follows the answer: the host closed this client's socket.
        assert await asyncio.wait_for(reader.read(), DEADLINE) == b""
        await until(lambda: host.clients == 1, "the host to detach the client that shut down")
        await works(other)
    finally:
        writer.close()


async def test_eof_detaches_its_client(connect: Connect, server: UnixServer, host: UserHost) -> None:
    other = await connect()
    await other.initialize()
    reader, writer = await asyncio.open_unix_connection(str(server.path), limit=FRAMING.stream_limit)
    try:
        assert "result" in await raw_request(writer, reader, 1, "initialize", INIT_PARAMS)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), DEADLINE) == b""
        await until(lambda: host.clients == 1, "the host to detach the client at EOF")
        await works(other)
    finally:
        writer.close()


async def test_admitted_work_completes_after_its_client_is_gone(connect: Connect, host: UserHost) -> None:
    client = await connect()
    await client.initialize()
    await client.plugin_call(
        "wuu.test",
        "agents.history.search",
        AgentsHistorySearchParams(session_id="main", query="admit:done:1.5"),
    )
    await client.close()
    await until(lambda: host.clients == 0, "the client to be detached")
    gone = time.time_ns()
    done = host.layout.state / "done"
    await until(done.exists, "the admitted work to write its file")
    assert done.read_text() == "done" and done.stat().st_mtime_ns >= gone
    await host.wait_idle()


async def test_notifications_reach_the_attached_clients_of_their_generation(
    connect: Connect, server: UnixServer, host: UserHost, home: Path
) -> None:
    first, second, leaving = await connect(), await connect(), await connect()
    for client in (first, second, leaving):
        await client.initialize()
    await leaving.request("shutdown", {})
    await until(lambda: host.clients == 2, "the client that shut down to be detached")
    await first.plugin_call("wuu.test", "agents.react", react(7))
    assert await next_notice(first) == notice(1, 7)
    assert await next_notice(second) == notice(1, 7)
    # The detached client is not counted among the recipients.
    assert host.notify(notice(1, 8)) == 2
    assert await next_notice(first) == notice(1, 8)
    assert await next_notice(second) == notice(1, 8)

    host.replace_plugins([make_test_plugin([host], home / "user-spaces" / "local" / "personal" / "state")])
    newer = await connect()
    await newer.initialize()
    await newer.plugin_call("wuu.test", "agents.react", react(9))
    assert await next_notice(newer) == notice(2, 9)
    # The clients of generation 1 did not get it: their next notice is the next one of their generation.
    assert host.notify(notice(1, 10)) == 2
    assert await next_notice(first) == notice(1, 10)
    assert await next_notice(second) == notice(1, 10)


async def test_the_seventeenth_client_is_refused_and_the_others_keep_working(
    connect: Connect, server: UnixServer, host: UserHost
) -> None:
    clients = [await connect() for _ in range(USERHOST_MAX_CLIENT_TRANSPORTS)]
    for client in clients:
        await client.initialize()
    assert host.clients == USERHOST_MAX_CLIENT_TRANSPORTS
    reader, writer = await asyncio.open_unix_connection(str(server.path), limit=FRAMING.stream_limit)
    try:
        answer = await raw_request(writer, reader, "first", "initialize", INIT_PARAMS)
        assert answer["id"] == "first" and answer["error"]["code"] == -32000, answer
        assert answer["error"]["data"] == {"code": "too_many_clients"}
        assert await asyncio.wait_for(reader.read(), DEADLINE) == b""
    finally:
        writer.close()
    assert host.clients == USERHOST_MAX_CLIENT_TRANSPORTS
    for client in clients:
        await works(client)
    # Once one leaves, a new client gets in.
    await clients[0].close()
    await until(lambda: host.clients == USERHOST_MAX_CLIENT_TRANSPORTS - 1, "a client to leave")
    newcomer = await connect()
    await newcomer.initialize()
    await works(newcomer)
