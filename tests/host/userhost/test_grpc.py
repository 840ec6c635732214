"""The user host over gRPC, against the rules of the UserHost service comment
(spec/proto/wuu/userhost/v1/userhost.proto): a real grpc.aio server, real channels, raw generated stubs
where the wire matters (metadata, status codes, `grpc-status-details-bin`), the project's client elsewhere.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from google.rpc import status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.helpers import DEADLINE, until
from tests.host.userhost.conftest import Connect, GrpcConnect
from wuu.generated.catalog import USERHOST_MAX_CLIENT_TRANSPORTS, USERHOST_MAX_FRAME_BYTES
from wuu.generated.models import (
    AgentsHistorySearchParams,
    AgentsHistorySearchResult,
    AgentsReactParams,
    PluginClientInvalidateParams,
    UserHostShutdownParams,
)
from wuu.generated.pb.wuu.userhost.v1 import userhost_pb2
from wuu.generated.pb.wuu.userhost.v1.userhost_pb2_grpc import UserHostStub
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.address import GrpcAddressError, HttpAddress
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.grpc_client import UserHostGrpcClient
from wuu.host.userhost.grpc_service import GrpcServer
from wuu.host.userhost.grpc_wire import MESSAGE_OPTIONS
from wuu.host.userhost.http import HttpServer
from wuu.host.userhost.tokens import TOKENS_FILE, TokenStore
from wuu.host.userhost.unix import SocketInUse

SERVICE = "wuu.userhost.v1.UserHost"
CONNECTION = "wuu-connection"
RPC_ID = "wuu-rpc-id"
DETAILS = "grpc-status-details-bin"
S = grpc.StatusCode
# The service comment's table, written out here so that a change on either side fails a test.
STATUS_OF: dict[str, grpc.StatusCode] = {
    "parse_error": S.INVALID_ARGUMENT,
    "invalid_request": S.INVALID_ARGUMENT,
    "invalid_params": S.INVALID_ARGUMENT,
    "unsupported_method": S.UNIMPLEMENTED,
    "unsupported_protocol_version": S.UNIMPLEMENTED,
    "internal": S.INTERNAL,
    "too_many_clients": S.RESOURCE_EXHAUSTED,
    "plugin_not_found": S.NOT_FOUND,
    "not_found": S.NOT_FOUND,
    "permission_denied": S.PERMISSION_DENIED,
    "graph_generation_changed": S.ABORTED,
    "stale_revision": S.ABORTED,
    "request_id_conflict": S.ALREADY_EXISTS,
    "question_already_decided": S.ALREADY_EXISTS,
    "cancelled": S.CANCELLED,
}
# JsonRpcError.code of each code (envelope.schema.json); every other code is -32000.
NUMBER_OF = {
    "parse_error": -32700,
    "invalid_request": -32600,
    "unsupported_method": -32601,
    "invalid_params": -32602,
    "internal": -32603,
}
CODE_PREFIX = "USER_HOST_ERROR_CODE_"
USERHOST_CLI = Path(sys.executable).parent / "wuu-userhost"


# --- the wire --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A failed call as the wire shows it: the gRPC status code and the JsonRpcError of its details."""

    status: grpc.StatusCode
    number: int
    code: str
    """`data.code` as the spec's string (`not_initialized`)."""
    field: str | None

    def check(self, code: str, field: str | None = None) -> None:
        """The error is `code`, with the status code and JSON-RPC number the spec gives it."""
        assert (self.code, self.status, self.number, self.field) == (
            code,
            STATUS_OF.get(code, S.FAILED_PRECONDITION),
            NUMBER_OF.get(code, -32000),
            field,
        )


def failure_of(error: grpc.aio.AioRpcError) -> Failure:
    """Read the JsonRpcError out of `grpc-status-details-bin` by hand (not with the project's reader)."""
    details = [value for key, value in error.trailing_metadata() or () if key == DETAILS]
    assert len(details) == 1, f"{error.code()}: {error.details()} has no {DETAILS}"
    status = status_pb2.Status.FromString(details[0])
    assert status.code == error.code().value[0]
    assert len(status.details) == 1 and status.details[0].Is(userhost_pb2.JsonRpcError.DESCRIPTOR)
    message = userhost_pb2.JsonRpcError()
    status.details[0].Unpack(message)
    name = userhost_pb2.UserHostErrorCode.Name(message.data.code)
    field = message.data.field if message.data.HasField("field") else None
    return Failure(error.code(), message.code, name.removeprefix(CODE_PREFIX).lower(), field)


