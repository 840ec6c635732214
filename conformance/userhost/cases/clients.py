"""Cases of the host's clients: `shutdown` and EOF detach one client only, at most 16 client transports, a
client that stops reading is disconnected without delaying the others, and a stdio-only host ends after its
client's EOF.

A client's detachment is seen in the host's client count: with 16 transports attached a new one gets
`too_many_clients`, and once one has detached a new one is admitted.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from wuu.generated.catalog import (
    USERHOST_ATTACHMENT_READ_MAX_CHARS,
    USERHOST_MAX_CLIENT_QUEUE_BYTES,
    USERHOST_MAX_CLIENT_TRANSPORTS,
    USERHOST_MAX_FRAME_BYTES,
)

from ..connection import Connection, code_of
from ..personal import ATTACHMENT_READ, attachment, content, open_main, send
from ..session import PERSONAL, HostSession, initialize_params
from ..suite import USERHOST

PROBE_ID = "conformance-probe"
CHUNK_BYTES = USERHOST_ATTACHMENT_READ_MAX_CHARS // 4 * 3
"""An attachment whose base64 encoding is exactly one maximal chunk."""
OWED = USERHOST_MAX_CLIENT_QUEUE_BYTES + USERHOST_MAX_FRAME_BYTES
"""What the stalled client is owed at most before the host disconnects it: the most a host queues for a
client (max_client_queue_bytes), and one maximal message in transit (the one the host is writing, with what
the operating system buffers)."""
STALL_LIMIT = OWED // USERHOST_ATTACHMENT_READ_MAX_CHARS
"""The maximal chunk reads the stalled client asks for: their answers (each longer than max_chars) come to
more than OWED."""
STALL_PACE = 0.02
"""Seconds between the stalled client's requests: it stalls for a while, so that a host that lets it block
the others shows it."""
BASELINE_CALLS = 30


async def answers(host: HostSession, connection: Connection, who: str) -> None:
    """Fail unless the client's cheapest request (a cancel of an unknown id) is answered."""
    message = await host.request("plugin/client/cancel", {"id": PROBE_ID}, on=connection)
    host.expect(
        message.get("result") == {"cancelled": False}, f"{who}: a request failed: {message.get('error')}"
    )


async def all_answer(host: HostSession, connections: list[Connection], when: str) -> None:
    """Every client's request is answered (all at once)."""
    await asyncio.gather(*(answers(host, c, f"client {c.label} ({when})") for c in connections))


async def closed(host: HostSession, connection: Connection, what: str) -> None:
    """Wait until the host has closed the connection (EOF); fail if it does not within the timeout."""
    try:
        await asyncio.wait_for(connection.closed.wait(), host.timeout)
    except TimeoutError:
        host.expect(
            False, f"the host did not close client {connection.label} within {host.timeout:g} s {what}"
        )


async def attach_all(host: HostSession) -> list[Connection]:
    """The first client initialized, then socket clients up to the host's limit: every transport there is."""
    await host.initialize()
    clients = [host.main]
    for _ in range(USERHOST_MAX_CLIENT_TRANSPORTS - 1):
        clients.append(await host.client())
    return clients


async def refused(host: HostSession, what: str) -> None:
    """One transport more than the host serves: its first request gets too_many_clients, then EOF."""
    extra = await host.connect()
    message = await host.request("initialize", initialize_params(), on=extra)
    host.expect_error(message, "too_many_clients", f"the first request of a transport {what}")
    await closed(host, extra, "after refusing it with too_many_clients")


async def join(host: HostSession, what: str) -> Connection:
    """A new initialized socket client once a transport has left: a refusal (too_many_clients, the leaving
    one not yet detached) is retried until the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + host.timeout
    while True:
        connection = await host.connect()
        message = await host.request("initialize", initialize_params(), on=connection)
        if "result" in message:
            return connection
        host.expect(
            code_of(message) == "too_many_clients" and loop.time() < deadline,
            f"a new client {what} was not admitted within {host.timeout:g} s: {message.get('error')}",
        )
        await closed(host, connection, "after refusing it with too_many_clients")


@USERHOST.case("clients.shutdown-detaches")
async def shutdown_detaches(host: HostSession) -> None:
    """shutdown is answered {} and then that transport is closed (EOF), a socket client's and the stdio
    client's alike, while the other clients' requests are still answered and new clients are admitted."""
    await host.initialize()
    if not host.has_socket:
        host.expect(await host.ok("shutdown", {}) == {}, "shutdown answered a non-empty result")
        await closed(host, host.main, "after answering its shutdown")
        return
    leaving, staying = await host.client(), await host.client()
    host.expect(await host.ok("shutdown", {}, on=leaving) == {}, "shutdown answered a non-empty result")
    await closed(host, leaving, "after answering its shutdown")
    await all_answer(host, [host.main, staying], "after another client's shutdown")
    host.expect(
        await host.ok("shutdown", {}) == {}, "the stdio client's shutdown answered a non-empty result"
    )
    await closed(host, host.main, "(stdio) after answering its shutdown")
    joining = await host.connect()
    await host.initialize(on=joining)
    await all_answer(host, [staying, joining], "after the stdio client's shutdown")


@USERHOST.case("clients.eof-detaches")
async def eof_detaches(host: HostSession) -> None:
    """With 16 transports attached, one socket client's EOF detaches it alone: a new client is then admitted
    (not too_many_clients), and every other client's requests are still answered."""
    clients = await attach_all(host)
    leaving = clients.pop(1)
    leaving.close_output()
    clients.append(await join(host, "after a client's EOF"))
    await all_answer(host, clients, "after another client's EOF")


