"""The peer core: one end of one framed connection, whatever protocol it carries.

Both ends of a framed connection do the same things: read frames and end the connection at a malformed
one, write whole frames in order, match the replies they receive to the requests they sent, and fail
every request still pending when the connection ends. `Peer` does them once. A protocol gives it an
`Envelope` with its rules for whole frames (the worker protocol's is `envelope.WORKER_ENVELOPE`, the
user-host client's is in `wuu.host.userhost.client`), and each end an `Endpoint` with its own rules for
the requests and notifications it receives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .frame_reader import FrameReader
from .framing import Frame, FrameTooLarge, Framing, MalformedFrame, OutputClosed
from .outbox import Outbox
from .transcript import Transcript

log = logging.getLogger("wuu.worker.peer")

Id = TypeVar("Id")
Id_contra = TypeVar("Id_contra", contravariant=True)


class ConnectionLost(Exception):
    """The connection ended with the request in flight: its outcome is unknown, and it is not retried."""


@dataclass(frozen=True, slots=True)
class Envelope(Generic[Id]):
    """One protocol's rules for whole frames, which the peer applies to every frame it reads or sends.

    A frame with a method and no id is a notification, with a method and an id a request, with neither
    a method nor any of `request_keys` a reply.
    """

    framing: Framing
    """The frame codec, at the protocol's frame limit."""
    frame_id: Callable[[object], Id]
    """A frame's `id` as one of the protocol's ids; MalformedFrame (saying why) if it is not one."""
    request_keys: frozenset[str]
    """Keys only a request carries: a frame with one of them and no method is malformed, not a reply."""
    reply_too_large: Callable[[Frame, FrameTooLarge], Frame] | None
    """What is sent instead of a reply over the frame limit; None: such a reply raises FrameTooLarge."""


class Endpoint(Protocol[Id_contra]):
    """What one end does with the requests and notifications it receives (replies are the peer's)."""

    def on_request(self, frame_id: Id_contra, method: str, frame: Frame) -> str | None:
        """Take a request frame (its id is valid for the protocol); return why it is malformed, or None."""

    def on_notification(self, method: str, frame: Frame) -> str | None:
        """Take a frame with a method and no id; return why it is malformed, or None."""