async def fails(call: Awaitable[Any]) -> Failure:
    """The failure of a call that must fail with a JsonRpcError."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return failure_of(caught.value)


def meta(connection: str | None = None, rpc_id: str | None = None) -> tuple[tuple[str, str], ...]:
    """Request metadata: the connection's name and the call's `wuu-rpc-id` (JSON text), each if given."""
    pairs = []
    if connection is not None:
        pairs.append((CONNECTION, connection))
    if rpc_id is not None:
        pairs.append((RPC_ID, rpc_id))
    return tuple(pairs)


def init_params(version: int = 1) -> userhost_pb2.UserHostInitializeParams:
    return userhost_pb2.UserHostInitializeParams(
        protocol_version=version, client_info=userhost_pb2.UserHostClientInfo(name="raw", version="1")
    )


async def initialize(stub: UserHostStub, connection: str | None = None) -> str:
    """Initialize; the `wuu-connection` name of the connection it opened."""
    call = stub.Initialize(init_params(), metadata=meta(connection))
    result = await call
    assert result.user_space_id == "local" and [p.plugin_id for p in result.plugins] == ["wuu.test"]
    names = [value for key, value in await call.initial_metadata() if key == CONNECTION]
    assert len(names) == 1 and names[0]
    name: str = names[0]
    return name


def plugin_request(
    method: str, params: dict[str, Any], **fields: Any
) -> userhost_pb2.PluginClientRequestParams:
    struct = struct_pb2.Struct()
    struct.update(params)
    fields.setdefault("plugin_id", "wuu.test")
    return userhost_pb2.PluginClientRequestParams(method=method, params=struct, **fields)


def search(query: str, **fields: Any) -> userhost_pb2.PluginClientRequestParams:
    """`agents.history.search` of the test plugin: `sleep:S`, `admit:NAME:S`, `fail`, or a plain answer."""
    return plugin_request("agents.history.search", {"session_id": "main", "query": query}, **fields)


def react_params(seq: int) -> dict[str, Any]:
    """`agents.react` params of message `seq`: the test plugin notifies the graph's connections of it."""
    return {
        "session_id": "main",
        "message_seq": seq,
        "emoji": "👍",
        "expected_revision": 0,
        "request_id": f"r{seq}",
    }


def react(seq: int) -> userhost_pb2.PluginClientRequestParams:
    return plugin_request("agents.react", react_params(seq))


def cancel(request_id: int | str) -> userhost_pb2.PluginClientCancelParams:
    value = struct_pb2.Value()
    if isinstance(request_id, int):
        value.number_value = request_id
    else:
        value.string_value = request_id
    return userhost_pb2.PluginClientCancelParams(id=value)


def result_json(result: userhost_pb2.PluginClientRequestResult) -> dict[str, Any]:
    value: dict[str, Any] = json_format.MessageToDict(result.result)
    return value


@pytest.fixture
async def channel(grpc_server: GrpcServer) -> AsyncIterator[grpc.aio.Channel]:
    """A raw channel to the host's gRPC socket."""
    opened = grpc.aio.insecure_channel(grpc_server.address.target, options=MESSAGE_OPTIONS)
    yield opened
    await opened.close()


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> UserHostStub:
    """The generated stub on the raw channel."""
    return UserHostStub(channel)


def in_flight(server: GrpcServer, connection: str, request_id: int | str) -> Callable[[], bool]:
    """Whether the host has the call `request_id` of `connection` in flight (a predicate to poll)."""
    return lambda: (
        connection in server.connections and server.connections[connection].session.in_flight(request_id)
    )


# --- connections -----------------------------------------------------------------------------------------


async def test_initialize_names_the_connection_and_later_calls_carry_it(
    stub: UserHostStub, host: UserHost
) -> None:
    first, second = await initialize(stub), await initialize(stub)
    assert first != second and host.clients == 2  # one channel, two connections
    for name in (first, second):
        result = await stub.PluginClientRequest(
            plugin_request("agents.main_session", {}), metadata=meta(name)
        )
        assert result_json(result) == {"session_id": "main"}


async def test_a_call_without_a_live_connection_name_is_not_initialized(
    stub: UserHostStub, host: UserHost
) -> None:
    main_session = plugin_request("agents.main_session", {})
    (await fails(stub.PluginClientRequest(main_session))).check("not_initialized")
    (await fails(stub.PluginClientRequest(main_session, metadata=meta("no-such-connection")))).check(
        "not_initialized"
    )
    (await fails(stub.Shutdown(userhost_pb2.UserHostShutdownParams()))).check("not_initialized")
    stream = stub.PluginClientInvalidate(empty_pb2.Empty())
    (await fails(stream.read())).check("not_initialized")
    name = await initialize(stub)
    await stub.Shutdown(userhost_pb2.UserHostShutdownParams(), metadata=meta(name))
    await until(lambda: host.clients == 0, "the shut-down connection to detach")
    (await fails(stub.PluginClientRequest(main_session, metadata=meta(name)))).check("not_initialized")


