"""The user-host RPC on a byte stream: JSON-RPC 2.0, one message per line (spec/schema/userhost/envelope.schema.json).

One `NdjsonConnection` serves one client on a stream pair (stdio, or one accepted Unix socket connection):
it reads lines of at most `USERHOST_MAX_FRAME_BYTES`, checks each envelope, submits requests to the
client's session and writes each response, in the order the requests finish, through a bounded outbox.
A line over the limit is answered `parse_error` and skipped without being held in memory; a client that
stops reading is disconnected once its outbox is full. On a socket, a client that has not completed
`initialize` within the initialize deadline is closed, freeing its transport; a client the host cannot
take is answered from a small, bounded read of its first request and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson

from wuu.generated.catalog import USERHOST_INITIALIZE_DEADLINE_SECONDS, USERHOST_MAX_FRAME_BYTES
from wuu.generated.models import UserHostErrorCode
from wuu.worker.framing import FrameOverLimit, MalformedFrame
from wuu.worker.outbox import Outbox

from .authority import UserHost
from .envelope import FRAMING, RequestId, error_response, usable_id
from .errors import UserHostError
from .protocol import Refusal, decode, outcome, reply, too_large
from .session import ClientSession

log = logging.getLogger("wuu.host.userhost")

DEFAULT_OUTBOX_BYTES = USERHOST_MAX_FRAME_BYTES
"""The default bound of a client's outgoing queue: one maximal message."""
DEFAULT_INITIALIZE_SECONDS = USERHOST_INITIALIZE_DEADLINE_SECONDS
"""How long a socket client may take to complete `initialize` (the spec's least deadline)."""
REFUSAL_PEEK_BYTES = 4096
"""How much of a refused client's input is read to find its first request's id."""
REFUSAL_SECONDS = 1.0
"""How long a refused client's first request is waited for."""
CLOSE_GRACE_SECONDS = 5.0
"""How long what is queued for a client that is being closed may take to be written before the connection
is cut: a client that never reads cannot keep its connection open."""


