"""The peer core applies whatever envelope a protocol gives it, and the worker protocol's envelope its rules.

The envelope's rules are plain functions, checked here without a connection; the peer is checked over a real
socket pair, once with the worker protocol's envelope and once with a made-up protocol's (integer ids, a small
frame limit, no stand-in for an oversize reply), so no rule of either hides in the core.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from tests.helpers import DEADLINE
from wuu.generated.catalog import WORKER_MAX_ID_BYTES
from wuu.worker.envelope import WORKER_ENVELOPE, frame_id, reply_too_large, request_ids
from wuu.worker.framing import Frame, FrameTooLarge, Framing, MalformedFrame
from wuu.worker.peer import ConnectionLost, Envelope, Peer

# --- the worker protocol's envelope, without a connection -----------------------------------------


@pytest.mark.parametrize("value", ["1", "h-2", "é" * (WORKER_MAX_ID_BYTES // 2), "x" * WORKER_MAX_ID_BYTES])
def test_a_frame_id_is_a_non_empty_string_of_at_most_256_bytes(value: str) -> None:
    assert frame_id(value) == value


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "no string id"),
        ("", "no string id"),
        (1, "no string id"),
        (["1"], "no string id"),
        ("x" * (WORKER_MAX_ID_BYTES + 1), f"id over {WORKER_MAX_ID_BYTES} bytes"),
        (
            "é" * (WORKER_MAX_ID_BYTES // 2 + 1),
            f"id over {WORKER_MAX_ID_BYTES} bytes",
        ),  # bytes, not characters
    ],
)
def test_anything_else_is_a_malformed_frame_saying_why(value: object, problem: str) -> None:
    with pytest.raises(MalformedFrame, match=f"^{problem}$"):
        frame_id(value)


def test_an_oversize_reply_becomes_the_error_reply_too_large_for_the_same_request() -> None:
    stand_in = reply_too_large({"id": "h7", "data": {"huge": "..."}}, FrameTooLarge("20 bytes is over 10"))
    assert stand_in == {"id": "h7", "error": "reply_too_large: 20 bytes is over 10"}


def test_each_end_numbers_its_requests_from_1_under_its_own_prefix() -> None:
    host, worker = request_ids("h"), request_ids("cb-")
    assert [next(host), next(host), next(worker), next(host)] == ["h1", "h2", "cb-1", "h3"]


# --- the peer core over a socket pair ---------------------------------------------------------------


def _int_id(value: object) -> int:
    if type(value) is not int:
        raise MalformedFrame("the id is not an integer")
    return value


SMALL = Envelope(framing=Framing(64), frame_id=_int_id, request_keys=frozenset({"ask"}), reply_too_large=None)
"""A made-up protocol: integer ids, frames of at most 64 bytes, `ask` only on requests, no oversize reply."""


@dataclass
class Recorder:
    """An endpoint that records what it is handed."""

    requests: list[tuple[Any, str]] = field(default_factory=list)
    notifications: list[str] = field(default_factory=list)

    def on_request(self, frame_id: Any, method: str, frame: Frame) -> str | None:
        self.requests.append((frame_id, method))
        return None

    def on_notification(self, method: str, frame: Frame) -> str | None:
        self.notifications.append(method)
        return None


@dataclass
class Link:
    """A peer reading one end of a socket pair; the test writes and reads the other end's raw bytes."""

    peer: Peer[Any]
    endpoint: Recorder
    reading: asyncio.Task[str]
    other_reader: asyncio.StreamReader
    other_writer: asyncio.StreamWriter

    def write(self, *frames: Frame) -> None:
        self.other_writer.write(b"".join(orjson.dumps(frame) + b"\n" for frame in frames))

    async def ends(self) -> str:
        """Why the peer's connection ended, once the other end has stopped writing."""
        self.other_writer.write_eof()
        return await asyncio.wait_for(self.reading, DEADLINE)

    async def received(self) -> Frame:
        frame: Frame = orjson.loads(await asyncio.wait_for(self.other_reader.readline(), DEADLINE))
        return frame


LinkTo = Callable[[Envelope[Any]], Awaitable[Link]]


@pytest.fixture
async def link_to() -> AsyncIterator[LinkTo]:
    links: list[Link] = []

    async def connect(envelope: Envelope[Any]) -> Link:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)
        other_reader, other_writer = await asyncio.open_connection(sock=theirs)
        endpoint = Recorder()
        peer = Peer(reader, writer, endpoint, envelope, remote="the other end")
        link = Link(peer, endpoint, asyncio.create_task(peer.read()), other_reader, other_writer)
        links.append(link)
        return link

    yield connect
    for link in links:
        link.reading.cancel()
        link.peer.abort_output()
        link.other_writer.close()
    await asyncio.gather(*(link.reading for link in links), return_exceptions=True)


async def test_the_peer_routes_each_kind_of_frame_by_the_envelopes_ids(link_to: LinkTo) -> None:
    link = await link_to(SMALL)
    reply = link.peer.request({"id": 7, "method": "ping"})
    assert await link.received() == {"id": 7, "method": "ping"}
    link.write({"id": 3, "method": "hello"}, {"method": "note"}, {"id": 7, "ok": True})
    assert await asyncio.wait_for(reply, DEADLINE) == {"id": 7, "ok": True}
    assert await link.ends() == "the other end closed its output"
    assert link.endpoint.requests == [(3, "hello")]
    assert link.endpoint.notifications == ["note"]


@pytest.mark.parametrize(
    ("envelope", "frame", "problem"),
    [
        (SMALL, {"id": "3", "method": "hello"}, "the id is not an integer"),
        (WORKER_ENVELOPE, {"id": 3, "method": "hello"}, "no string id"),
        (SMALL, {"id": 3, "ask": 1}, "a request without a method"),
        (WORKER_ENVELOPE, {"id": "3", "token": "t"}, "a request without a method"),
        (WORKER_ENVELOPE, {"id": "3", "parent": "h1"}, "a request without a method"),
    ],
)
async def test_a_frame_against_the_envelopes_rules_ends_the_connection(
    link_to: LinkTo, envelope: Envelope[Any], frame: Frame, problem: str
) -> None:
    link = await link_to(envelope)
    pending = link.peer.expect_reply(3 if envelope is SMALL else "3")
    link.write(frame)
    assert await link.ends() == f"malformed frame from the other end: {problem}"
    assert link.endpoint.requests == []
    with pytest.raises(ConnectionLost):
        await pending


async def test_keys_that_make_a_worker_request_are_a_reply_to_another_protocol(link_to: LinkTo) -> None:
    link = await link_to(SMALL)
    reply = link.peer.expect_reply(3)
    link.write({"id": 3, "token": "t"})
    assert await asyncio.wait_for(reply, DEADLINE) == {"id": 3, "token": "t"}


async def test_an_oversize_reply_is_replaced_only_where_the_envelope_says_how(link_to: LinkTo) -> None:
    worker = await link_to(WORKER_ENVELOPE)
    worker.peer.send({"id": "h1", "data": {"text": "x" * WORKER_ENVELOPE.framing.limit}})
    received = await worker.received()
    assert received["id"] == "h1"
    assert received["error"].startswith("reply_too_large: ")

    small = await link_to(SMALL)
    with pytest.raises(FrameTooLarge):
        small.peer.send({"id": 1, "data": "x" * 64})
    small.peer.send({"id": 2, "data": "fits"})
    assert await small.received() == {"id": 2, "data": "fits"}