async def test_initialize_twice_on_a_connection_is_already_initialized(
    stub: UserHostStub, host: UserHost
) -> None:
    name = await initialize(stub)
    (await fails(stub.Initialize(init_params(), metadata=meta(name)))).check("already_initialized")
    assert host.clients == 1
    result = await stub.PluginClientRequest(plugin_request("agents.main_session", {}), metadata=meta(name))
    assert result_json(result) == {"session_id": "main"}


async def test_a_failed_initialize_opens_no_connection(stub: UserHostStub, host: UserHost) -> None:
    call = stub.Initialize(init_params(version=2))
    (await fails(call)).check("unsupported_protocol_version")
    assert [key for key, _ in await call.initial_metadata() if key == CONNECTION] == []
    assert host.clients == 0


# --- the error table -------------------------------------------------------------------------------------

Case = Callable[[UserHostStub, UserHost, str], Awaitable[Any]]


def after_a_new_generation(stub: UserHostStub, host: UserHost, connection: str) -> Awaitable[Any]:
    """A plugin call of a connection whose captured graph the host has replaced since its Initialize."""
    host.replace_plugins(host.graph.plugins.values())
    return stub.PluginClientRequest(search("x"), metadata=meta(connection))


ERROR_CASES: list[tuple[str, str | None, Case]] = [
    ("invalid_params", "user_input", lambda s, h, c: s.PluginClientRequest(
        plugin_request("agents.send", {"session_id": "main"}), metadata=meta(c))),
    # An enum left UNSPECIFIED stands for no JSON value: the gRPC transport's own invalid_params.
    ("invalid_params", None, lambda s, h, c: s.PushRegister(
        userhost_pb2.PushRegisterParams(app_id="app", token="t"), metadata=meta(c))),
    ("unsupported_method", None, lambda s, h, c: s.PluginClientRequest(
        plugin_request("agents.reactions", {"session_id": "main", "message_seqs": [1]}), metadata=meta(c))),
    ("internal", None, lambda s, h, c: s.PluginClientRequest(search("fail"), metadata=meta(c))),
    ("plugin_not_found", None, lambda s, h, c: s.PluginClientRequest(
        search("x", plugin_id="wuu.nope"), metadata=meta(c))),
    ("plugin_fingerprint_mismatch", None, lambda s, h, c: s.PluginClientRequest(
        search("x", plugin_fingerprint="other"), metadata=meta(c))),
    ("not_found", None, lambda s, h, c: s.UserQuestionAnswer(
        userhost_pb2.UserQuestionAnswerParams(question_id="q1", request_id="r1", text="yes"), metadata=meta(c))),
    ("permission_denied", None, lambda s, h, c: s.PushRegister(
        userhost_pb2.PushRegisterParams(provider=userhost_pb2.PUSH_PROVIDER_APNS, app_id="app", token="t"),
        metadata=meta(c))),
    ("graph_generation_changed", None, lambda s, h, c: after_a_new_generation(s, h, c)),
    ("invalid_request", None, lambda s, h, c: s.PluginClientRequest(search("x"), metadata=meta(c, "7.5"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("code", "field", "case"), ERROR_CASES, ids=[f"{code}-{i}" for i, (code, _, _) in enumerate(ERROR_CASES)]
)
async def test_an_error_has_its_status_code_and_json_rpc_error(
    stub: UserHostStub, host: UserHost, code: str, field: str | None, case: Case
) -> None:
    name = await initialize(stub)
    (await fails(case(stub, host, name))).check(code, field)


async def test_the_project_client_reads_the_same_error(grpc_connect: GrpcConnect) -> None:
    client = await grpc_connect()
    await client.initialize()
    with pytest.raises(UserHostError) as caught:
        await client.plugin_call(
            "wuu.nope", "agents.history.search", AgentsHistorySearchParams(session_id="main", query="x")
        )
    assert caught.value.code.value == "plugin_not_found"


# --- ids and cancellation --------------------------------------------------------------------------------


async def test_cancel_names_a_call_by_its_rpc_id(stub: UserHostStub, grpc_server: GrpcServer) -> None:
    name, other = await initialize(stub), await initialize(stub)
    integer = stub.PluginClientRequest(search("sleep:30"), metadata=meta(name, "7"))
    text = stub.PluginClientRequest(search("sleep:30"), metadata=meta(name, '"7"'))
    await until(in_flight(grpc_server, name, 7), "call 7 in flight")
    await until(in_flight(grpc_server, name, "7"), 'call "7" in flight')
    # Ids are connection-local: another connection cannot name them.
    assert not (await stub.PluginClientCancel(cancel(7), metadata=meta(other))).cancelled
    assert (await stub.PluginClientCancel(cancel(7), metadata=meta(name))).cancelled
    (await fails(integer)).check("cancelled")
    assert in_flight(grpc_server, name, "7")()  # the string id "7" is another call
    assert not (await stub.PluginClientCancel(cancel(7), metadata=meta(name))).cancelled  # already answered
    assert (await stub.PluginClientCancel(cancel("7"), metadata=meta(name))).cancelled
    (await fails(text)).check("cancelled")


@pytest.mark.parametrize(
    "rpc_id", ["7.5", "call-7", "[7]", "null", '""', "9007199254740992", '"' + "x" * 257 + '"', "{}"]
)
async def test_a_malformed_rpc_id_is_an_invalid_request(stub: UserHostStub, rpc_id: str) -> None:
    name = await initialize(stub)
    (await fails(stub.PluginClientRequest(search("x"), metadata=meta(name, rpc_id)))).check("invalid_request")


async def test_an_id_in_flight_cannot_be_reused(stub: UserHostStub, grpc_server: GrpcServer) -> None:
    name = await initialize(stub)
    first = stub.PluginClientRequest(search("sleep:30"), metadata=meta(name, '"dup"'))
    await until(in_flight(grpc_server, name, "dup"), "the first call in flight")
    (await fails(stub.PluginClientRequest(search("x"), metadata=meta(name, '"dup"')))).check(
        "invalid_request"
    )
    assert (await stub.PluginClientCancel(cancel("dup"), metadata=meta(name))).cancelled
    (await fails(first)).check("cancelled")
    # Once answered, the id is free again.
    result = await stub.PluginClientRequest(search("x"), metadata=meta(name, '"dup"'))
    assert result_json(result) == {"messages": [], "next_page_token": None}


async def test_cancelling_the_grpc_call_stops_the_host_side_work(
    stub: UserHostStub, grpc_server: GrpcServer, host: UserHost
) -> None:
    name = await initialize(stub)
    call = stub.PluginClientRequest(search("sleep:30"), metadata=meta(name, "11"))
    await until(in_flight(grpc_server, name, 11), "the sleeping call in flight")
    call.cancel()
    # The handler's 30 s sleep is stopped, not left to run: the call leaves the host's calls in flight.
    await until(lambda: not in_flight(grpc_server, name, 11)(), "the host to drop the cancelled call")
    assert not (await stub.PluginClientCancel(cancel(11), metadata=meta(name))).cancelled
    await asyncio.wait_for(host.wait_idle(), DEADLINE)
    assert host.clients == 1  # the connection itself goes on


# --- notifications ---------------------------------------------------------------------------------------


async def test_a_notification_reaches_every_other_connection_of_the_generation(
    stub: UserHostStub, grpc_server: GrpcServer, grpc_connect: GrpcConnect
) -> None:
    reactor = await grpc_connect()
    await reactor.initialize()
    streaming, late = await initialize(stub), await initialize(stub)
    early_stream = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(streaming))
    await until(lambda: grpc_server.connections[streaming].streaming, "the stream to open")
    await stub.PluginClientRequest(react(7), metadata=meta(reactor.connection_id))
    notice = await asyncio.wait_for(early_stream.read(), DEADLINE)
    assert (notice.plugin_id, list(notice.message_seqs)) == ("wuu.test", [7])
    assert notice.topic == userhost_pb2.PLUGIN_INVALIDATION_TOPIC_REACTIONS and notice.session_id == "main"
    # Queued from Initialize on: a stream opened after the notice still gets it.
    late_stream = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(late))
    notice = await asyncio.wait_for(late_stream.read(), DEADLINE)
    assert list(notice.message_seqs) == [7] and notice.graph_generation == 1
    early_stream.cancel()
    late_stream.cancel()


async def test_a_notification_skips_connections_of_another_generation(
    stub: UserHostStub, host: UserHost
) -> None:
    old = await initialize(stub)
    host.replace_plugins(host.graph.plugins.values())
    new = await initialize(stub)
    await stub.PluginClientRequest(react(2), metadata=meta(new))  # a generation-2 notice
    host.notify(host_notice(generation=1, seq=1))
    stream = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(old))
    # The generation-1 notice is the first the old connection sees: the generation-2 one never reached it.
    notice = await asyncio.wait_for(stream.read(), DEADLINE)
    assert (notice.graph_generation, list(notice.message_seqs)) == (1, [1])
    stream.cancel()


