"""The typed host client of the v4 worker protocol: the host's end of a connection, on the peer core.

Every request method of the catalog is a typed coroutine (from the generated `WorkerClientMethods`).
Cancelling the task awaiting a call sends `cancel` for it. A worker that dies, closes its output or
sends a malformed frame fails every call in flight with `ConnectionLost`: the outcome of such a call
is unknown, and the client never retries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from wuu.generated.catalog import WORKER_PROTOCOL_VERSION
from wuu.generated.clients import WorkerClientMethods
from wuu.generated.models import (
    CancelParams,
    CancelResult,
    ErrorCode,
    InitializeParams,
    InitializeResult,
    ProcessEvent,
    ToolInvokeParams,
    ToolResult,
)
from wuu.generated.wire import WireModel

from .envelope import WORKER_ENVELOPE, request_ids
from .errors import WorkerError, error_code, split_error
from .framing import Frame, reader_limit
from .peer import ConnectionLost, Peer
from .transcript import Transcript

__all__ = ["CloseOutcome", "ConnectionLost", "ProtocolViolation", "ReplyError", "Transcript", "WorkerClient"]

log = logging.getLogger("wuu.worker.client")
R = TypeVar("R", bound=WireModel)
ToolInvoker = Callable[[ToolInvokeParams, str], Awaitable[ToolResult]]

OUTPUT_DRAIN = 2.0
"""Seconds a close goes on reading a spawned worker's pipes after its process has ended."""


class ReplyError(Exception):
    """The worker answered a request with an error."""

    def __init__(self, method: str, wire: str) -> None:
        super().__init__(f"{method}: {wire}")
        self.method = method
        self.wire = wire
        self.code = error_code(wire)
        self.raw_code, _ = split_error(wire)


class ProtocolViolation(Exception):
    """The worker sent something the protocol does not allow."""


@dataclass(frozen=True)
class CloseOutcome:
    """How the worker process ended after `close`."""

    returncode: int | None
    killed: bool
    stderr: bytes

    @property
    def clean(self) -> bool:
        return self.returncode == 0 and not self.killed


