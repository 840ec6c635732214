"""The user host's HTTP binding (host/userhost/http.py) on a real server on 127.0.0.1 with a real token file:
authentication, the transport per token, errors and their statuses, body limits, the event stream, request
ids and cancellation, revocation, and the `token` and `serve --http` commands."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import ssl
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.host.userhost.plugins import FAIL_PATH
from wuu.generated import validators
from wuu.generated.catalog import USERHOST_MAX_CLIENT_TRANSPORTS, USERHOST_MAX_FRAME_BYTES
from wuu.generated.models import (
    HttpErrorResponse,
    PluginClientInvalidateParams,
    PluginInvalidationTopic,
    UserHostErrorCode,
)
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost import http as http_module
from wuu.host.userhost.address import HttpAddress
from wuu.host.userhost.cli import main
from wuu.host.userhost.http import HTTP_STATUS, HttpServer
from wuu.host.userhost.personal import personal
from wuu.host.userhost.tokens import TOKENS_FILE, TokenStore

DEADLINE = 10.0
INITIALIZE = {"protocol_version": 1, "client_info": {"name": "test", "version": "1"}}
Start = Callable[..., Awaitable[HttpServer]]


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds, failing after the deadline."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    while not condition():
        assert loop.time() < end, f"timed out waiting until {what}"
        await asyncio.sleep(0.002)


@pytest.fixture
def tokens(host: UserHost) -> TokenStore:
    return TokenStore(host.layout.state / TOKENS_FILE)


@pytest.fixture
async def start(host: UserHost, tokens: TokenStore) -> AsyncIterator[Start]:
    """Starts HTTP servers of the host on 127.0.0.1 (keyword arguments go to `HttpServer.start`)."""
    servers: list[HttpServer] = []

    async def start_server(**options: Any) -> HttpServer:
        server = await HttpServer.start(host, HttpAddress("127.0.0.1", 0), tokens, **options)
        servers.append(server)
        return server

    yield start_server
    for server in servers:
        await server.close()


@pytest.fixture
async def http(start: Start) -> HttpServer:
    return await start()


@pytest.fixture
async def web() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Caller:
    """Calls the server as one token."""

    def __init__(self, web: aiohttp.ClientSession, address: str, token: str) -> None:
        self.web, self.base, self.token = web, f"http://{address}", token

    async def post(self, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else json.dumps({} if body is None else body).encode()
        async with self.web.post(
            self.base + path, data=data, headers={"Authorization": f"Bearer {self.token}", **headers}
        ) as response:
            raw = await response.read()
            return response.status, json.loads(raw) if raw else None

    async def plugin(self, method: str, params: Any, **body: Any) -> tuple[int, Any]:
        return await self.post(f"/v1/plugins/wuu.test/{method}", {"params": params, **body})

    async def events(self) -> aiohttp.ClientResponse:
        response = await self.web.get(
            self.base + "/v1/events", headers={"Authorization": f"Bearer {self.token}"}
        )
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        return response


@pytest.fixture
def caller(web: aiohttp.ClientSession, http: HttpServer, tokens: TokenStore) -> Callable[[str], Caller]:
    """A caller with a new token of the given name."""
    return lambda name: Caller(web, http.address, tokens.create(name))


def error_code(body: Any) -> str:
    """The code of an error body, which must be the spec's HttpErrorResponse."""
    HttpErrorResponse.model_validate_json(json.dumps(body), strict=True)
    code: str = body["error"]["data"]["code"]
    return code


async def next_event(stream: aiohttp.ClientResponse) -> tuple[str, dict[str, Any]]:
    """The next event of an SSE stream (comments skipped)."""
    event, data = "", ""
    async with asyncio.timeout(DEADLINE):
        while True:
            line = (await stream.content.readline()).decode()
            assert line, "the stream ended"
            if line.startswith("event: "):
                event = line[7:].strip()
            elif line.startswith("data: "):
                data = line[6:].strip()
            elif line == "\n" and event:
                return event, json.loads(data)