def host_notice(*, generation: int, seq: int) -> PluginClientInvalidateParams:
    """A `reactions` notice of message `seq` for the connections of graph `generation`."""
    return PluginClientInvalidateParams(
        graph_generation=generation,
        plugin_id="wuu.test",
        topic="reactions",
        session_id="main",
        message_seqs=[seq],
    )


async def test_a_second_stream_on_a_connection_is_an_invalid_request(
    stub: UserHostStub, grpc_server: GrpcServer
) -> None:
    name = await initialize(stub)
    first = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(name))
    await until(lambda: grpc_server.connections[name].streaming, "the first stream to open")
    second = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(name))
    (await fails(second.read())).check("invalid_request")
    await stub.PluginClientRequest(react(3), metadata=meta(name))
    assert list((await asyncio.wait_for(first.read(), DEADLINE)).message_seqs) == [3]
    first.cancel()


async def test_ending_the_stream_detaches_the_client(
    stub: UserHostStub, grpc_server: GrpcServer, grpc_connect: GrpcConnect, host: UserHost
) -> None:
    client = await grpc_connect()
    await client.initialize()
    name = await initialize(stub)
    stream = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(name))
    await until(lambda: grpc_server.connections[name].streaming, "the stream to open")
    assert host.clients == 2
    stream.cancel()
    await until(lambda: host.clients == 1, "the raw stream's end to detach its client")
    (await fails(stub.PluginClientRequest(search("x"), metadata=meta(name)))).check("not_initialized")
    await client.close()
    await until(lambda: host.clients == 0, "the client's close to detach it")
    assert grpc_server.connections == {}