class NdjsonConnection:
    """One client of a user host on a stream pair."""

    def __init__(
        self,
        host: UserHost,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        transport: str,
        *,
        output_closed: asyncio.Event | None = None,
        max_queued_bytes: int = DEFAULT_OUTBOX_BYTES,
        initialize_timeout: float | None = None,
        initialized: Callable[[], None] | None = None,
    ) -> None:
        """`reader` must admit a line of `USERHOST_MAX_FRAME_BYTES` (`FRAMING.stream_limit`). With
        `initialize_timeout`, a client that has not completed `initialize` within that many seconds is told
        so (`not_initialized`, a null id) and closed; `initialized` is called once it has."""
        self._host = host
        self._reader = reader
        self._input = writer.transport
        self._transport = transport
        self._initialize_timeout = initialize_timeout
        self._initialized = initialized
        self._deadline: asyncio.TimerHandle | None = None
        self._awaiting_initialize = True
        self._outbox = Outbox(
            writer, remote=f"the {transport} client", closed=output_closed, max_queued_bytes=max_queued_bytes
        )
        self._ended = asyncio.Event()
        self._session: ClientSession | None = None

    async def serve(self) -> None:
        """Serve the client until its input ends, it shuts down, or its output fails; then detach it."""
        try:
            self._session = self._host.attach(self._transport, self._send, self._end)
        except UserHostError as error:
            await self._refuse(error)
            return
        if self._initialize_timeout is not None:
            self._deadline = asyncio.get_running_loop().call_later(
                self._initialize_timeout, self._initialize_expired
            )
        reading = asyncio.create_task(self._read())
        stops = {
            reading,
            asyncio.create_task(self._ended.wait()),
            asyncio.create_task(self._outbox.closed.wait()),
        }
        try:
            await asyncio.wait(stops, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if self._deadline is not None:
                self._deadline.cancel()
            for task in stops:
                task.cancel()
            await asyncio.gather(*stops, return_exceptions=True)
            self._session.detach()
            await self._close_output()

    async def _refuse(self, error: UserHostError) -> None:
        """Answer the first request of a client the host cannot take with `error`, then close."""
        self._send(error_response(await self._first_request_id(), error))
        await self._close_output()

    async def _close_output(self) -> None:
        """Write what is queued and close the output, cutting the connection after CLOSE_GRACE_SECONDS."""
        self._outbox.end()
        try:
            async with asyncio.timeout(CLOSE_GRACE_SECONDS):
                await self._outbox.wait_closed()
        except TimeoutError:
            log.info("cut a client that did not read its last messages", extra={"transport": self._transport})
            self._input.abort()
            self._outbox.abort()
            await self._outbox.wait_closed()

    async def _first_request_id(self) -> RequestId | None:
        """The id of a refused client's first request, if that request's line comes whole within
        REFUSAL_PEEK_BYTES and REFUSAL_SECONDS; then nothing more of the client's input is read (the
        socket's own buffer bounds what it can still send)."""
        data = b""
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(REFUSAL_SECONDS):
                while b"\n" not in data and len(data) < REFUSAL_PEEK_BYTES:
                    chunk = await self._reader.read(REFUSAL_PEEK_BYTES - len(data))
                    if not chunk:
                        break
                    data += chunk
        if not self._input.is_closing():
            self._input.pause_reading()  # type: ignore[attr-defined]
        line, newline, _ = data.partition(b"\n")
        try:
            message = orjson.loads(line) if newline else None
        except orjson.JSONDecodeError:
            return None
        return usable_id(message.get("id")) if isinstance(message, dict) else None

    def _initialize_expired(self) -> None:
        """The initialize deadline has passed: a client that has not initialized is closed."""
        assert self._session is not None
        if self._session.initialized:
            return
        log.info(
            "closed a client that did not initialize in time",
            extra={"transport": self._transport, "seconds": self._initialize_timeout},
        )
        late = UserHostError(
            UserHostErrorCode.NOT_INITIALIZED,
            f"no initialize within {self._initialize_timeout:g} s: the connection is closed",
        )
        self._send(error_response(None, late))
        self._ended.set()

    async def _read(self) -> None:
        while True:
            try:
                line = await FRAMING.read_line(self._reader)
            except FrameOverLimit as error:
                if error.rest_unread:
                    await FRAMING.skip_line(self._reader)
                self._send(error_response(None, UserHostError(UserHostErrorCode.PARSE_ERROR, str(error))))
                continue
            except MalformedFrame as error:  # the input ended inside a line
                self._send(error_response(None, UserHostError(UserHostErrorCode.PARSE_ERROR, str(error))))
                return
            if line is None:
                return
            self._receive(line)

    def _receive(self, line: bytes) -> None:
        """Submit one message to the session, or answer what is wrong with it; nothing is fatal."""
        assert self._session is not None
        request = decode(line)
        if request is None:
            return
        if isinstance(request, Refusal):
            self._send(request.to_wire())
            return
        result = self._session.submit(request)
        if self._awaiting_initialize and self._session.initialized:
            self._awaiting_initialize = False
            if self._deadline is not None:
                self._deadline.cancel()
            if self._initialized is not None:
                self._initialized()
        if result.done():
            self._respond(request.id, result)
        else:
            result.add_done_callback(lambda done: self._respond(request.id, done))

    def _respond(self, request_id: RequestId, result: asyncio.Future[dict[str, Any]]) -> None:
        self._send(reply(request_id, outcome(result, request_id)))

    def _send(self, message: dict[str, Any]) -> None:
        data = orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)
        if "id" in message and (error := too_large(len(data))) is not None:
            data = orjson.dumps(error_response(message["id"], error), option=orjson.OPT_APPEND_NEWLINE)
        self._outbox.put(data)

    def _end(self) -> None:
        """The session is done with this transport: stop reading; what is queued is still written."""
        self._ended.set()

    def stop(self) -> None:
        """End this connection as if the client had gone (the server is closing)."""
        self._ended.set()