@USERHOST.case("clients.max-transports")
async def max_transports(host: HostSession) -> None:
    """16 client transports (the stdio client and 15 socket clients) are served at once; a 17th gets
    too_many_clients for its first request and is closed, and the 16 are still served."""
    clients = await attach_all(host)
    await all_answer(host, clients, "with 16 transports attached")
    await refused(host, "beyond the 16th")
    await all_answer(host, clients, "after a 17th transport was refused")


@USERHOST.case("clients.stdio-only-ends")
async def stdio_only_ends(host: HostSession) -> None:
    """A host serving only stdio exits after its client's EOF, also when that client has admitted an input
    (with wuu.personal) just before. A host that also serves {socket} is not stdio-only: the stdio client's
    EOF detaches only that client (with 16 transports attached, a new client is then admitted) and the host
    goes on serving the others."""
    if host.has_socket:
        clients = await attach_all(host)
        stdio = clients.pop(0)
        stdio.close_output()
        clients.append(await join(host, "after the stdio client's EOF"))
        await all_answer(host, clients, "after the stdio client's EOF")
        return
    await host.initialize()
    if host.serves_personal:
        await send(host, "admitted just before the stdio client's EOF")
    host.main.close_output()
    await host.exited("its only client's EOF")


@dataclass(frozen=True)
class Stall:
    """How the stalled client's requests went."""

    sent: int
    """Requests sent (the initialize included)."""
    disconnected: bool
    """Whether the host closed the connection."""
    blocked: bool
    """Whether the host stopped reading the client's requests without closing."""
    seconds: float
    """From the first request to the end."""


def stalled_client(path: Path, lines: list[bytes], timeout: float) -> Stall:
    """Connect, send `lines` one by one at STALL_PACE and never read, then cancels of an unknown id at the
    same pace for up to `timeout` s (a host that answers more slowly than the lines come has the time to catch
    up), until the host closes the connection (a write fails). Blocking: it runs in a thread, away from the
    case's event loop."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        client.connect(str(path))
        started = time.monotonic()
        sent = 0
        try:
            for line in lines:
                client.sendall(line)
                sent += 1
                time.sleep(STALL_PACE)
            while time.monotonic() - started < len(lines) * STALL_PACE + timeout:
                client.sendall(frame(len(lines) + sent, "plugin/client/cancel", {"id": PROBE_ID}))
                sent += 1
                time.sleep(STALL_PACE)
        except (BrokenPipeError, ConnectionResetError):
            return Stall(sent, True, False, time.monotonic() - started)
        except TimeoutError:
            return Stall(sent, False, True, time.monotonic() - started)
        return Stall(sent, False, False, time.monotonic() - started)


def frame(request_id: int, method: str, params: dict[str, object]) -> bytes:
    """One request line, as the stalled client writes it."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return json.dumps(message).encode("utf-8") + b"\n"


def ninetieth(samples: list[float]) -> float:
    """The 90th percentile of `samples` (the nearest sample below it)."""
    ordered = sorted(samples)
    return ordered[int(0.9 * (len(ordered) - 1))]


async def round_trip(host: HostSession, connection: Connection) -> float:
    """Seconds one cheap request of the client takes to be answered."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await answers(host, connection, f"client {connection.label}")
    return loop.time() - started


@USERHOST.case("clients.stalled-reader")
async def stalled_reader(host: HostSession) -> None:
    """A socket client that asks for maximal attachment chunks and never reads is disconnected before it is
    owed max_client_queue_bytes + max_frame_bytes (then it only sends cancels, whose answers are small, for up
    to the reply timeout); meanwhile another client's requests are answered as before (its slowest wait is
    under half the stall, or within 20 times its 90th percentile before the stall: a loaded 2-core machine
    was seen to pause it for a third of the stall), and after it."""
    main = await open_main(host)
    steady = await host.client()
    receipt = await send(
        host, "a chunk for the stalled reader", [attachment(content(CHUNK_BYTES), "chunk.bin")]
    )
    chunk = {
        "session_id": main,
        "attachment_id": receipt["attachments"][0]["attachment_id"],
        "offset": 0,
        "max_chars": USERHOST_ATTACHMENT_READ_MAX_CHARS,
    }
    read: dict[str, object] = {"plugin_id": PERSONAL, "method": ATTACHMENT_READ, "params": chunk}
    lines = [frame(1, "initialize", initialize_params())]
    lines += [frame(number, "plugin/client/request", read) for number in range(2, STALL_LIMIT + 2)]
    baseline = [await round_trip(host, steady) for _ in range(BASELINE_CALLS)]
    stalling = asyncio.create_task(asyncio.to_thread(stalled_client, host.socket_path, lines, host.timeout))
    during: list[float] = []
    try:
        while not stalling.done():
            during.append(await round_trip(host, steady))
    finally:
        stall = await stalling
    host.expect(
        not stall.blocked,
        f"the host stopped reading a client that does not read ({stall.sent} requests) without closing it",
    )
    host.expect(
        stall.disconnected,
        f"the host did not disconnect a client that read none of the answers to {STALL_LIMIT} reads of "
        f"{USERHOST_ATTACHMENT_READ_MAX_CHARS} base64 characters (over {OWED} bytes)",
    )
    slowest, allowed = max(during), max(stall.seconds / 2, 20 * ninetieth(baseline))
    host.expect(
        slowest <= allowed,
        f"while a client did not read, another client waited {slowest * 1e3:.1f} ms for an answer "
        f"(the stall took {stall.seconds * 1e3:.0f} ms; before it, its 90th percentile was "
        f"{ninetieth(baseline) * 1e3:.2f} ms)",
    )
    await answers(host, steady, "the steady client, after the stalled client was disconnected")
    await answers(host, host.main, "the stdio client, after the stalled client was disconnected")