async def test_a_connection_that_falls_behind_on_notifications_ends(
    host: UserHost, run_dir: Path, connect: Connect
) -> None:
    # A queue bound below one notice: the first notice overflows every gRPC connection of this server.
    served = await GrpcServer.start(host, f"unix:{run_dir / 'slow.sock'}", max_queued_bytes=1)
    channel = grpc.aio.insecure_channel(served.address.target, options=MESSAGE_OPTIONS)
    stub = UserHostStub(channel)
    try:
        streaming, quiet = await initialize(stub), await initialize(stub)
        stream = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(streaming))
        await until(lambda: served.connections[streaming].streaming, "the stream to open")
        reactor = await connect()  # on the Unix socket, whose queue is not bounded so tightly
        await reactor.initialize()
        assert host.clients == 3
        await reactor.plugin_call(
            "wuu.test", "agents.react", AgentsReactParams.model_validate(react_params(5))
        )
        (await fails(stream.read())).check("internal")
        await until(lambda: host.clients == 1, "both gRPC connections to be disconnected")
        (await fails(stub.PluginClientRequest(search("x"), metadata=meta(quiet)))).check("not_initialized")
        assert reactor.lost is None
    finally:
        await channel.close()
        await served.close()


# --- the end of a connection -----------------------------------------------------------------------------


async def test_shutdown_detaches_and_ends_the_stream(stub: UserHostStub, host: UserHost) -> None:
    name = await initialize(stub)
    stream = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(name))
    result = await stub.Shutdown(userhost_pb2.UserHostShutdownParams(), metadata=meta(name))
    assert result == userhost_pb2.UserHostShutdownResult()
    assert await asyncio.wait_for(stream.read(), DEADLINE) == grpc.aio.EOF
    assert await stream.code() == S.OK
    assert host.clients == 0


async def test_the_idle_timeout_ends_a_connection_without_stream_or_call(
    host: UserHost, run_dir: Path
) -> None:
    served = await GrpcServer.start(host, f"unix:{run_dir / 'idle.sock'}", idle_timeout=0.3)
    channel = grpc.aio.insecure_channel(served.address.target, options=MESSAGE_OPTIONS)
    stub = UserHostStub(channel)
    try:
        idle = await initialize(stub)
        streaming = await initialize(stub)
        stream = stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=meta(streaming))
        await until(lambda: served.connections[streaming].streaming, "the stream to open")
        busy = await initialize(stub)
        # A call in flight longer than the timeout keeps its connection.
        answer = await stub.PluginClientRequest(search("sleep:0.8"), metadata=meta(busy))
        assert result_json(answer)["messages"] == []
        later = await initialize(stub)  # opened after `streaming`: it expires after it would have
        await until(lambda: later not in served.connections, "the last idle connection to expire")
        assert idle not in served.connections and busy not in served.connections
        assert set(served.connections) == {streaming} and host.clients == 1
        (await fails(stub.PluginClientRequest(search("x"), metadata=meta(idle)))).check("not_initialized")
        result = await stub.PluginClientRequest(
            plugin_request("agents.main_session", {}), metadata=meta(streaming)
        )
        assert result_json(result) == {"session_id": "main"}
        stream.cancel()
    finally:
        await channel.close()
        await served.close()


async def test_admitted_work_completes_after_the_client_has_gone(
    grpc_connect: GrpcConnect, host: UserHost
) -> None:
    client = await grpc_connect()
    await client.initialize()
    result = await client.plugin_call(
        "wuu.test",
        "agents.history.search",
        AgentsHistorySearchParams(session_id="main", query="admit:late:1"),
    )
    assert isinstance(result, AgentsHistorySearchResult)
    await client.shutdown(UserHostShutdownParams())
    await until(lambda: host.clients == 0, "the client to detach")
    written = host.layout.state / "late"
    assert not written.exists()  # the work is still running, with no client left
    await until(written.exists, "the admitted work to write its file")
    assert written.read_text() == "done"


