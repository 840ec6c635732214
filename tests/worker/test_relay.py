"""The adapter's relay (`wuu.worker.relay`) and its one `initialize` interceptor, over real socket pairs:
what the worker receives for what the host sends, and how each side's end reaches the other."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.helpers import DEADLINE
from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES
from wuu.host.adapter import initialize_interceptor
from wuu.host.backends.base import Environment
from wuu.worker.framing import reader_limit
from wuu.worker.relay import InitializeRewrite, Relay

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def pair() -> tuple[Streams, Streams]:
    """Two connected stream pairs, each end buffering up to the frame limit."""
    left, right = socket.socketpair()
    one = await asyncio.open_connection(sock=left, limit=reader_limit())
    other = await asyncio.open_connection(sock=right, limit=reader_limit())
    return one, other


class Ends:
    """A relay between a host and a worker, each a socket pair: the test plays both ends."""

    def __init__(self, host: Streams, worker: Streams, relay: Relay) -> None:
        self.host_reader, self.host_writer = host
        self.worker_reader, self.worker_writer = worker
        self.relay = relay

    async def send(self, *pieces: bytes) -> None:
        """The host writes, piece by piece, each piece its own write."""
        for piece in pieces:
            self.host_writer.write(piece)
            await self.host_writer.drain()
            await asyncio.sleep(0)  # the relay sees the pieces apart, not as one read

    async def worker_receives(self) -> bytes:
        """Everything the worker receives until the relay's EOF on its input."""
        return await asyncio.wait_for(self.worker_reader.read(), DEADLINE)


@pytest.fixture
async def relayed() -> AsyncIterator[Any]:
    """Start relays (with an optional initialize rewrite) between fresh ends; all are ended after the test."""
    started: list[Ends] = []

    async def start(rewrite: InitializeRewrite | None = None) -> Ends:
        (host, relay_host), (relay_worker, worker) = await pair(), await pair()
        ends = Ends(host, worker, Relay(relay_host, relay_worker, rewrite))
        started.append(ends)
        return ends

    yield start
    for ends in started:
        ends.relay.end_input()
        await ends.relay.finish(0)
        for writer in (ends.host_writer, ends.worker_writer):
            writer.close()


class Subdirectory(Environment):
    """An environment that binds `/ws` as `/ws/c1`, as the ssh backend does for its conversation."""

    async def start(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        raise AssertionError("not started in these tests")

    def rewrite_initialize(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "root": "/ws/c1"} if data.get("root") == "/ws" else data

    async def close(self, budget: float) -> None:
        raise AssertionError("not started in these tests")


def frame(method: str, data: Any, id: str = "1") -> bytes:
    """A request frame, encoded with its newline."""
    return json.dumps({"id": id, "method": method, "token": "t", "data": data}).encode() + b"\n"


def initialize(root: str, **extra: Any) -> bytes:
    """An encoded `initialize` request binding `root`, plus `extra` fields."""
    return frame("initialize", {"version": 4, "root": root, "session": "s", **extra})


async def test_every_initialize_gets_the_binding_and_the_forwarded_variables(relayed: Any) -> None:
    ends = await relayed(initialize_interceptor(Subdirectory(), {"A": "host", "B": "host"}))
    first = initialize("/ws", environment={"B": "binding"})
    # The same initialize again, split anywhere: an equal re-initialize stays equal after the rewrite.
    await ends.send(first, first[:9], first[9:40], first[40:])
    ends.host_writer.write_eof()
    received = (await ends.worker_receives()).splitlines()
    assert len(received) == 2 and received[0] == received[1]
    data = json.loads(received[0])["data"]
    assert data["root"] == "/ws/c1"
    assert data["environment"] == {"A": "host", "B": "binding"}, "the binding's own values win"


async def test_other_frames_and_malformed_ones_reach_the_worker_byte_for_byte(relayed: Any) -> None:
    ends = await relayed(initialize_interceptor(Subdirectory(), {"A": "host"}))
    untouched = [
        frame("execute", {"root": "/ws", "environment": {}}),
        b'{"method": "initialize", "data": \n',
        b"not json at all\n",
        frame("initialize", ["not", "an", "object"]),
        b'{"id":"2","method":"initialize","data":{"root":"/w","environment":"not an object"}}\n',
        json.dumps({"id": "3", "result": "initialize"}).encode() + b"\n",
    ]
    await ends.send(*untouched, b'{"id": "4", "method": "initial')
    ends.host_writer.write_eof()
    assert await ends.worker_receives() == b"".join(untouched) + b'{"id": "4", "method": "initial', (
        "an unterminated last line is passed on at EOF, for the worker to judge"
    )


async def test_an_initialize_spelled_with_escapes_is_rewritten_too(relayed: Any) -> None:
    ends = await relayed(initialize_interceptor(Subdirectory(), {}))
    await ends.send(b'{"id": "1", "method": "initi\\u0061lize", "data": {"root": "/ws"}}\n')
    ends.host_writer.write_eof()
    assert json.loads(await ends.worker_receives())["data"] == {"root": "/ws/c1"}


async def test_without_forwarded_variables_or_a_binding_an_initialize_goes_as_it_came(relayed: Any) -> None:
    ends = await relayed(initialize_interceptor(Subdirectory(), {}))
    sent = b'{"id":"1",  "method":"initialize","data":{"root":"/elsewhere"}}\n'
    await ends.send(sent)
    ends.host_writer.write_eof()
    assert await ends.worker_receives() == sent


async def test_a_line_over_the_frame_limit_ends_the_relay_to_the_worker(relayed: Any) -> None:
    ends = await relayed()
    before = frame("execute", {})
    oversize = b'{"pad": "' + b"x" * WORKER_MAX_FRAME_BYTES + b'"}\n'
    ends.host_writer.write(before + oversize + frame("execute", {}, id="after"))
    # The worker gets what came before, then EOF: the line that no worker may accept never reaches it.
    assert await ends.worker_receives() == before
    await asyncio.wait_for(ends.relay.to_worker, DEADLINE)


async def test_a_frame_of_exactly_the_limit_is_relayed(relayed: Any) -> None:
    ends = await relayed()
    padding = WORKER_MAX_FRAME_BYTES - len(b'{"pad": ""}\n')
    exact = b'{"pad": "' + b"x" * padding + b'"}\n'
    assert len(exact) == WORKER_MAX_FRAME_BYTES
    ends.host_writer.write(exact)
    ends.host_writer.write_eof()
    assert await ends.worker_receives() == exact


async def test_the_hosts_eof_half_closes_the_worker_whose_replies_still_come_back(relayed: Any) -> None:
    ends = await relayed()
    request = frame("execute", {})
    await ends.send(request)
    ends.host_writer.write_eof()
    assert await ends.worker_receives() == request, "the worker sees the request, then EOF"
    reply = b'{"id": "1", "data": {}}\n'
    ends.worker_writer.write(reply)
    await ends.worker_writer.drain()
    ends.worker_writer.close()
    assert await asyncio.wait_for(ends.host_reader.readline(), DEADLINE) == reply
    await asyncio.wait_for(ends.relay.finish(), DEADLINE)  # the worker's EOF ends the relay
