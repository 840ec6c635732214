"""Who may start a background task (spec/schema/userhost/tasks.schema.json, TaskAuthorityKind), against a real
Personal host: an input admitted over the Unix socket carries the local installation's authority and starts a
task; one admitted over HTTP (a token a paired phone or a remote owner may hold) does not, and with no provider
selected nothing does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from wuu.generated import models as m
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.address import HttpAddress
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.http import HttpServer
from wuu.host.userhost.personal import no_authorization, personal
from wuu.host.userhost.tokens import TOKENS_FILE, TokenStore

DEADLINE_S = 20.0
TASK = "/task /write notes/later.txt\nbuy milk"


Said = list[tuple[int, str]]
"""A conversation's messages as (sequence, text)."""


async def reply_to(client: UserHostClient, main: str, n: int) -> str:
    """Send TASK over the socket; the agent's answer."""
    user_input = m.UserInput(client_input_id=f"in-{n}", request_id=f"req-{n}", text=TASK)
    sent = await client.plugin_call(
        "wuu.personal", "agents.send", m.AgentsSendParams(session_id=main), user_input=user_input
    )

    async def read() -> Said:
        params = m.AgentsHistoryReadParams(session_id=main)
        history = await client.plugin_call("wuu.personal", "agents.history.read", params)
        return [(message.message_seq, message.text) for message in history.messages]

    return await answer(read, sent.receipt.history_seq)


async def answer(read: Callable[[], Awaitable[Said]], after: int) -> str:
    """The newest message after sequence `after`, once there is one."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while not (said := [text for seq, text in await read() if seq > after]):
        assert loop.time() < end, "the agent did not answer"
        await asyncio.sleep(0.05)
    return said[-1]


async def test_a_task_starts_from_the_socket_and_not_from_http(tmp_path: Path) -> None:
    host = await UserHost.start(
        user_space_id="local", product_domain="personal", home=tmp_path, compose=[personal()]
    )
    unix = await UnixServer.start(host, tmp_path / "run" / "userhost.sock")
    tokens = TokenStore(host.layout.state / TOKENS_FILE)
    http = await HttpServer.start(host, HttpAddress("127.0.0.1", 0), tokens)
    client = await UserHostClient.connect_unix(unix.path)
    try:
        await client.initialize()
        main = (
            await client.plugin_call("wuu.personal", "agents.main_session", m.AgentsMainSessionParams())
        ).session_id
        async with aiohttp.ClientSession() as web:
            headers = {"Authorization": f"Bearer {tokens.create('phone')}"}
            base = f"http://{http.address}/v1/plugins/wuu.personal"

            async def post(method: str, body: dict[str, Any]) -> Any:
                async with web.post(f"{base}/{method}", data=json.dumps(body), headers=headers) as response:
                    assert response.status == 200, await response.text()
                    return json.loads(await response.read())

            user_input = {"client_input_id": "in-http", "request_id": "req-http", "text": TASK}
            sent = await post("agents.send", {"params": {"session_id": main}, "user_input": user_input})

            async def read() -> Said:
                history = await post("agents.history.read", {"params": {"session_id": main}})
                return [(message["message_seq"], message["text"]) for message in history["messages"]]

            told = await answer(read, sent["receipt"]["history_seq"])
            assert told.startswith(
                "refused (authorization_refused): the native provider issues local-installation"
            ), told
            grants = await post("tasks.grants.list", {"params": {}})
            assert grants["grants"] == []
        told = await reply_to(client, main, 1)
        assert told.startswith("started task "), told
        listed = await client.plugin_call("wuu.personal", "tasks.grants.list", m.TasksGrantsListParams())
        assert [grant.authority.kind.value for grant in listed.grants] == ["local_installation"]
    finally:
        await client.close()
        await http.close()
        await unix.close()
        await host.close()


async def test_without_a_provider_no_task_starts_from_anywhere(tmp_path: Path) -> None:
    host = await UserHost.start(
        user_space_id="local",
        product_domain="personal",
        home=tmp_path,
        compose=[personal(authorization=no_authorization)],
    )
    unix = await UnixServer.start(host, tmp_path / "run" / "userhost.sock")
    client = await UserHostClient.connect_unix(unix.path)
    try:
        await client.initialize()
        main = (
            await client.plugin_call("wuu.personal", "agents.main_session", m.AgentsMainSessionParams())
        ).session_id
        told = await reply_to(client, main, 1)
        assert told.startswith("refused (authorization_unavailable): "), told
    finally:
        await client.close()
        await unix.close()
        await host.close()