# --- the client limit and message sizes -----------------------------------------------------------------


async def test_the_client_limit_is_shared_with_the_unix_socket(
    connect: Connect, grpc_connect: GrpcConnect, stub: UserHostStub, host: UserHost
) -> None:
    for _ in range(10):
        await (await connect()).initialize()
    grpc_clients = [await grpc_connect() for _ in range(USERHOST_MAX_CLIENT_TRANSPORTS - 10)]
    for client in grpc_clients:
        await client.initialize()
    assert host.clients == USERHOST_MAX_CLIENT_TRANSPORTS
    call = stub.Initialize(init_params())
    (await fails(call)).check("too_many_clients")
    assert [key for key, _ in await call.initial_metadata() if key == CONNECTION] == []
    assert host.clients == USERHOST_MAX_CLIENT_TRANSPORTS
    await grpc_clients[0].close()
    await until(lambda: host.clients == USERHOST_MAX_CLIENT_TRANSPORTS - 1, "a gRPC client to leave")
    await initialize(stub)  # the freed place can be taken over gRPC again


async def test_a_maximal_user_input_goes_through(stub: UserHostStub) -> None:
    name = await initialize(stub)
    text = "😀" * 16_000  # 64,000 UTF-8 bytes: the longest text
    size = 20_971_520 // 16  # 16 attachments of 20 MiB in all: the most bytes
    attachments = []
    for index in range(16):
        data = bytes([index]) * size
        attachments.append(
            userhost_pb2.UserInputAttachment(
                filename=f"part-{index}.bin",
                media_type="application/octet-stream",
                size=size,
                sha256=hashlib.sha256(data).hexdigest(),
                data=data,
            )
        )
    user_input = userhost_pb2.UserInput(
        client_input_id="in-1", request_id="req-1", text=text, attachments=attachments
    )
    request = plugin_request("agents.send", {"session_id": "main"}, user_input=user_input)
    assert len(text.encode()) == 64_000 and request.ByteSize() > 20 * 1024 * 1024
    result = result_json(await stub.PluginClientRequest(request, metadata=meta(name), timeout=DEADLINE))
    receipt = result["receipt"]
    assert receipt["text_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert (receipt["client_input_id"], receipt["request_id"]) == ("in-1", "req-1")


async def test_a_message_over_the_limit_is_refused_and_the_server_goes_on(grpc_server: GrpcServer) -> None:
    # A channel that sends more than the host admits: the refusal is the host's.
    big = grpc.aio.insecure_channel(
        grpc_server.address.target, options=[("grpc.max_send_message_length", 2 * USERHOST_MAX_FRAME_BYTES)]
    )
    try:
        stub = UserHostStub(big)
        name = await initialize(stub)
        request = search("x" * USERHOST_MAX_FRAME_BYTES)
        assert request.ByteSize() > USERHOST_MAX_FRAME_BYTES
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.PluginClientRequest(request, metadata=meta(name))
        assert caught.value.code() == S.RESOURCE_EXHAUSTED
        result = await stub.PluginClientRequest(
            plugin_request("agents.main_session", {}), metadata=meta(name)
        )
        assert result_json(result) == {"session_id": "main"}
    finally:
        await big.close()


# --- addresses -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0:50051",
        "[::]:50051",
        "192.168.1.10:50051",
        "10.0.0.1:1",
        "localhost:50051",
        "example.com:443",
        "unix:relative/grpc.sock",
        "127.0.0.1",
        "127.0.0.1:65536",
        "127.0.0.1:port",
    ],
)
async def test_only_a_unix_socket_or_loopback_is_served(host: UserHost, address: str) -> None:
    with pytest.raises(GrpcAddressError):
        await GrpcServer.start(host, address)
    with pytest.raises(GrpcAddressError):
        await UserHostGrpcClient.connect(address)


async def test_a_loopback_server_on_port_0_reports_its_port(host: UserHost) -> None:
    tokens = TokenStore(host.layout.state / TOKENS_FILE)
    served = await GrpcServer.start(host, "127.0.0.1:0", tokens=tokens)
    try:
        assert served.address.host == "127.0.0.1" and 0 < served.address.port <= 65535
        token = tokens.create("desk")
        client = await UserHostGrpcClient.connect(f"127.0.0.1:{served.address.port}", token=token)
        try:
            assert (await client.initialize()).user_space_id == "local"
            assert host.clients == 1
        finally:
            await client.close()
    finally:
        await served.close()


