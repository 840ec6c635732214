"""Backpressure over the Unix socket: a client that stops reading its socket is disconnected once its
outgoing queue is full, the work it admitted still completes, and the host's other 15 clients do not wait
for it: their p99 latency stays within 2x of rounds without it, measured in the same test.

Short rounds with and without the stalled client alternate (in pairs ordered AB, BA, AB, ...), so that a
burst of load from elsewhere (these machines are shared and noisy) falls on both kinds alike, and each kind
gathers thousands of samples, so that its p99 rests on dozens of calls rather than on one hiccup.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, until
from tests.host.userhost.test_fuzz import INITIALIZE, request
from wuu.generated.models import AgentsMainSessionParams
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.client import UserHostClient

SCALE = int(os.environ.get("WUU_CHAOS_SCALE", "1"))
STEADY_CLIENTS = 15
ROUNDS = 16 * SCALE
"""Rounds of each kind."""
ROUND_SECONDS = 0.25
CALL_INTERVAL = 0.01
"""Each steady client calls every 10 ms: 1,500 calls a second in all, 375 samples a round."""
MAX_QUEUED_BYTES = 64 * 1024
STALL_INTERVAL = 0.001
"""The stalled client sends a request every millisecond until the host drops it (a burst would measure
the host's work on the burst, not its waiting for the client)."""
# A request with a long unknown member: the host answers it with `invalid_request` naming the member, about
# 4 KiB, at the cost of an envelope check. Some hundreds of them fill the socket's buffers and the queue.
LONG_MEMBER = "m" * 4000


def big_answer(request_id: int) -> bytes:
    """A request the host answers with about 4 KiB (the same id each time: an answer is never in flight)."""
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"initialize","params":{{}},"{LONG_MEMBER}":1}}\n'.encode()


@pytest.fixture
async def small_queue_server(host: UserHost, run_dir: Path) -> AsyncIterator[UnixServer]:
    """The host's socket, with a 64 KiB outgoing queue per client (the bound is reached in a few hundred
    answers)."""
    server = await UnixServer.start(host, run_dir / "userhost.sock", max_queued_bytes=MAX_QUEUED_BYTES)
    yield server
    await server.close()


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def steady(client: UserHostClient, until_time: float, latencies: list[float]) -> None:
    """Call the cheap plugin method every CALL_INTERVAL until `until_time`; each call must succeed."""
    due = time.monotonic()
    while due < until_time:
        sent = time.monotonic()
        result = await client.plugin_call("wuu.test", "agents.main_session", AgentsMainSessionParams())
        latencies.append(time.monotonic() - sent)
        assert result.to_wire() == {"session_id": "main"}
        due += CALL_INTERVAL
        await asyncio.sleep(max(0.0, due - time.monotonic()))  # the steady rate is the clients' load


def stalled_client(path: Path, first: bytes, big: bytes) -> tuple[int, int]:
    """A blocking client (run in a thread, so that its writing does not share the event loop with the steady
    clients, whose latency is the figure): sends `first`, then `big` until the host closes the socket, never
    reading; then reads what came. Returns the requests sent and the bytes received."""
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(DEADLINE)  # a host that never closes it fails the test, not hangs it
        client.connect(str(path))
        client.sendall(first)
        sent = 0
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while sent < 20_000:
                client.sendall(big)
                sent += 1
                time.sleep(STALL_INTERVAL)  # its pace: about 4 MiB of answers a second
        received = 0
        with contextlib.suppress(ConnectionResetError):
            while chunk := client.recv(1 << 20):
                received += len(chunk)
    return sent, received


async def stall(host: UserHost, server: UnixServer, state: Path, round_index: int) -> None:
    """A client that admits work, then sends requests and never reads: the host must drop it, its work must
    still complete."""
    search = {"session_id": "main", "query": f"admit:stalled-{round_index}:0.1"}
    admit = {"plugin_id": "wuu.test", "method": "agents.history.search", "params": search}
    first = request(1, "initialize", INITIALIZE) + request(2, "plugin/client/request", admit)
    sent, received = await asyncio.to_thread(stalled_client, server.path, first, big_answer(3))
    assert sent < 20_000, "the host never dropped a client that does not read"
    # The host closed the socket with answers unwritten: fewer bytes came than the answers due (each
    # answer holds the long member's name).
    assert received < sent * len(LONG_MEMBER), (received, sent)
    await until(lambda: host.clients == STEADY_CLIENTS, "the host to detach the stalled client")
    await until(lambda: (state / f"stalled-{round_index}").exists(), "the stalled client's admitted work")


async def test_a_stalled_client_is_dropped_and_delays_nobody(
    host: UserHost, small_queue_server: UnixServer, home: Path
) -> None:
    state = home / "user-spaces" / "local" / "personal" / "state"
    clients = [await UserHostClient.connect_unix(small_queue_server.path) for _ in range(STEADY_CLIENTS)]
    for client in clients:
        await client.initialize()
    latencies: dict[bool, list[float]] = {False: [], True: []}
    for round_index in range(2 * ROUNDS):
        stalled = round_index % 2 != (round_index // 2) % 2
        end = time.monotonic() + ROUND_SECONDS
        work = [steady(client, end, latencies[stalled]) for client in clients]
        if stalled:
            work.append(stall(host, small_queue_server, state, round_index))
        await asyncio.gather(*work)
    for client in clients:
        assert client.lost is None
        await client.close()

    quiet, loaded = p99(latencies[False]), p99(latencies[True])
    print("P99", quiet * 1e3, loaded * 1e3, len(latencies[False]), len(latencies[True]))
    assert min(map(len, latencies.values())) >= 300 * ROUNDS, {k: len(v) for k, v in latencies.items()}
    assert loaded <= 2 * quiet, (
        f"p99 {loaded * 1e3:.2f} ms with a stalled client, {quiet * 1e3:.2f} ms without "
        f"({len(latencies[True])} and {len(latencies[False])} calls)"
    )
