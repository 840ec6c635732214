"""Connections that never earn a slot cannot lock the owner out (rows `userhost.slot-squatting` and
`userhost.header-slowloris`), against a real host process with short deadlines and few descriptors
(`squatted_host.py`; spec/schema/userhost/envelope.schema.json and http.schema.json state the rules).

Slot squatting, each round: every socket slot is taken by clients that never initialize (silent, or a line
never ended), seeded clients beyond the 16th write an endless line, every HTTP slot is taken by a token used
once, silent TCP connections pile up, and on gRPC more HTTP/2 sessions than the server holds are opened
while unauthenticated calls carry maximal messages. The owner must still get in over the socket and HTTP
within the deadline plus a margin (and over gRPC once the flood has gone), every squatter must be closed by
the host, a refused client must get no more than a small prefix and the kernel's buffers in, and the host's
memory must stay bounded.

Header slowloris, each round: more connections than the host has descriptors trickle a request head one byte
at a time, never ending it, while the owner's requests must each be answered within a second or two; every
trickling connection must be closed by the host, and its log must not flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from wuu.generated.catalog import USERHOST_MAX_CLIENT_TRANSPORTS, USERHOST_MAX_FRAME_BYTES
from wuu.host.userhost.client import ConnectionLost
from wuu.host.userhost.grpc_client import UserHostGrpcClient
from wuu.host.userhost.grpc_wire import MESSAGE_OPTIONS, SERVICE
from wuu.host.userhost.tokens import TokenStore

from .campaign import Campaign, Context, Outcome, traceback_in
from .squatted_host import DEADLINE_S

FULL_ROUNDS = 100
"""Rounds of each row at scale 1."""
MARGIN_S = 3.0
"""What the host may take beyond a deadline to act on it."""
OWNER_S = 2.0
"""The longest an owner's request may wait while the host is under attack."""
REFUSED_WRITERS = 6
REFUSED_MAX_BYTES = 8 * 2**20
"""The most a refused client may get into the host and the kernel's buffers together."""
SILENT_TCP = 48
TRICKLERS = 300
"""More than the host's descriptors (squatted_host.NOFILE)."""
GRPC_SESSIONS = 160
"""More than the gRPC server holds (grpc_service.MAX_TCP_CONNECTIONS)."""
GRPC_BIG_CALLS = 4
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
MAX_RSS_KIB = 512 * 1024
MAX_LOG_LINES_PER_ROUND = 400
INITIALIZE = {"protocol_version": 1, "client_info": {"name": "chaos", "version": "1"}}


@dataclass
class Host:
    process: asyncio.subprocess.Process
    socket: Path
    address: str
    grpc: str
    log: Path
    tokens: TokenStore

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


async def _start(workdir: Path) -> Host:
    home = workdir / "home"
    home.mkdir(mode=0o700)
    sockets = Path(tempfile.mkdtemp(prefix="slots-"))  # short: a socket path has at most 107 bytes
    log = workdir / "host.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.chaos.squatted_host",
            str(home),
            str(sockets / "host.sock"),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    if not line:
        raise RuntimeError(
            f"the host did not start: {traceback_in(log.read_text()) or log.read_text()[-300:]}"
        )
    http, grpc = line.decode().split()
    return Host(
        process, sockets / "host.sock", http, grpc, log, TokenStore.of_space(home, "local", "personal")
    )


async def _stop(host: Host) -> list[str]:
    failures = []
    if host.process.returncode is not None:
        failures.append(
            f"the host died (exit {host.process.returncode}): {traceback_in(host.log.read_text())}"
        )
    else:
        host.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(host.process.wait(), 30)
        except TimeoutError:
            host.process.kill()
            await host.process.wait()
            failures.append("the host did not stop within 30 s of SIGTERM")
    host.socket.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        host.socket.parent.rmdir()
    return failures


async def _unix_initialize(path: Path) -> dict[str, object]:
    """The answer to one `initialize` on a new socket connection (which stays open while the answer is read)."""
    reader, writer = await asyncio.open_unix_connection(str(path), limit=2**26)
    try:
        writer.write(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INITIALIZE}).encode()
            + b"\n"
        )
        answer: dict[str, object] = json.loads(await reader.readline())
        return answer
    finally:
        writer.close()