async def test_a_tcp_address_needs_the_token_store_and_a_socket_takes_none(
    host: UserHost, run_dir: Path
) -> None:
    tokens = TokenStore(host.layout.state / TOKENS_FILE)
    with pytest.raises(GrpcAddressError, match="token store"):
        await GrpcServer.start(host, "127.0.0.1:0")
    with pytest.raises(GrpcAddressError, match="token store"):
        await GrpcServer.start(host, f"unix:{run_dir / 'grpc.sock'}", tokens=tokens)


def bearer(token: str) -> tuple[str, str]:
    return ("authorization", f"Bearer {token}")


async def unauthenticated(call: Awaitable[Any]) -> None:
    """The call fails with UNAUTHENTICATED and carries nothing else: no JsonRpcError, no binding."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == S.UNAUTHENTICATED
    assert [key for key, _ in caught.value.trailing_metadata() or ()] == []
    assert caught.value.details() == "a valid bearer token is required"


async def test_every_call_on_tcp_needs_a_valid_bearer_token(host: UserHost) -> None:
    """Loopback is no boundary between OS users: a call without a token of the space, with a wrong or
    revoked one, to any method of any service (health and unknown ones included), fails UNAUTHENTICATED."""
    tokens = TokenStore(host.layout.state / TOKENS_FILE)
    desk, phone = tokens.create("desk"), tokens.create("phone")
    served = await GrpcServer.start(host, "127.0.0.1:0", tokens=tokens)
    channel = grpc.aio.insecure_channel(served.address.target, options=MESSAGE_OPTIONS)
    stub, health = UserHostStub(channel), health_pb2_grpc.HealthStub(channel)
    try:
        for metadata in [(), (bearer(desk + "x"),), (("authorization", desk),), (bearer("wuu_" + "A" * 43),)]:
            await unauthenticated(stub.Initialize(init_params(), metadata=metadata))
            await unauthenticated(stub.Shutdown(userhost_pb2.UserHostShutdownParams(), metadata=metadata))
            await unauthenticated(stub.PluginClientInvalidate(empty_pb2.Empty(), metadata=metadata).read())
            await unauthenticated(health.Check(health_pb2.HealthCheckRequest(), metadata=metadata))
            unknown = channel.unary_unary(f"/{SERVICE}/Nope")
            await unauthenticated(unknown(b"", metadata=metadata))
        assert host.clients == 0
        checked = await health.Check(health_pb2.HealthCheckRequest(), metadata=(bearer(desk),))
        assert checked.status == health_pb2.HealthCheckResponse.SERVING

        call = stub.Initialize(init_params(), metadata=(bearer(desk),))
        await call
        name = dict(await call.initial_metadata())[CONNECTION]
        assert host.clients == 1
        # A connection belongs to the token that opened it: another token cannot name it.
        (
            await fails(
                stub.Shutdown(
                    userhost_pb2.UserHostShutdownParams(), metadata=((CONNECTION, name), bearer(phone))
                )
            )
        ).check("not_initialized")
        assert host.clients == 1
        # Revoking the token ends its connection, and the token is refused from then on.
        tokens.revoke("desk")
        await until(lambda: host.clients == 0, "the revoked token's connection to end")
        await unauthenticated(stub.Initialize(init_params(), metadata=(bearer(desk),)))
    finally:
        await channel.close()
        await served.close()


async def test_a_revocation_reaches_every_listener_of_the_token_file(host: UserHost) -> None:
    """gRPC and HTTP served from one token store: revoking a token ends its gRPC connection and its HTTP
    event stream alike (each listener reads the file for itself)."""
    tokens = TokenStore(host.layout.state / TOKENS_FILE)
    token = tokens.create("desk")
    served = await GrpcServer.start(host, "127.0.0.1:0", tokens=tokens)
    http = await HttpServer.start(host, HttpAddress("127.0.0.1", 0), tokens)
    client = await UserHostGrpcClient.connect(served.address, token=token)
    try:
        await client.initialize()
        async with aiohttp.ClientSession() as web:
            headers = {"Authorization": f"Bearer {token}"}
            async with web.get(f"http://{http.address}/v1/events", headers=headers) as stream:
                assert stream.status == 200
                await until(lambda: host.clients == 2 and http.streams == 1, "both transports to attach")
                tokens.revoke("desk")
                await until(lambda: host.clients == 0 and http.streams == 0, "both transports to end")
    finally:
        await client.close()
        await http.close()
        await served.close()


async def test_a_token_file_that_cannot_be_read_refuses_without_details(host: UserHost) -> None:
    tokens = TokenStore(host.layout.state / TOKENS_FILE)
    token = tokens.create("desk")
    tokens.path.unlink()
    tokens.path.symlink_to(tokens.path)  # a loop: stat fails with ELOOP
    served = await GrpcServer.start(host, "127.0.0.1:0", tokens=tokens)
    channel = grpc.aio.insecure_channel(served.address.target, options=MESSAGE_OPTIONS)
    try:
        await unauthenticated(UserHostStub(channel).Initialize(init_params(), metadata=(bearer(token),)))
    finally:
        await channel.close()
        await served.close()


async def test_serve_grpc_on_loopback_authenticates_with_the_spaces_tokens(home: Path) -> None:
    """`wuu-userhost serve --grpc 127.0.0.1:0`: the port it logs refuses a call without a token, and serves
    one with a token of `wuu-userhost token create`."""
    binding = ["--home", str(home), "--user-space", "local", "--product-domain", "personal"]
    created = subprocess.run(
        [sys.executable, "-m", "wuu.host.userhost", "token", "create", "--name", "desk", *binding],
        capture_output=True,
        text=True,
        check=True,
    )
    token = created.stdout.strip()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "wuu.host.userhost",
        "serve",
        *binding,
        "--grpc",
        "127.0.0.1:0",
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(DEADLINE):
            while True:
                line = json.loads(await process.stderr.readline())
                if line["message"] == "listening":
                    break
        address = line["address"]
        channel = grpc.aio.insecure_channel(address, options=MESSAGE_OPTIONS)
        try:
            await unauthenticated(UserHostStub(channel).Initialize(init_params()))
        finally:
            await channel.close()
        client = await UserHostGrpcClient.connect(address, token=token)
        try:
            assert (await client.initialize()).user_space_id == "local"
        finally:
            await client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0


async def test_the_unix_socket_is_private_refuses_a_live_host_and_is_removed(
    host: UserHost, run_dir: Path
) -> None:
    path = run_dir / "fresh" / "grpc.sock"
    served = await GrpcServer.start(host, f"unix:{path}")
    try:
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        with pytest.raises(SocketInUse):
            await GrpcServer.start(host, f"unix:{path}")
        assert path.exists()  # the refused start left the live socket alone
    finally:
        await served.close()
    assert not path.exists()
    unix = await UnixServer.start(host, run_dir / "ndjson.sock")
    try:
        with pytest.raises(SocketInUse):  # a live NDJSON host counts too
            await GrpcServer.start(host, f"unix:{run_dir / 'ndjson.sock'}")
    finally:
        await unix.close()
    shared = run_dir / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with pytest.raises(SocketInUse):
        await GrpcServer.start(host, f"unix:{shared / 'grpc.sock'}")


# --- health ----------------------------------------------------------------------------------------------


async def test_health_serves_until_the_server_closes(host: UserHost, run_dir: Path) -> None:
    served = await GrpcServer.start(host, f"unix:{run_dir / 'health.sock'}")
    channel = grpc.aio.insecure_channel(served.address.target)
    health = health_pb2_grpc.HealthStub(channel)
    try:
        for service in ("", SERVICE):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert caught.value.code() == S.NOT_FOUND
        watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        closing = asyncio.create_task(served.close())
        # The watcher learns NOT_SERVING while the server is closing; it then ends its watch.
        last = await asyncio.wait_for(watch.read(), DEADLINE)
        assert last != grpc.aio.EOF and last.status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()
        await asyncio.wait_for(closing, DEADLINE)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=DEADLINE)
        assert caught.value.code() == S.UNAVAILABLE
    finally:
        await channel.close()
        await served.close()


# --- the command line ------------------------------------------------------------------------------------


async def test_the_cli_serves_grpc_until_sigterm(home: Path, run_dir: Path) -> None:
    path = run_dir / "cli.sock"
    argv = ["serve", "--user-space", "local", "--product-domain", "personal", "--home", str(home)]
    process = await asyncio.create_subprocess_exec(
        str(USERHOST_CLI), *argv, "--grpc", f"unix:{path}", stderr=asyncio.subprocess.PIPE
    )
    try:
        await until(lambda: path.exists() or process.returncode is not None, "the CLI's socket")
        assert process.returncode is None
        client = await UserHostGrpcClient.connect(f"unix:{path}")
        try:
            init = await client.initialize()
            assert (init.user_space_id, init.product_domain, init.plugins) == ("local", "personal", [])
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
        finally:
            await client.close()
        assert not path.exists()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_the_cli_refuses_a_non_loopback_grpc_address(home: Path) -> None:
    argv = ["serve", "--user-space", "local", "--product-domain", "personal", "--home", str(home)]
    process = await asyncio.create_subprocess_exec(
        str(USERHOST_CLI), *argv, "--grpc", "0.0.0.0:1", stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), DEADLINE)
    assert process.returncode == 2
    assert b"--grpc" in stderr
    assert not (home / "user-spaces").exists()  # refused before the host wrote anything