class Peer(Generic[Id]):
    """One framed connection over a stream pair: frames in, frames out, replies matched to requests.

    `read()` routes incoming frames until the connection ends. `send()` queues a frame; one writer
    task writes them in order and releases each once written. `request()` sends a request and
    gives a future for its reply frame, which fails with ConnectionLost if the connection ends first.
    A reply naming no request in flight is ignored when `ignore_unknown_replies` (the peer may have
    given up on it), else it is a malformed frame.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        endpoint: Endpoint[Id],
        envelope: Envelope[Id],
        *,
        remote: str,
        ignore_unknown_replies: bool = False,
        transcript: Transcript | None = None,
        output_closed: asyncio.Event | None = None,
    ) -> None:
        """`remote` names the other end in messages ("the worker"); `output_closed` may be set from outside
        when the output is known to be gone (a pipe's reader went away while nothing was being written)."""
        self.framing = envelope.framing
        self.transcript = transcript or Transcript(enabled=False)
        self.lost: str | None = None
        """Why the connection ended; None while it is open."""
        self._reader = reader
        self._endpoint = endpoint
        self._remote = remote
        self._ignore_unknown_replies = ignore_unknown_replies
        self._frame_id = envelope.frame_id
        self._request_keys = envelope.request_keys
        self._reply_too_large = envelope.reply_too_large
        self._pending: dict[object, asyncio.Future[Frame]] = {}
        self._outbox = Outbox(writer, remote=remote, closed=output_closed, sent=self.transcript.sent)

    # --- input ---------------------------------------------------------------------------------

    async def read(self) -> str:
        """Route incoming frames until the input ends, a frame is malformed, or the output fails.

        Returns why the connection ended (also kept in `lost`); every request still pending then
        fails with ConnectionLost. The output stays open for what the caller still has to send.
        A FrameReader's lines are routed by its listener as they arrive (its limit is the frame limit);
        any other stream is read by a task.
        """
        reading: asyncio.Future[str] = (
            self._listen()
            if isinstance(self._reader, FrameReader)
            else asyncio.create_task(self._read_loop())
        )
        output: asyncio.Future[object] = asyncio.create_task(self._outbox.closed.wait())
        await asyncio.wait((reading, output), return_when=asyncio.FIRST_COMPLETED)
        if reading.done():
            reason = reading.result()
        else:  # the output failed: the connection ends even while input is blocked
            reason = self._outbox.reason
            reading.cancel()
            if isinstance(self._reader, FrameReader):
                self._reader.stop()
        output.cancel()
        await asyncio.gather(reading, output, return_exceptions=True)
        self.lose(reason)
        return reason

    def _listen(self) -> asyncio.Future[str]:
        assert isinstance(self._reader, FrameReader)
        ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def take(line: bytes) -> bool:
            try:
                reason = self._take(line)
            except Exception as error:  # an endpoint's bug ends the connection, raised by read()
                ended.set_exception(error)
                return False
            if reason is None:
                return True
            ended.set_result(reason)
            return False

        def end(error: Exception | None) -> None:
            if not ended.done():
                ended.set_result(self._input_end(error))

        self._reader.listen(take, end)
        return ended

    async def _read_loop(self) -> str:
        while True:
            try:
                line = await self.framing.read_line(self._reader)
            except (ConnectionError, MalformedFrame) as error:
                return self._input_end(error)
            if line is None:
                return self._input_end(None)
            reason = self._take(line)
            if reason is not None:
                return reason

    def _take(self, line: bytes) -> str | None:
        """Route one frame line; why the connection ends, or None."""
        self.transcript.received(line)
        try:
            problem = self._route(self.framing.decode(line))
        except MalformedFrame as error:
            problem = str(error)
        return None if problem is None else self._malformed(problem)

    def _input_end(self, error: Exception | None) -> str:
        """Why the connection ends when the input does: cleanly (None), inside or past a frame, or reset."""
        if error is None:
            return f"{self._remote} closed its output"
        if isinstance(error, MalformedFrame):
            if error.data:
                self.transcript.received(error.data)
            return self._malformed(str(error))
        # a reset, not an EOF: the peer died with bytes unread
        return f"the connection to {self._remote} failed: {error}"

    def _malformed(self, problem: str) -> str:
        log.warning("malformed frame from %s: %s", self._remote, problem)
        return f"malformed frame from {self._remote}: {problem}"

    def _route(self, frame: Frame) -> str | None:
        """Route one frame; return why it is malformed, or None (MalformedFrame for a bad id)."""
        method = frame.get("method")
        if "method" in frame and not isinstance(method, str):
            return "method is not a string"
        if "id" not in frame and method is not None:
            return self._endpoint.on_notification(method, frame)
        if method is None and not self._request_keys.isdisjoint(frame):
            return "a request without a method"  # its keys make it a request, not a reply to ignore
        frame_id = self._frame_id(frame.get("id"))
        if method is not None:
            return self._endpoint.on_request(frame_id, method, frame)
        waiter = self._pending.pop(frame_id, None)
        if waiter is None or waiter.done():
            if self._ignore_unknown_replies:
                log.warning("a reply names no request in flight: %r", frame_id)
                return None
            return f"a reply to {frame_id!r}, which is not in flight"
        waiter.set_result(frame)
        return None

    async def discard_input(self) -> None:
        """Read and drop the rest of the input until it ends (a writer blocked on a full pipe can then
        finish, and exit)."""
        while await self._reader.read(1 << 20):
            pass

    # --- output --------------------------------------------------------------------------------

    def send(self, frame: Frame) -> None:
        """Queue one frame. A reply over the limit is replaced by what the envelope says; any other frame
        over it (or a reply the envelope has no replacement for) raises FrameTooLarge and is not sent."""
        try:
            data = self.framing.encode(frame)
        except FrameTooLarge as error:
            if "id" not in frame or "method" in frame or self._reply_too_large is None:
                raise
            data = self.framing.encode(self._reply_too_large(frame, error))
        self._outbox.put(data)

    async def send_bytes(self, data: bytes) -> None:
        """Write bytes as they are (a test's hand-made frame) and wait until they are written.

        ConnectionLost if the output has failed or fails meanwhile.
        """
        try:
            await self._outbox.put_and_wait(data)
        except OutputClosed as error:
            raise ConnectionLost(str(error)) from None

    def end_output(self) -> None:
        """Close the output once every queued frame is written (the other end then sees EOF)."""
        self._outbox.end()

    async def wait_output_closed(self) -> None:
        """Wait until `end_output` has written everything queued and closed the output."""
        await self._outbox.wait_closed()

    def abort_output(self) -> None:
        """Close the output now, dropping whatever is still queued."""
        self._outbox.abort()

    # --- requests ------------------------------------------------------------------------------

    def expect_reply(self, frame_id: object) -> asyncio.Future[Frame]:
        """A future for the reply to `frame_id`, for a request sent by hand (`send` or `send_bytes`)."""
        if self.lost is not None:
            raise ConnectionLost(self.lost)
        waiter: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._pending[frame_id] = waiter
        waiter.add_done_callback(self._forget(frame_id))
        return waiter

    def in_flight(self, frame_id: object) -> bool:
        """Whether a request sent with this id still awaits its reply."""
        return frame_id in self._pending

    def request(self, frame: Frame) -> asyncio.Future[Frame]:
        """Send a request frame; a future for its reply frame. FrameTooLarge if it is over the limit."""
        waiter = self.expect_reply(frame["id"])
        try:
            self.send(frame)
        except FrameTooLarge:
            waiter.cancel()
            raise
        return waiter

    def _forget(self, frame_id: object) -> Callable[[asyncio.Future[Frame]], None]:
        def done(waiter: asyncio.Future[Frame]) -> None:
            if self._pending.get(frame_id) is waiter:
                del self._pending[frame_id]
            if not waiter.cancelled():
                waiter.exception()  # a reply nobody awaits any more is not an unhandled error

        return done

    def lose(self, reason: str) -> None:
        """The connection has ended: fail every pending request with ConnectionLost (outcome unknown)."""
        if self.lost is not None:
            return
        self.lost = reason
        for waiter in list(self._pending.values()):
            if not waiter.done():
                waiter.set_exception(ConnectionLost(f"{reason}; the outcome of the call is unknown"))
        self._pending.clear()