async def _owner_on_socket(path: Path, within: float) -> str | None:
    """None once an owner's socket client has initialized within `within` seconds; else what happened."""
    deadline = time.monotonic() + within
    last = ""
    while time.monotonic() < deadline:
        try:
            answer = await asyncio.wait_for(_unix_initialize(path), max(0.1, deadline - time.monotonic()))
        except (OSError, TimeoutError, ValueError) as error:
            last = f"{type(error).__name__}: {error}"
        else:
            if "result" in answer:
                return None
            last = json.dumps(answer.get("error"))
        await asyncio.sleep(0.05)
    return f"the owner could not initialize on the socket within {within:g} s (last: {last})"


async def _http_initialize(address: str, token: str) -> int:
    """The status of `POST /v1/rpc/initialize` with `token` (a raw HTTP/1.1 request on a new connection)."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        body = json.dumps(INITIALIZE).encode()
        writer.write(
            f"POST /v1/rpc/initialize HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        status_line = await reader.readline()
        return int(status_line.split()[1]) if status_line.startswith(b"HTTP/1.1 ") else 0
    finally:
        writer.close()


async def _owner_on_http(address: str, token: str, within: float) -> str | None:
    deadline = time.monotonic() + within
    last = ""
    while time.monotonic() < deadline:
        try:
            status = await asyncio.wait_for(
                _http_initialize(address, token), max(0.1, deadline - time.monotonic())
            )
        except (OSError, TimeoutError, ValueError, IndexError) as error:
            last = f"{type(error).__name__}: {error}"
        else:
            if status == 200:
                return None
            last = f"status {status}"
        await asyncio.sleep(0.05)
    return f"the owner's HTTP request was not answered 200 within {within:g} s (last: {last})"


async def _closed_by_host(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the host ends the connection within `within` seconds (whatever it says first)."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


def _refused_writer(path: Path) -> tuple[socket.socket, int]:
    """A socket client beyond the 16th that writes one endless line until the host stops taking it; the
    socket and how much it got in."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    client.settimeout(0.5)
    chunk = b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"x": "' + b"y" * 65536
    sent = 0
    with contextlib.suppress(OSError):  # a timeout once the host stops reading; a reset once it closed
        while sent < 4 * REFUSED_MAX_BYTES:
            sent += client.send(chunk)
    return client, sent


async def _squat_round(host: Host, rng: random.Random, number: int) -> list[str]:
    failures: list[str] = []
    where = f"round {number}"
    squatters = []
    for _ in range(USERHOST_MAX_CLIENT_TRANSPORTS):
        reader, writer = await asyncio.open_unix_connection(str(host.socket))
        if rng.random() < 0.5:
            writer.write(b'{"jsonrpc": "2.0", "id": 1, "method": "initia')
        squatters.append((reader, writer))
    writers = await asyncio.gather(
        *(asyncio.to_thread(_refused_writer, host.socket) for _ in range(rng.randint(1, REFUSED_WRITERS)))
    )
    for _, sent in writers:
        if sent > REFUSED_MAX_BYTES:
            failures.append(f"{where}: a refused client got {sent} bytes into the host")
    tokens = [host.tokens.create(f"r{number}-{n}") for n in range(USERHOST_MAX_CLIENT_TRANSPORTS)]
    statuses = await asyncio.gather(
        *(_http_initialize(host.address, token) for token in tokens), return_exceptions=True
    )
    silent = [await asyncio.open_connection(*_split(host.address)) for _ in range(SILENT_TCP)]
    sessions = await _grpc_flood(host.grpc)
    owner = host.tokens.create(f"r{number}-owner")
    if (problem := await _owner_on_http(host.address, owner, OWNER_S)) is not None:
        failures.append(
            f"{where}: {problem} (the used-once tokens answered {sorted(set(map(str, statuses)))})"
        )
    if (problem := await _owner_on_socket(host.socket, DEADLINE_S + MARGIN_S)) is not None:
        failures.append(f"{where}: {problem}")
    closed = await asyncio.gather(
        *(_closed_by_host(reader, DEADLINE_S + MARGIN_S) for reader, _ in squatters)
    )
    if not all(closed):
        failures.append(f"{where}: {closed.count(False)} socket squatters were not closed by the host")
    if (rss := host.rss_kib()) > MAX_RSS_KIB:
        failures.append(f"{where}: the host's RSS is {rss} KiB")
    for _, writer in [*squatters, *silent, *sessions]:
        writer.close()
    if (problem := await _owner_on_grpc(host.grpc, owner, MARGIN_S)) is not None:
        failures.append(f"{where}: {problem}")
    for client, _ in writers:
        client.close()
    for name in [f"r{number}-{n}" for n in range(USERHOST_MAX_CLIENT_TRANSPORTS)] + [f"r{number}-owner"]:
        host.tokens.revoke(name)
    return failures