class _SpawnedProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The streams of a spawned worker, and the moment its process ends. asyncio's `Process.wait()` returns
    only once the child's pipes have closed too, which a process the worker left behind may hold open for as
    long as it lives."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit, loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class WorkerClient(WorkerClientMethods):
    """A connection to one worker: a spawned process (`spawn`) or any attached pair of streams."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        token: str,
        tool_invoker: ToolInvoker | None = None,
        process: asyncio.subprocess.Process | None = None,
        record: bool = True,
    ) -> None:
        """`record`: keep a transcript of the frames (for reproducers); off for long-lived connections.

        `reader` must admit a whole frame (`framing.reader_limit()`).
        """
        self.process = process
        self.token = token
        self.transcript = Transcript(enabled=record)
        self._tool_invoker = tool_invoker
        self._events: asyncio.Queue[ProcessEvent | None] = asyncio.Queue()
        self._tasks: set[asyncio.Future[None]] = set()
        self._stderr = bytearray()
        self._ids = request_ids("h")
        self._peer = Peer(
            reader, writer, self, WORKER_ENVELOPE, remote="the worker", transcript=self.transcript
        )
        self._reader = asyncio.create_task(self._read())
        self._stderr_reader = asyncio.create_task(self._read_stderr())
        self._spawned: tuple[asyncio.SubprocessTransport, asyncio.Event] | None = None

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        token: str | None = None,
        tool_invoker: ToolInvoker | None = None,
        record: bool = True,
    ) -> WorkerClient:
        """Start an adapter command and connect to its stdin/stdout."""
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _SpawnedProtocol(reader_limit(), loop),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
        process = asyncio.subprocess.Process(transport, protocol, loop)
        assert process.stdin is not None and process.stdout is not None
        client = cls(
            process.stdout,
            process.stdin,
            token=token or secrets.token_hex(16),
            tool_invoker=tool_invoker,
            process=process,
            record=record,
        )
        client._spawned = (transport, protocol.exited)
        return client

    @property
    def lost(self) -> str | None:
        """Why the connection ended; None while it is open."""
        return self._peer.lost

    # --- requests ------------------------------------------------------------------------------

    def next_id(self) -> str:
        """A request id not used before on this connection."""
        return next(self._ids)

    async def call(self, method: str, params: WireModel, result: type[R]) -> R:
        """Send one request and decode its result; ReplyError on an error reply."""
        reply = await self.request(method, params.to_wire())
        if "error" in reply:
            raise ReplyError(method, reply["error"])
        try:
            return result.model_validate_json(orjson.dumps(reply["data"]), strict=True)
        except ValidationError as error:
            raise ProtocolViolation(
                f"{method}: the result does not follow {result.__name__}: {error}"
            ) from None

    def begin(
        self, method: str, data: Mapping[str, Any], *, request_id: str | None = None, token: str | None = None
    ) -> asyncio.Future[Frame]:
        """Send a request frame; a future for its reply frame (ConnectionLost if the connection ends first)."""
        frame_id = request_id or self.next_id()
        return self._peer.request(
            {"id": frame_id, "method": method, "token": token or self.token, "data": dict(data)}
        )

    async def request(
        self, method: str, data: Mapping[str, Any], *, request_id: str | None = None, token: str | None = None
    ) -> Frame:
        """Send a request frame and return the reply frame. Cancelling the caller sends `cancel`."""
        frame_id = request_id or self.next_id()
        waiter = self.begin(method, data, request_id=frame_id, token=token)
        try:
            return await asyncio.shield(waiter)
        except asyncio.CancelledError:
            if not waiter.done() and self.lost is None:
                self._background(self._send_cancel(frame_id))
            raise

    async def _send_cancel(self, frame_id: str) -> None:
        # The cancelled call's terminal reply still arrives; nobody waits for it any more.
        with contextlib.suppress(ConnectionLost, ReplyError):
            await self.call("cancel", CancelParams(id=frame_id), CancelResult)

    def _background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def expect_reply(self, frame_id: str) -> asyncio.Future[Frame]:
        """A future for the reply to `frame_id`, for a request sent by hand (`send_frame`, `send_bytes`)."""
        return self._peer.expect_reply(frame_id)

    async def send_frame(self, frame: Mapping[str, Any]) -> None:
        """Send one frame as it is (encoded, within the frame limit) and wait until it is written."""
        await self.send_bytes(self._peer.framing.encode(dict(frame)))

    async def send_bytes(self, data: bytes) -> None:
        """Write raw bytes to the worker (for tests of malformed input); ConnectionLost if it stopped reading."""
        if self.lost is not None:
            raise ConnectionLost(self.lost)
        await self._peer.send_bytes(data)

    async def initialize(self, params: InitializeParams) -> InitializeResult:
        result = await super().initialize(params)
        if result.version != WORKER_PROTOCOL_VERSION:
            raise ProtocolViolation(f"the worker speaks version {result.version}")
        return result

    async def connect(self, root: str, session: str, **binding: Any) -> InitializeResult:
        """`initialize` with the given binding (version 4)."""
        return await self.initialize(
            InitializeParams(version=WORKER_PROTOCOL_VERSION, root=root, session=session, **binding)
        )

    # --- events and callbacks (the Endpoint of the peer) ----------------------------------------

    async def events(self) -> AsyncIterator[ProcessEvent]:
        """The `process/event` notifications, in order, until the connection ends."""
        while (event := await self._events.get()) is not None:
            yield event

    def pending_events(self) -> list[ProcessEvent]:
        """The events received so far and not yet consumed."""
        found = []
        while not self._events.empty():
            event = self._events.get_nowait()
            if event is None:
                self._events.put_nowait(None)
                break
            found.append(event)
        return found

    def on_notification(self, method: str, frame: Frame) -> str | None:
        if method != "process/event":
            return f"unexpected notification {method!r}"
        try:
            self._events.put_nowait(
                ProcessEvent.model_validate_json(orjson.dumps(frame.get("data")), strict=True)
            )
        except ValidationError as error:
            return f"process/event: {error.errors()[0]['msg']}"
        return None

    def on_request(self, frame_id: str, method: str, frame: Frame) -> str | None:
        if method != "tool/invoke":
            return f"unexpected method {method!r}"
        self._background(self._answer_callback(frame_id, frame))
        return None

    async def _answer_callback(self, frame_id: str, frame: Frame) -> None:
        parent = frame.get("parent")
        try:
            if not isinstance(parent, str) or not self._peer.in_flight(parent):
                raise ReplyError(
                    "tool/invoke", f"{ErrorCode.PARENT_NOT_LIVE.value}: request {parent} is not live"
                )
            if self._tool_invoker is None:
                raise ReplyError("tool/invoke", f"{ErrorCode.UNSUPPORTED_METHOD.value}: tool/invoke")
            params = ToolInvokeParams.model_validate_json(orjson.dumps(frame.get("data")), strict=True)
            result = await self._tool_invoker(params, parent)
            reply: Frame = {"id": frame_id, "data": result.to_wire()}
        except ReplyError as error:
            reply = {"id": frame_id, "error": error.wire}
        except ValidationError as error:
            reply = {
                "id": frame_id,
                "error": f"{ErrorCode.INVALID_REQUEST.value}: {error.errors()[0]['msg']}",
            }
        except WorkerError as error:  # the host's tool refused: the program sees why
            reply = {"id": frame_id, "error": str(error)}
        except Exception as error:  # the callback is answered whatever happens, or the program waits forever
            log.exception("the tool invoker failed")
            reply = {"id": frame_id, "error": f"{ErrorCode.INTERNAL.value}: {type(error).__name__}"}
        if self.lost is None:
            self._peer.send(reply)

    # --- input ---------------------------------------------------------------------------------

    async def _read(self) -> None:
        reason = await self._peer.read()
        self._events.put_nowait(None)
        if reason.startswith("malformed frame"):
            # Keep the worker's output flowing until it ends, or a worker blocked writing the rest of
            # an oversize frame never finishes, nor exits.
            await self._peer.discard_input()

    async def _read_stderr(self) -> None:
        if self.process is not None and self.process.stderr is not None:
            while chunk := await self.process.stderr.read(65536):
                self._stderr.extend(chunk)

    @property
    def stderr(self) -> bytes:
        return bytes(self._stderr)

    # --- shutdown ------------------------------------------------------------------------------

    async def _ended(self) -> None:
        """Until the worker has ended: its process (a spawned one), or its output (an attached one)."""
        if self._spawned is not None:
            await self._spawned[1].wait()
        elif self.process is not None:
            await self.process.wait()
        else:
            await asyncio.shield(self._reader)

    async def close(self, budget: float = 7.0) -> CloseOutcome:
        """Send EOF and wait up to `budget` seconds for the worker to end; kill a spawned one after that.

        For an attached transport the worker has ended when its output ends.
        """
        self._peer.end_output()
        killed = False
        try:
            await asyncio.wait_for(self._ended(), budget)
        except TimeoutError:
            killed = True
            if self.process is not None:
                with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
                    self.process.kill()
                await self._ended()
            else:
                self._reader.cancel()
        self._peer.abort_output()
        if self._spawned is not None:
            # What the worker wrote before it ended is in its pipes; a process it left behind may hold them
            # open for as long as it lives: the close reads them for a moment, then closes them.
            await asyncio.wait({self._reader, self._stderr_reader}, timeout=OUTPUT_DRAIN)
            self._spawned[0].close()
        await asyncio.gather(self._reader, self._stderr_reader, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        returncode = self.process.returncode if self.process is not None else 0
        outcome = CloseOutcome(returncode, killed, self.stderr)
        if not outcome.clean:
            log.warning("worker ended with %s%s", outcome.returncode, " after kill" if killed else "")
        return outcome
