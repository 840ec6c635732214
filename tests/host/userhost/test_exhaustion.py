"""Connections that never show their right to be served cannot lock the owner out
(spec/schema/userhost/envelope.schema.json, http.schema.json): the socket's initialize deadline, the HTTP head
and body deadlines, the bound on pending connections, bounded reads of a refused client, idle token transports
expiring, and the accept loop out of descriptors (backing off without a log flood, then serving again).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.helpers import DEADLINE, until
from tests.host.userhost.conftest import Connect
from wuu.generated.catalog import USERHOST_INITIALIZE_DEADLINE_SECONDS, USERHOST_MAX_CLIENT_TRANSPORTS
from wuu.host.userhost import UnixServer, UserHost, ndjson
from wuu.host.userhost.address import HttpAddress
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.http import HttpServer
from wuu.host.userhost.ndjson import DEFAULT_INITIALIZE_SECONDS, REFUSAL_PEEK_BYTES
from wuu.host.userhost.tokens import TOKENS_FILE, TokenStore

SHORT = 0.5
"""The deadlines of these tests' servers, in seconds."""
INITIALIZE = {"protocol_version": 1, "client_info": {"name": "test", "version": "1"}}


async def raw_unix(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_unix_connection(str(path))


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    """Everything the host sends until it closes the connection (failing after the deadline)."""
    async with asyncio.timeout(DEADLINE):
        try:
            return await reader.read()
        except ConnectionResetError:
            return b""


async def initialized_client(path: Path) -> UserHostClient:
    """A socket client that has initialized (retrying `too_many_clients` until the deadline)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        client = await UserHostClient.connect_unix(path)
        answer = await client.request("initialize", INITIALIZE)
        if "result" in answer:
            return client
        await client.close()
        assert answer["error"]["data"]["code"] == "too_many_clients", answer
        assert time.monotonic() < deadline, "no client slot came free"
        await asyncio.sleep(0.05)


# --- the Unix socket -------------------------------------------------------------------------------------


def test_the_default_initialize_deadline_is_the_spec_s_least() -> None:
    assert DEFAULT_INITIALIZE_SECONDS == USERHOST_INITIALIZE_DEADLINE_SECONDS


async def test_clients_that_never_initialize_are_closed_at_the_deadline_and_free_their_slots(
    host: UserHost, run_dir: Path
) -> None:
    server = await UnixServer.start(host, run_dir / "userhost.sock", initialize_timeout=SHORT)
    try:
        squatters = [await raw_unix(server.path) for _ in range(USERHOST_MAX_CLIENT_TRANSPORTS)]
        for _, writer in squatters[::2]:
            writer.write(b'{"jsonrpc": "2.0", "id": 1, "method": "initia')  # half a line, never ended
            await writer.drain()
        await until(lambda: host.clients == USERHOST_MAX_CLIENT_TRANSPORTS, "every squatter to attach")
        started = time.monotonic()
        for reader, _ in squatters:
            told = await read_to_eof(reader)
            message = json.loads(told)
            assert message["id"] is None and message["error"]["data"] == {"code": "not_initialized"}
            assert "initialize" in message["error"]["message"]
        assert time.monotonic() - started < DEADLINE
        client = await initialized_client(server.path)
        assert host.clients == 1
        await asyncio.sleep(SHORT * 2)  # an initialized client stays past the deadline
        assert (await client.request("shutdown", {}))["result"] == {}
        await client.close()
        for _, writer in squatters:
            writer.close()
    finally:
        await server.close()


async def test_a_client_that_never_reads_is_cut_after_the_close_grace(
    host: UserHost, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the initialize deadline a client whose answers wait unread is still closed: what is queued gets the
    close grace, then the connection is cut (and the server's close does not wait for it)."""
    monkeypatch.setattr(ndjson, "CLOSE_GRACE_SECONDS", SHORT)
    server = await UnixServer.start(host, run_dir / "userhost.sock", initialize_timeout=SHORT)
    reader = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(str(server.path))
    reader.setblocking(False)
    lines = b'{"jsonrpc": "2.0", "id": 1, "method": "no/such"}\n' * 2000
    loop = asyncio.get_running_loop()
    end = loop.time() + SHORT
    while loop.time() < end:  # answers pile up, unread
        with contextlib.suppress(BlockingIOError):
            reader.send(lines)
        await asyncio.sleep(0.01)
    await until(lambda: host.clients == 0 and server.pending == 0, "the client to be cut")
    async with asyncio.timeout(DEADLINE / 2):
        await server.close()
    reader.close()


async def test_pending_connections_beyond_the_bound_end_the_oldest(host: UserHost, run_dir: Path) -> None:
    server = await UnixServer.start(host, run_dir / "userhost.sock", max_pending=4)
    try:
        client = await initialized_client(server.path)  # initialized: never counted, never shed
        silent = [await raw_unix(server.path) for _ in range(6)]
        for reader, _ in silent[:2]:
            assert await read_to_eof(reader) == b""  # ended without a word: the two oldest
        await until(lambda: server.pending == 4 and host.clients == 5, "the two oldest to be shed")
        assert (await client.request("plugin/client/cancel", {"id": "x"}))["result"] == {"cancelled": False}
        await client.close()
        for _, writer in silent:
            writer.close()
    finally:
        await server.close()


async def test_a_refused_client_is_answered_and_read_no_further(connect: Connect, server: UnixServer) -> None:
    clients = [await connect() for _ in range(USERHOST_MAX_CLIENT_TRANSPORTS)]
    for client in clients:
        assert "result" in await client.request("initialize", INITIALIZE)
    extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    extra.connect(str(server.path))
    extra.setblocking(False)
    # One endless line: the host reads a small prefix of it, then nothing more, so what the socket takes
    # is that prefix and the kernel's buffers (before, the host read up to max_frame_bytes of it).
    sent, chunk = 0, b'{"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"x": "' + b"y" * 65536
    loop = asyncio.get_running_loop()
    stalled_since = loop.time()
    while loop.time() - stalled_since < 1.0 and sent < 64 * 2**20:
        try:
            sent += extra.send(chunk)
            stalled_since = loop.time()
        except BlockingIOError:
            await asyncio.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            break
    assert sent < REFUSAL_PEEK_BYTES + 8 * 2**20, f"the refused client got {sent} bytes in"
    reader, writer = await asyncio.open_unix_connection(sock=extra)
    message = json.loads(await read_to_eof(reader))
    assert message["id"] is None and message["error"]["data"] == {"code": "too_many_clients"}
    writer.close()


# --- HTTP ------------------------------------------------------------------------------------------------


@pytest.fixture
def tokens(host: UserHost) -> TokenStore:
    return TokenStore(host.layout.state / TOKENS_FILE)


@pytest.fixture
async def start_http(
    host: UserHost, tokens: TokenStore
) -> AsyncIterator[Callable[..., Awaitable[HttpServer]]]:
    servers: list[HttpServer] = []

    async def start(**options: Any) -> HttpServer:
        server = await HttpServer.start(host, HttpAddress("127.0.0.1", 0), tokens, **options)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


async def raw_tcp(server: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = server.address.rpartition(":")
    return await asyncio.open_connection(host, int(port))


async def initialize(web: aiohttp.ClientSession, address: str, token: str) -> int:
    """The status of `POST /v1/rpc/initialize` with `token`."""
    async with web.post(
        f"http://{address}/v1/rpc/initialize",
        json=INITIALIZE,
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        await response.read()
        return response.status


async def test_a_request_head_must_arrive_whole_within_the_head_deadline(
    start_http: Callable[..., Awaitable[HttpServer]],
) -> None:
    server = await start_http(head_timeout=SHORT)
    silent, slow = await raw_tcp(server), await raw_tcp(server)
    slow[1].write(b"POST /v1/rpc/initialize HTTP/1.1\r\nHost: x\r\n")  # and never the rest
    started = time.monotonic()
    assert await read_to_eof(silent[0]) == b""
    assert await read_to_eof(slow[0]) == b""
    assert SHORT * 0.9 <= time.monotonic() - started < DEADLINE
    await until(lambda: server.pending == 0, "the pending connections to be forgotten")


async def test_a_body_must_arrive_whole_within_the_body_deadline(
    start_http: Callable[..., Awaitable[HttpServer]], tokens: TokenStore
) -> None:
    server = await start_http(body_timeout=SHORT)
    token = tokens.create("phone")
    reader, writer = await raw_tcp(server)
    writer.write(
        f"POST /v1/rpc/initialize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
    )
    answer = await read_to_eof(reader)  # the answer, then the end of the connection
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert json.loads(body)["error"]["data"] == {"code": "invalid_request"}


async def test_pending_http_connections_beyond_the_bound_end_the_oldest(
    start_http: Callable[..., Awaitable[HttpServer]], tokens: TokenStore
) -> None:
    server = await start_http(max_pending=4)
    token = tokens.create("phone")
    async with aiohttp.ClientSession() as web:
        assert await initialize(web, server.address, token) == 200  # its connection is now authenticated
        silent = [await raw_tcp(server) for _ in range(6)]
        for reader, _ in silent[:2]:
            assert await read_to_eof(reader) == b""
        await until(lambda: server.pending == 4, "the two oldest to be shed")
        assert await initialize(web, server.address, token) == 200  # the kept-alive connection still serves
    for _, writer in silent:
        writer.close()


async def test_idle_token_transports_are_detached_so_sixteen_tokens_cannot_lock_the_owner_out(
    host: UserHost, start_http: Callable[..., Awaitable[HttpServer]], tokens: TokenStore
) -> None:
    server = await start_http(idle_timeout=SHORT)
    used_once = [tokens.create(f"old-{n}") for n in range(USERHOST_MAX_CLIENT_TRANSPORTS)]
    async with aiohttp.ClientSession() as web:
        for token in used_once:
            assert await initialize(web, server.address, token) == 200
        assert host.clients == USERHOST_MAX_CLIENT_TRANSPORTS
        await until(lambda: host.clients == 0, "the idle transports to be detached")
        owner = tokens.create("owner")
        assert await initialize(web, server.address, owner) == 200
        assert await initialize(web, server.address, used_once[0]) == 200  # attached again
        assert host.clients == 2


# --- out of descriptors ----------------------------------------------------------------------------------


def _few_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))


@pytest.mark.parametrize("transport", ["unix", "http"])
async def test_out_of_descriptors_the_listener_backs_off_quietly_and_serves_again(
    transport: str, home: Path, run_dir: Path
) -> None:
    binding = ["--home", str(home), "--user-space", "local", "--product-domain", "personal"]
    socket_path = run_dir / "userhost.sock"
    listen = ["--listen", f"unix:{socket_path}"] if transport == "unix" else ["--http", "127.0.0.1:0"]
    token = TokenStore.of_space(home, "local", "personal").create("owner") if transport == "http" else ""
    log = run_dir / "host.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "wuu.host.userhost",
            "serve",
            *binding,
            *listen,
            stderr=stderr,
            preexec_fn=_few_descriptors,
        )
    try:
        address = await _listening(log)
        flood: list[socket.socket] = []
        for _ in range(200):
            attacker = socket.socket(socket.AF_UNIX if transport == "unix" else socket.AF_INET)
            attacker.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                attacker.connect(str(socket_path) if transport == "unix" else _tcp(address))
            flood.append(attacker)
        await asyncio.sleep(1.0)  # the host runs out of descriptors and sheds for a while
        for attacker in flood:
            attacker.close()
        if transport == "unix":
            client = await initialized_client(socket_path)
            await client.close()
        else:
            async with aiohttp.ClientSession() as web:
                answered = 0
                deadline = time.monotonic() + DEADLINE
                while answered != 200 and time.monotonic() < deadline:
                    try:
                        answered = await initialize(web, address, token)
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.1)
                assert answered == 200
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), DEADLINE)
    lines = log.read_text().splitlines()
    out_of_resources = [line for line in lines if "accept" in line]
    assert 1 <= len(out_of_resources) <= 20, lines[:5]
    assert len(lines) < 400, f"{len(lines)} log lines: {lines[:3]}"


async def _listening(log: Path) -> str:
    """The address the host logs it listens on."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if entry["message"] == "listening":
                return str(entry.get("address") or entry.get("path"))
        await asyncio.sleep(0.05)
    raise AssertionError(f"the host never listened: {log.read_text()}")


def _tcp(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)