async def ended(stream: aiohttp.ClientResponse) -> bool:
    """Read the stream until the server ends it (failing after the deadline); whether it ended cleanly."""
    async with asyncio.timeout(DEADLINE):
        try:
            while await stream.content.readany():
                pass
        except aiohttp.ClientPayloadError:  # ended by a dropped connection
            return False
    return True


def invalidation(host: UserHost, seq: int) -> PluginClientInvalidateParams:
    """A notice of the test plugin's first message `seq` (and 99 more, to make it large)."""
    return PluginClientInvalidateParams(
        graph_generation=host.graph.generation,
        plugin_id="wuu.test",
        topic=PluginInvalidationTopic.REACTIONS,
        session_id="main",
        message_seqs=[seq, *range(10**18, 10**18 + 99)],  # about 2 KB: a socket fills soon
    )


# --- authentication ------------------------------------------------------------------------------------

PATHS = [
    "/v1/rpc/initialize",
    "/v1/plugins/wuu.test/agents.main_session",
    "/v1/events",
    "/v1/nope",
    "/",
    "/x",
]


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
async def test_without_a_valid_token_every_path_is_401_with_an_empty_body_and_nothing_else(
    web: aiohttp.ClientSession, http: HttpServer, tokens: TokenStore, host: UserHost, method: str
) -> None:
    good = tokens.create("phone")
    headers: list[dict[str, str]] = [
        {},
        {"Authorization": ""},
        {"Authorization": f"Basic {good}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer  {good}"},
        {"Authorization": f"Bearer {good} x"},
        {"Authorization": "Bearer wuu_not-the-token"},
        {"Authorization": f"Bearer {good[:-1]}"},
    ]
    for header in headers:
        for path in PATHS:
            async with web.request(
                method, f"http://{http.address}{path}", headers=header, data=b"{}"
            ) as response:
                assert response.status == 401, (header, path)
                assert response.headers["WWW-Authenticate"] == "Bearer"
                assert response.headers["Server"] == "wuu-userhost"  # no versions of Python or aiohttp
                assert await response.read() == b""
    assert host.clients == 0


async def raw_exchange(http: HttpServer, request: bytes) -> bytes:
    """Everything the server answers to `request` on a new connection, until it closes it."""
    host, _, port = http.address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        async with asyncio.timeout(DEADLINE):
            return await reader.read()
    finally:
        writer.close()


