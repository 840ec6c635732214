"""One scenario over the three transports of the user host (stdio, the Unix socket, gRPC), through the clients'
common surface (`ClientSurface`): the same initialize result, a plugin call, a user-input call, an error, a
cancelled call, a notification seen by a second client, and shutdown.

Stdio carries one client only, so its second client is on the Unix socket of the same host process (the
fixture host with both `--stdio` and `--listen`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE, ROOT, until
from wuu.generated.models import (
    AgentsMainSessionParams,
    AgentsMainSessionResult,
    AgentsReactParams,
    AgentsSendParams,
    AgentsSendResult,
    PluginClientCancelParams,
    UserHostShutdownParams,
    UserInput,
)
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import ClientSurface, ConnectionLost, UserHostClient
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.grpc_client import UserHostGrpcClient
from wuu.host.userhost.grpc_service import GrpcServer

# What `initialize` answers on every transport: the host's binding, graph and inventory, nothing per transport.
EXPECTED_INIT: dict[str, Any] = {
    "protocol_version": 1,
    "server_info": {"name": "wuu-userhost", "version": "0.1.0"},
    "user_space_id": "local",
    "product_domain": "personal",
    "user_host_isolation": {"memory": "logical", "host": "unverified"},
    "composition_profile": None,
    "graph_generation": 1,
    "plugins": [{"plugin_id": "wuu.test", "fingerprint": "test-1"}],
    "capabilities": [],
}
SLEEP = {"session_id": "main", "query": "sleep:30"}
FAIL = {"session_id": "main", "query": "fail"}
INTERNAL_MESSAGE = re.compile(r"the host failed to answer \(error id [0-9a-f]{16}; its log has the details\)")


@dataclass
class Clients:
    """The client under test and a second client of the same host, not yet initialized."""

    client: ClientSurface
    observer: ClientSurface


@pytest.fixture(params=["stdio", "unix", "grpc"])
async def clients(
    request: pytest.FixtureRequest, host: UserHost, run_dir: Path, tmp_path: Path
) -> AsyncIterator[Clients]:
    """The transport under test: a spawned host process on stdio (its observer on the same process's Unix
    socket), or the in-process `host` on its Unix socket or gRPC."""
    if request.param == "stdio":
        home, socket = tmp_path / "process-home", run_dir / "observer.sock"
        home.mkdir()
        argv = [sys.executable, "-m", "tests.host.userhost.fixtures.host_with_test_plugin", str(home)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        client = await UserHostClient.spawn([*argv, "--stdio", "--listen", str(socket)], env=env)
        process = client.process
        assert process is not None
        try:
            await until(lambda: socket.exists() or process.returncode is not None, "the host's socket")
            observer = await UserHostClient.connect_unix(socket)
            yield Clients(client, observer)
            await observer.close()
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)  # with --listen, the process runs until SIGTERM
            await client.close()
        assert process.returncode == 0
    elif request.param == "unix":
        unix = await UnixServer.start(host, run_dir / "userhost.sock")
        client = await UserHostClient.connect_unix(unix.path)
        observer = await UserHostClient.connect_unix(unix.path)
        try:
            yield Clients(client, observer)
        finally:
            await client.close()
            await observer.close()
            await unix.close()
    else:
        served = await GrpcServer.start(host, f"unix:{run_dir / 'grpc.sock'}")
        client_grpc = await UserHostGrpcClient.connect(served.address)
        observer_grpc = await UserHostGrpcClient.connect(served.address)
        try:
            yield Clients(client_grpc, observer_grpc)
        finally:
            await client_grpc.close()
            await observer_grpc.close()
            await served.close()


async def cancel_when_in_flight(client: ClientSurface, request_id: str) -> None:
    """Cancel the call `request_id` once the host has it: `cancelled` is false until then (on gRPC the call
    and its cancel travel on separate streams, so the cancel may arrive first)."""
    deadline = time.monotonic() + DEADLINE
    while not (await client.plugin_client_cancel(PluginClientCancelParams(id=request_id))).cancelled:
        assert time.monotonic() < deadline, f"call {request_id} never came in flight"
        await asyncio.sleep(0.02)


async def test_one_scenario_over_every_transport(clients: Clients) -> None:
    client, observer = clients.client, clients.observer
    init = await client.initialize()
    assert init.to_wire() == EXPECTED_INIT
    assert (await observer.initialize()).to_wire() == EXPECTED_INIT

    result = await client.plugin_call("wuu.test", "agents.main_session", AgentsMainSessionParams())
    assert isinstance(result, AgentsMainSessionResult) and result.session_id == "main"

    text = "Bonjour, wuu ✓"
    user_input = UserInput(client_input_id="in-1", request_id="req-1", text=text)
    sent = await client.plugin_call(
        "wuu.test", "agents.send", AgentsSendParams(session_id="main"), user_input=user_input
    )
    assert isinstance(sent, AgentsSendResult)
    assert sent.receipt.text_sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert (sent.receipt.client_input_id, sent.receipt.request_id) == ("in-1", "req-1")

    with pytest.raises(UserHostError) as caught:
        await client.plugin_call("wuu.nope", "agents.main_session", AgentsMainSessionParams())
    assert caught.value.code.value == "plugin_not_found"
    missing = await client.request(
        "plugin/client/request", {"plugin_id": "wuu.nope", "method": "agents.main_session", "params": {}}
    )
    assert missing["error"]["code"] == -32000 and missing["error"]["data"] == {"code": "plugin_not_found"}

    # An unexpected failure is `internal` with an error id; the client learns nothing of the host's files.
    failed = await client.request(
        "plugin/client/request",
        {"plugin_id": "wuu.test", "method": "agents.history.search", "params": FAIL},
    )
    assert failed["error"]["code"] == -32603 and failed["error"]["data"] == {"code": "internal"}
    assert INTERNAL_MESSAGE.fullmatch(failed["error"]["message"]), failed["error"]["message"]

    params = {"plugin_id": "wuu.test", "method": "agents.history.search", "params": SLEEP}
    slow = asyncio.create_task(client.request("plugin/client/request", params, request_id="slow-1"))
    await cancel_when_in_flight(client, "slow-1")
    answer = await asyncio.wait_for(slow, DEADLINE)
    assert answer["id"] == "slow-1" and answer["error"]["data"] == {"code": "cancelled"}

    react = AgentsReactParams(
        session_id="main", message_seq=7, emoji="👍", expected_revision=0, request_id="r1"
    )
    await client.plugin_call("wuu.test", "agents.react", react)
    notice = await asyncio.wait_for(anext(observer.notifications()), DEADLINE)
    assert (notice.plugin_id, notice.session_id, notice.message_seqs) == ("wuu.test", "main", [7])
    assert notice.graph_generation == init.graph_generation

    assert (await client.shutdown(UserHostShutdownParams())).to_wire() == {}

    async def drain() -> None:
        async for _ in client.notifications():
            pass  # its own reaction's notice may be queued before the end

    await asyncio.wait_for(drain(), DEADLINE)  # the host closed this transport
    assert client.lost is not None
    with pytest.raises(ConnectionLost):
        await client.plugin_call("wuu.test", "agents.main_session", AgentsMainSessionParams())
    # The other client is unaffected.
    again = await observer.plugin_call("wuu.test", "agents.main_session", AgentsMainSessionParams())
    assert isinstance(again, AgentsMainSessionResult)