async def _grpc_flood(address: str) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """HTTP/2 sessions that never call, more than the server holds, and unauthenticated calls with maximal
    messages; the sessions, still open."""
    sessions = []
    for _ in range(GRPC_SESSIONS):
        try:
            reader, writer = await asyncio.open_connection(*_split(address))
        except OSError:
            break
        writer.write(HTTP2_PREFACE)
        sessions.append((reader, writer))
    channel = grpc.aio.insecure_channel(address, options=MESSAGE_OPTIONS)
    initialize = channel.unary_unary(f"/{SERVICE}/Initialize")
    big = b"\x0a" + b"\xff\xff\xff\x0f" + b"x" * (USERHOST_MAX_FRAME_BYTES - 64)
    with contextlib.suppress(grpc.aio.AioRpcError):
        await asyncio.gather(*(initialize(big, timeout=OWNER_S * 5) for _ in range(GRPC_BIG_CALLS)))
    await channel.close()
    return sessions


async def _owner_on_grpc(address: str, token: str, within: float) -> str | None:
    deadline = time.monotonic() + within
    last = ""
    while time.monotonic() < deadline:
        client = await UserHostGrpcClient.connect(address, token=token)
        try:
            await asyncio.wait_for(client.initialize(), max(0.1, deadline - time.monotonic()))
            return None
        except (grpc.aio.AioRpcError, ConnectionLost, TimeoutError) as error:
            last = f"{type(error).__name__}: {error}"
        finally:
            await client.close(timeout=1)
        await asyncio.sleep(0.05)
    return f"the owner could not initialize over gRPC within {within:g} s of the flood's end (last: {last})"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


async def _trickle(address: str, stop: asyncio.Event) -> bool | None:
    """One connection trickling a request head that never ends; whether the host closed it (None when the
    host refused it at once, out of descriptors)."""
    try:
        reader, writer = await asyncio.open_connection(*_split(address))
    except OSError:
        return None
    head = b"GET /v1/events HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096
    try:
        for byte in head:
            if stop.is_set():
                return False
            writer.write(bytes([byte]))
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05):
                    if not await reader.read(65536):
                        return True  # EOF: the host closed it
        return False
    except OSError:
        return True  # reset: the host closed it
    finally:
        writer.close()


async def _slowloris_round(host: Host, rng: random.Random, number: int) -> list[str]:
    failures: list[str] = []
    where = f"round {number}"
    owner = host.tokens.create(f"slow-{number}")
    stop = asyncio.Event()
    trickling = [asyncio.create_task(_trickle(host.address, stop)) for _ in range(TRICKLERS)]
    await asyncio.sleep(rng.uniform(0, DEADLINE_S))
    for _ in range(5):
        started = time.monotonic()
        if (problem := await _owner_on_http(host.address, owner, OWNER_S)) is not None:
            failures.append(f"{where}: {problem}")
            break
        await asyncio.sleep(max(0.0, 0.2 - (time.monotonic() - started)))
    try:
        closed = await asyncio.wait_for(asyncio.gather(*trickling), DEADLINE_S + MARGIN_S + 30)
    except TimeoutError:
        stop.set()
        closed = await asyncio.gather(*trickling)
    held = sum(result is False for result in closed)
    if held:
        failures.append(f"{where}: {held} of {TRICKLERS} trickling connections were never closed by the host")
    host.tokens.revoke(f"slow-{number}")
    return failures


Round = Callable[[Host, random.Random, int], Awaitable[list[str]]]


async def _campaign(context: Context, name: str, round_: Round) -> Outcome:
    rounds = context.size(FULL_ROUNDS)
    rng = random.Random(context.seed)
    outcome = Outcome(runs=rounds)
    host = await _start(context.workdir)
    try:
        for number in range(rounds):
            before = len(host.log.read_text().splitlines())
            failures = await round_(host, rng, number)
            lines = len(host.log.read_text().splitlines()) - before
            if lines > MAX_LOG_LINES_PER_ROUND:
                failures.append(f"round {number}: the host logged {lines} lines")
            outcome.failures += [f"{failure} (rerun: {context.rerun(name)})" for failure in failures]
            if host.process.returncode is not None:
                break
    finally:
        outcome.failures += await _stop(host)
    return outcome


async def _squatting(context: Context) -> Outcome:
    return await _campaign(context, "userhost.slot-squatting", _squat_round)


async def _slowloris(context: Context) -> Outcome:
    return await _campaign(context, "userhost.header-slowloris", _slowloris_round)


CAMPAIGNS = [
    Campaign("userhost.slot-squatting", _squatting),
    Campaign("userhost.header-slowloris", _slowloris),
]