async def test_requests_it_cannot_parse_learn_nothing_and_log_nothing(
    http: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A request aiohttp's parser refuses gets its bare status and the connection closes: no body quoting
    the parser, this server's name only, and no log line (an unauthenticated client cannot fill the log);
    a request-target that is no path (`OPTIONS *`) gets 401 like any other."""
    caplog.set_level(logging.DEBUG)
    for request in [
        b"GET /v1/events HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS hello, on plain HTTP
        b"GET /v1/events HTTP/9.9\r\nHost: x\r\n\r\n",
    ]:
        answer = await raw_exchange(http, request)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == b"400", answer
        assert b"\r\nServer: wuu-userhost\r\n" in head and body == b"", answer
    assert [record.getMessage() for record in caplog.records if record.name.startswith("aiohttp")] == []
    answer = await raw_exchange(http, b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 401 "), answer


async def test_a_token_of_another_user_space_is_refused(
    web: aiohttp.ClientSession, http: HttpServer, home: Path
) -> None:
    other = TokenStore.of_space(home, "other", "personal").create("phone")
    status, body = await Caller(web, http.address, other).post("/v1/rpc/initialize", INITIALIZE)
    assert (status, body) == (401, None)


# --- the transport per token ----------------------------------------------------------------------------


async def test_a_token_is_initialized_implicitly_and_initialize_answers_the_same_result(
    caller: Callable[[str], Caller], host: UserHost
) -> None:
    phone = caller("phone")
    assert await phone.plugin("agents.main_session", {}) == (200, {"session_id": "main"})
    assert host.clients == 1
    status, first = await phone.post("/v1/rpc/initialize", INITIALIZE)
    assert status == 200
    assert (first["user_space_id"], first["product_domain"], first["protocol_version"]) == (
        "local",
        "personal",
        1,
    )
    assert [plugin["plugin_id"] for plugin in first["plugins"]] == ["wuu.test"]
    assert await phone.post("/v1/rpc/initialize", INITIALIZE) == (200, first)
    status, body = await phone.post("/v1/rpc/initialize", {**INITIALIZE, "protocol_version": 2})
    assert (status, error_code(body)) == (400, "unsupported_protocol_version")
    assert host.clients == 1


async def test_shutdown_detaches_the_token_and_ends_its_stream_and_its_next_request_attaches_again(
    caller: Callable[[str], Caller], host: UserHost
) -> None:
    phone = caller("phone")
    stream = await phone.events()
    await eventually(lambda: host.clients == 1, "the stream attached the token")
    assert await phone.post("/v1/rpc/shutdown", {}) == (200, {})
    assert await ended(stream)
    await eventually(lambda: host.clients == 0, "shutdown detached the token")
    assert await phone.plugin("agents.main_session", {}) == (200, {"session_id": "main"})
    assert host.clients == 1


async def test_each_token_is_one_of_the_sixteen_client_transports(
    caller: Callable[[str], Caller], host: UserHost, run_dir: Path
) -> None:
    unix = await UnixServer.start(host, run_dir / "userhost.sock")
    sockets = [
        await asyncio.open_unix_connection(str(unix.path)) for _ in range(USERHOST_MAX_CLIENT_TRANSPORTS - 1)
    ]
    try:
        await eventually(lambda: host.clients == 15, "15 socket clients attached")
        first, second = caller("first"), caller("second")
        assert await first.plugin("agents.main_session", {}) == (200, {"session_id": "main"})
        status, body = await second.plugin("agents.main_session", {})
        assert (status, error_code(body)) == (429, "too_many_clients")
        assert await first.post("/v1/rpc/shutdown", {}) == (200, {})
        await eventually(lambda: host.clients == 15, "shutdown freed a transport")
        assert await second.plugin("agents.main_session", {}) == (200, {"session_id": "main"})
    finally:
        for _, writer in sockets:
            writer.close()
        await unix.close()


# --- errors ----------------------------------------------------------------------------------------------

HTTP_MD_STATUSES = {
    "parse_error": 400,
    "invalid_request": 400,
    "unsupported_method": 404,
    "invalid_params": 400,
    "internal": 500,
    "not_initialized": 409,
    "already_initialized": 409,
    "unsupported_protocol_version": 400,
    "too_many_clients": 429,
    "user_host_binding_required": 500,
    "user_host_isolation_required": 500,
    "unknown_isolation_mode": 500,
    "personal_review_legacy_migration_required": 503,
    "graph_generation_changed": 409,
    "plugin_not_found": 404,
    "plugin_fingerprint_mismatch": 409,
    "permission_denied": 403,
    "not_found": 404,
    "stale_revision": 409,
    "request_id_conflict": 409,
    "not_reaction_target": 409,
    "main_session_missing": 404,
    "question_already_decided": 409,
    "input_receipts_unavailable": 503,
    "cancelled": 409,
    "user_host_already_running": 409,
    "user_host_storage_unsafe": 500,
}


def test_every_error_code_has_the_status_of_the_binding() -> None:
    assert {code.value: status for code, status in HTTP_STATUS.items()} == HTTP_MD_STATUSES
    assert set(HTTP_STATUS) == set(UserHostErrorCode)
    spec = validators.bundle()["$defs"]["UserHostErrorCode"]["x-http-status"]
    assert spec == HTTP_MD_STATUSES


async def test_errors_have_their_status_and_the_json_rpc_error_body(
    caller: Callable[[str], Caller], web: aiohttp.ClientSession, http: HttpServer
) -> None:
    phone = caller("phone")
    cases: list[tuple[Awaitable[tuple[int, Any]], int, str]] = [
        (phone.post("/v1/rpc/initialize", b"{not json"), 400, "parse_error"),
        (phone.post("/v1/rpc/initialize", b""), 400, "parse_error"),
        (phone.post("/v1/rpc/initialize", [1]), 400, "invalid_request"),
        (phone.post("/v1/rpc/nope", {}), 404, "unsupported_method"),
        (phone.post("/v1/rpc/coding/thread/start", {}), 404, "unsupported_method"),
        (phone.post("/v2/rpc/initialize", {}), 404, "unsupported_method"),
        (phone.post("/v1/events", {}), 405, "unsupported_method"),
        (phone.plugin("agents.nope", {}), 404, "unsupported_method"),
        (phone.post("/v1/plugins/wuu.nope/agents.main_session", {"params": {}}), 404, "plugin_not_found"),
        (
            phone.plugin("agents.main_session", {}, plugin_fingerprint="other"),
            409,
            "plugin_fingerprint_mismatch",
        ),
        (phone.plugin("agents.history.search", {"session_id": "main", "query": "fail"}), 500, "internal"),
    ]
    for call, status, code in cases:
        got_status, body = await call
        assert (got_status, error_code(body)) == (status, code), (status, code, body)
    _, body = await phone.plugin("agents.history.search", {"session_id": "main", "query": "fail"})
    assert FAIL_PATH not in body["error"]["message"] and "error id" in body["error"]["message"]
    status, body = await phone.plugin("agents.main_session", {"extra": 1})
    assert (status, error_code(body), body["error"]["data"]["field"]) == (
        400,
        "invalid_params",
        "params.extra",
    )
    assert body["error"]["code"] == -32602
    status, body = await phone.post(
        "/v1/plugins/wuu.test/agents.main_session", {"params": {}, "plugin_id": "x"}
    )
    assert (status, error_code(body), body["error"]["data"]["field"]) == (400, "invalid_params", "plugin_id")
    status, body = await phone.plugin("agents.send", {"session_id": "main"})
    assert (status, error_code(body), body["error"]["data"]["field"]) == (400, "invalid_params", "user_input")
    headers = {"Authorization": f"Bearer {phone.token}"}
    async with web.get(f"http://{http.address}/v1/rpc/initialize", headers=headers) as response:
        assert response.status == 405
        assert response.headers["Allow"] == "POST"
        assert error_code(await response.json()) == "unsupported_method"


async def test_a_plugin_call_with_user_input_answers_the_unwrapped_result(
    caller: Callable[[str], Caller],
) -> None:
    user_input = {"client_input_id": "c1", "request_id": "r1", "text": "hello"}
    status, body = await caller("phone").plugin("agents.send", {"session_id": "main"}, user_input=user_input)
    assert status == 200
    assert body["receipt"]["text_sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert body["replayed"] is False


# --- body limits -----------------------------------------------------------------------------------------


async def _raw_exchange(
    address: str, head: bytes, chunks: AsyncIterator[bytes] | None = None
) -> tuple[int, Any, int]:
    """Send a request head, and chunks of a body until the server answers; the answer's status and JSON body,
    and how many body bytes were sent before it came."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    sent = 0

    async def send_body() -> None:
        nonlocal sent
        if chunks is not None:
            async for chunk in chunks:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
                sent += len(chunk)

    writer.write(head)
    sending = asyncio.create_task(send_body())
    try:
        async with asyncio.timeout(DEADLINE):
            status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
            sent_before = sent
            fields = dict(line.lower().split(": ", 1) for line in lines if line)
            body = json.loads(await reader.readexactly(int(fields["content-length"])))
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        writer.close()
    return int(status_line.split()[1]), body, sent_before


@pytest.mark.parametrize("expect", ["", "Expect: 100-continue\r\n"])
async def test_a_content_length_over_max_frame_bytes_is_refused_before_the_body_is_sent(
    caller: Callable[[str], Caller], http: HttpServer, expect: str
) -> None:
    phone = caller("phone")
    head = (
        f"POST /v1/rpc/initialize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {phone.token}\r\n{expect}"
        f"Content-Type: application/json\r\nContent-Length: {USERHOST_MAX_FRAME_BYTES + 1}\r\n\r\n"
    ).encode()
    status, body, _ = await _raw_exchange(http.address, head)
    assert (status, error_code(body)) == (413, "parse_error")


async def test_expect_continue_is_answered_by_the_refusal_or_by_100_continue(
    caller: Callable[[str], Caller], http: HttpServer
) -> None:
    phone = caller("phone")
    host, port = http.address.rsplit(":", 1)
    data = json.dumps(INITIALIZE).encode()
    for token, first in (("wuu_wrong", b"HTTP/1.1 401 "), (phone.token, b"HTTP/1.1 100 Continue")):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST /v1/rpc/initialize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Expect: 100-continue\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        )
        async with asyncio.timeout(DEADLINE):
            assert (await reader.readline()).startswith(first)
            if token == phone.token:
                await reader.readline()
                writer.write(data)
                assert (await reader.readline()).startswith(b"HTTP/1.1 200 ")
        writer.close()


async def test_a_chunked_body_over_the_limit_is_refused_while_it_is_read(
    web: aiohttp.ClientSession, tokens: TokenStore, start: Start
) -> None:
    limit = 64 * 1024
    small = await start(max_body_bytes=limit)
    phone = Caller(web, small.address, tokens.create("chunks"))
    padded = json.dumps(INITIALIZE).encode().ljust(limit)
    assert (await phone.post("/v1/rpc/initialize", padded))[0] == 200
    status, body = await phone.post("/v1/rpc/initialize", padded + b" ")
    assert (status, error_code(body)) == (413, "parse_error")

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(100_000):  # 1.6 GB at most: the answer must come long before
            yield b" " * 16384

    head = (
        f"POST /v1/rpc/initialize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {phone.token}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    status, body, sent = await _raw_exchange(small.address, head, endless())
    assert (status, error_code(body)) == (413, "parse_error")
    assert sent < 100_000 * 16384


# --- events ----------------------------------------------------------------------------------------------


async def test_an_invalidation_reaches_the_event_stream_of_another_token(
    caller: Callable[[str], Caller],
) -> None:
    phone, desktop = caller("phone"), caller("desktop")
    stream = await desktop.events()
    params = {
        "session_id": "main",
        "message_seq": 3,
        "emoji": "👍",
        "expected_revision": 0,
        "request_id": "q1",
    }
    assert (await phone.plugin("agents.react", params))[0] == 200
    event, data = await next_event(stream)
    assert event == "plugin/client/invalidate"
    assert data == {
        "graph_generation": 1,
        "plugin_id": "wuu.test",
        "topic": "reactions",
        "session_id": "main",
        "message_seqs": [3],
    }
    stream.close()


async def test_an_idle_stream_gets_keepalive_comments(
    caller: Callable[[str], Caller], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_module, "KEEPALIVE_SECONDS", 0.05)
    stream = await caller("phone").events()
    async with asyncio.timeout(DEADLINE):
        assert await stream.content.readline() == b": keepalive\n"
        assert await stream.content.readline() == b"\n"
    stream.close()


async def test_a_second_stream_replaces_the_first(caller: Callable[[str], Caller], http: HttpServer) -> None:
    phone = caller("phone")
    first = await phone.events()
    await eventually(lambda: http.streams == 1, "the first stream opened")
    second = await phone.events()
    assert await ended(first)
    assert http.streams == 1
    second.close()


async def test_a_slow_event_reader_is_cut_without_delaying_another(
    web: aiohttp.ClientSession, tokens: TokenStore, start: Start, host: UserHost
) -> None:
    server = await start(max_queued_events=8)
    slow, fast = (Caller(web, server.address, tokens.create(name)) for name in ("slow", "fast"))
    host_name, port = server.address.rsplit(":", 1)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect((host_name, int(port)))
    raw.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=raw)
    writer.write(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {slow.token}\r\n\r\n".encode())
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    stream = await fast.events()
    await eventually(lambda: server.streams == 2, "both streams opened")
    received: list[int] = []

    async def read_fast() -> None:
        while True:
            _, data = await next_event(stream)
            received.append(data["message_seqs"][0])

    reading = asyncio.create_task(read_fast())
    sent = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE
    while server.streams == 2:  # the slow reader never reads: its queue fills once the socket is full
        assert loop.time() < end, "the slow stream was never cut"
        for _ in range(4):  # a burst the queue of 8 holds
            sent += 1
            host.notify(invalidation(host, sent))
        await eventually(lambda count=sent: len(received) == count, "the fast reader kept up")
    assert server.streams == 1
    host.notify(invalidation(host, sent + 1))
    await eventually(lambda: received == list(range(1, sent + 2)), "the fast reader got every event in order")
    reading.cancel()
    writer.close()
    stream.close()


# --- request ids -----------------------------------------------------------------------------------------


async def test_a_request_id_names_a_call_for_cancel_and_a_duplicate_in_flight_is_refused(
    caller: Callable[[str], Caller],
) -> None:
    phone = caller("phone")
    body = {"params": {"session_id": "main", "query": "sleep:30"}}
    path = "/v1/plugins/wuu.test/agents.history.search"
    # Two calls named r1: whichever arrives second is refused while the first sleeps.
    calls = [asyncio.create_task(phone.post(path, body, **{"Wuu-Request-Id": "r1"})) for _ in range(2)]
    done, [named] = await asyncio.wait(calls, timeout=DEADLINE, return_when=asyncio.FIRST_COMPLETED)
    status, answer = done.pop().result()
    assert (status, error_code(answer)) == (400, "invalid_request")
    assert await phone.post("/v1/rpc/plugin/client/cancel", {"id": "r1"}) == (200, {"cancelled": True})
    status, answer = await named
    assert (status, error_code(answer)) == (409, "cancelled")
    assert await phone.post("/v1/rpc/plugin/client/cancel", {"id": "r1"}) == (200, {"cancelled": False})
    status, answer = await phone.post(path, body, **{"Wuu-Request-Id": "x" * 257})
    assert (status, error_code(answer)) == (400, "invalid_request")


async def test_cancel_is_local_to_the_token(caller: Callable[[str], Caller]) -> None:
    phone, desktop = caller("phone"), caller("desktop")
    path = "/v1/plugins/wuu.test/agents.history.search"
    named = asyncio.create_task(
        phone.post(path, {"params": {"session_id": "main", "query": "sleep:0.5"}}, **{"Wuu-Request-Id": "r1"})
    )
    await asyncio.sleep(0.1)
    assert await desktop.post("/v1/rpc/plugin/client/cancel", {"id": "r1"}) == (200, {"cancelled": False})
    assert await named == (200, {"messages": [], "next_page_token": None})


# --- revocation ------------------------------------------------------------------------------------------


async def test_a_revoked_token_is_refused_its_stream_closed_and_its_admitted_work_completes(
    caller: Callable[[str], Caller], tokens: TokenStore, host: UserHost
) -> None:
    phone, desktop = caller("phone"), caller("desktop")
    stream = await phone.events()
    admit = {"session_id": "main", "query": "admit:after-revoke:0.3"}
    assert (await phone.plugin("agents.history.search", admit))[0] == 200
    tokens.revoke("phone")
    assert await ended(stream)  # closed by the server's periodic check, without another request
    assert await phone.plugin("agents.main_session", {}) == (401, None)
    assert await desktop.plugin("agents.main_session", {}) == (200, {"session_id": "main"})
    await eventually(lambda: (host.layout.state / "after-revoke").exists(), "the admitted work completed")


async def test_a_token_revoked_while_its_body_arrives_is_refused_and_attaches_nothing(
    http: HttpServer, tokens: TokenStore, host: UserHost
) -> None:
    token = tokens.create("phone")
    body = json.dumps({"params": {}}).encode()
    head = (
        f"POST /v1/plugins/wuu.test/agents.main_session HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    host_name, _, port = http.address.rpartition(":")
    reader, writer = await asyncio.open_connection(host_name, int(port))
    writer.write(head + body[:3])  # authenticated from its head; the body is still on its way
    await asyncio.sleep(0.2)
    tokens.revoke("phone")
    writer.write(body[3:])
    async with asyncio.timeout(DEADLINE):
        answer = await reader.read()  # a 401 closes the connection
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert host.clients == 0


async def test_a_token_file_that_cannot_be_read_refuses_every_token(
    caller: Callable[[str], Caller], tokens: TokenStore
) -> None:
    phone = caller("phone")
    assert (await phone.plugin("agents.main_session", {}))[0] == 200
    tokens.path.write_text("{not json")
    assert await phone.plugin("agents.main_session", {}) == (401, None)
    assert await phone.plugin("agents.main_session", {}) == (401, None)


async def test_a_send_of_a_revoked_token_stays_readable_by_another_token(
    web: aiohttp.ClientSession, home: Path
) -> None:
    space = await UserHost.start(
        user_space_id="local",
        product_domain="personal",
        home=home,
        composition_profile="personal",
        compose=[personal()],
    )
    store = TokenStore.of_space(home, "local", "personal")
    server = await HttpServer.start(space, HttpAddress("127.0.0.1", 0), store)
    try:
        phone = Caller(web, server.address, store.create("phone"))
        desktop = Caller(web, server.address, store.create("desktop"))
        path = "/v1/plugins/wuu.personal/"
        status, main_session = await phone.post(path + "agents.main_session", {"params": {}})
        assert status == 200
        user_input = {"client_input_id": "c1", "request_id": "r1", "text": "hello"}
        status, sent = await phone.post(
            path + "agents.send", {"params": main_session, "user_input": user_input}
        )
        assert status == 200
        store.revoke("phone")
        assert (await phone.post(path + "agents.main_session", {"params": {}}))[0] == 401
        status, read = await desktop.post(
            path + "agents.receipts", {"params": {**main_session, "client_input_ids": ["c1"]}}
        )
        assert status == 200
        assert [receipt["receipt_id"] for receipt in read["receipts"]] == [sent["receipt"]["receipt_id"]]
    finally:
        await server.close()
        await space.close()


# --- tokens and commands ---------------------------------------------------------------------------------


def test_token_commands_store_only_digests_in_a_0600_file(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binding = ["--home", str(home), "--user-space", "local", "--product-domain", "personal"]
    out = tmp_path / "phone.token"
    assert main(["token", "create", "--name", "phone", "--out", str(out), *binding]) == 0
    token = capsys.readouterr().out.strip()
    assert out.read_text().strip() == token
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    path = home / "user-spaces" / "local" / "personal" / "state" / TOKENS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert token not in text
    [entry] = json.loads(text)["tokens"]
    assert entry["name"] == "phone" and entry["sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert main(["token", "create", "--name", "phone", *binding]) == 2
    assert "--name" in capsys.readouterr().err
    assert main(["token", "create", "--name", "desk", *binding]) == 0
    capsys.readouterr()
    assert main(["token", "list", *binding]) == 0
    assert capsys.readouterr().out.split() == ["phone", "desk"]
    assert main(["token", "revoke", "--name", "phone", *binding]) == 0
    assert main(["token", "list", *binding]) == 0
    assert capsys.readouterr().out.split() == ["desk"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert main(["token", "revoke", "--name", "phone", *binding]) == 2


async def test_tokens_never_appear_in_logs(
    caller: Callable[[str], Caller], tokens: TokenStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    phone = caller("phone")
    await phone.plugin("agents.main_session", {})
    await phone.plugin("agents.history.search", {"session_id": "main", "query": "fail"})
    wrong = Caller(phone.web, phone.base.removeprefix("http://"), phone.token + "x")
    assert await wrong.post("/v1/rpc/initialize", {}) == (401, None)
    tokens.revoke("phone")
    await phone.plugin("agents.main_session", {})
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + repr(vars(record))
        assert phone.token not in text and phone.token[4:20] not in text


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--http", "0.0.0.0:0"], "--http-remote"),
        (["--http", "192.0.2.1:8080", "--http-remote"], "--tls-cert"),
        (["--http", "127.0.0.1:0", "--tls-cert", "c.pem"], "--tls-key"),
        (["--http", "nowhere:1"], "--http"),
        (["--stdio", "--http-remote"], "--http-remote"),
    ],
)
def test_serve_refuses_a_reachable_http_address_without_its_flags(
    home: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    binding = ["--home", str(home), "--user-space", "local", "--product-domain", "personal"]
    assert main(["serve", *binding, *flags]) == 2
    assert named in capsys.readouterr().err
    assert not (home / "user-spaces").exists()


async def test_serve_http_logs_its_address_and_answers_a_token(
    home: Path, web: aiohttp.ClientSession
) -> None:
    binding = ["--home", str(home), "--user-space", "local", "--product-domain", "personal"]
    token = TokenStore.of_space(home, "local", "personal").create("curl")
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "wuu.host.userhost", "serve", *binding, "--http", "127.0.0.1:0"),
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(DEADLINE):
            while True:
                line = json.loads(await process.stderr.readline())
                if line["message"] == "listening" and line.get("transport") == "http":
                    break
        address = line["address"]
        assert address.startswith("127.0.0.1:") and not address.endswith(":0")
        headers = {"Authorization": f"Bearer {token}"}
        async with web.post(f"http://{address}/v1/rpc/initialize", json=INITIALIZE, headers=headers) as r:
            assert r.status == 200
            assert (await r.json())["user_space_id"] == "local"
    finally:
        process.terminate()
        assert await process.wait() == 0
    assert token not in (await process.stderr.read()).decode()


async def test_over_tls_the_host_answers_only_a_client_that_trusts_its_certificate(
    start: Start, tokens: TokenStore, tmp_path: Path
) -> None:
    """`--tls-cert`/`--tls-key` serve HTTPS: a client that trusts the certificate is answered, plain HTTP
    and an untrusting client get no answer."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    subject = ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        [*request, "-nodes", "-keyout", str(key), "-out", str(cert), *subject],
        check=True,
        capture_output=True,
    )
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    server = await start(ssl_context=server_context)
    token = tokens.create("remote")
    auth = {"Authorization": f"Bearer {token}"}
    trusting = ssl.create_default_context(cafile=str(cert))
    async with aiohttp.ClientSession() as client:
        url = f"https://{server.address}/v1/rpc/initialize"
        async with client.post(url, json=INITIALIZE, headers=auth, ssl=trusting) as response:
            assert response.status == 200
            assert (await response.json())["user_space_id"] == "local"
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await client.post(url, json=INITIALIZE, headers=auth)
        with pytest.raises(aiohttp.ClientError):
            plain = f"http://{server.address}/v1/rpc/initialize"
            await client.post(plain, json=INITIALIZE, headers=auth)
