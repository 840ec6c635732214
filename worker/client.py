"""The typed host client of the v4 worker protocol, over the command transport (a spawned adapter).

Every request method of the catalog is a typed coroutine (from the generated `WorkerClientMethods`).
Cancelling the task awaiting a call sends `cancel` for it. A worker that dies, closes its output or
sends a malformed frame fails every call in flight with `ConnectionLost`: the outcome of such a call
is unknown, and the client never retries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES, WORKER_PROTOCOL_VERSION
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

log = logging.getLogger("wuu.host")
R = TypeVar("R", bound=WireModel)
ToolInvoker = Callable[[ToolInvokeParams, str], Awaitable[ToolResult]]


class ReplyError(Exception):
    """The worker answered a request with an error."""

    def __init__(self, method: str, wire: str) -> None:
        super().__init__(f"{method}: {wire}")
        self.method = method
        self.wire = wire
        code = wire.split(":", 1)[0]
        self.code = ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.INTERNAL
        self.raw_code = code


class ConnectionLost(Exception):
    """The connection ended with the call in flight: its outcome is unknown, and it is not retried."""


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


@dataclass
class Transcript:
    """Every frame sent and received, in order: a reproducer a person can replay.

    Each frame keeps its first `keep` bytes, so a long-lived connection's record stays small.
    """

    entries: list[tuple[str, bytes]] = field(default_factory=list)
    keep: int = 4096
    enabled: bool = True

    def sent(self, data: bytes) -> None:
        if self.enabled:
            self.entries.append((">", data[: self.keep]))

    def received(self, data: bytes) -> None:
        if self.enabled:
            self.entries.append(("<", data[: self.keep]))

    def render(self, limit: int = 2000) -> str:
        lines = []
        for direction, data in self.entries:
            text = data.decode("utf-8", "replace").rstrip("\n")
            lines.append(f"{direction} {text[:limit]}{' ...' if len(text) > limit else ''}")
        return "\n".join(lines)


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
        """`record`: keep a transcript of the frames (for reproducers); off for long-lived connections."""
        self.process = process
        self.token = token
        self.transcript = Transcript(enabled=record)
        self._stdin = writer
        self._stdout = reader
        self._tool_invoker = tool_invoker
        self._ids = itertools.count(1)
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[ProcessEvent | None] = asyncio.Queue()
        self._tasks: set[asyncio.Future[None]] = set()
        self._stderr = bytearray()
        self.lost: str | None = None
        self._reader = asyncio.create_task(self._read_loop())
        self._stderr_reader = asyncio.create_task(self._read_stderr())

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
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            limit=WORKER_MAX_FRAME_BYTES,
        )
        assert process.stdin is not None and process.stdout is not None
        return cls(
            process.stdout,
            process.stdin,
            token=token or secrets.token_hex(16),
            tool_invoker=tool_invoker,
            process=process,
            record=record,
        )

    # --- requests ------------------------------------------------------------------------------

    def next_id(self) -> str:
        return f"h{next(self._ids)}"

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

    async def request(
        self, method: str, data: Mapping[str, Any], *, request_id: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """Send a request frame and return the reply frame. Cancelling the caller sends `cancel`."""
        frame_id = request_id or self.next_id()
        waiter = self.expect_reply(frame_id)
        await self.send_frame(
            {"id": frame_id, "method": method, "token": token or self.token, "data": dict(data)}
        )
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

    def expect_reply(self, frame_id: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the reply to `frame_id` (for callers that send frames themselves)."""
        if self.lost is not None:
            raise ConnectionLost(self.lost)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[frame_id] = waiter
        waiter.add_done_callback(self._forget(frame_id))
        return waiter

    def _forget(self, frame_id: str) -> Callable[[asyncio.Future[dict[str, Any]]], None]:
        def done(waiter: asyncio.Future[dict[str, Any]]) -> None:
            self._pending.pop(frame_id, None)
            if not waiter.cancelled():
                waiter.exception()  # a reply nobody awaits (a cancelled call) is not an unhandled error

        return done

    async def send_frame(self, frame: Mapping[str, Any]) -> None:
        await self.send_bytes(orjson.dumps(dict(frame)) + b"\n")

    async def send_bytes(self, data: bytes) -> None:
        """Write raw bytes to the worker (for tests of malformed input)."""
        if self.lost is not None:
            raise ConnectionLost(self.lost)
        self.transcript.sent(data)
        try:
            self._stdin.write(data)
            await self._stdin.drain()
        except (ConnectionError, RuntimeError) as error:
            self._lose(f"writing to the worker failed: {error}")
            raise ConnectionLost(self.lost or "") from None

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

    # --- events and callbacks ------------------------------------------------------------------

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

    async def _answer_callback(self, frame: dict[str, Any]) -> None:
        frame_id, parent = frame["id"], frame.get("parent")
        try:
            if parent not in self._pending:
                raise ReplyError(
                    "tool/invoke", f"{ErrorCode.PARENT_NOT_LIVE.value}: request {parent} is not live"
                )
            if self._tool_invoker is None:
                raise ReplyError("tool/invoke", f"{ErrorCode.UNSUPPORTED_METHOD.value}: tool/invoke")
            params = ToolInvokeParams.model_validate_json(orjson.dumps(frame.get("data")), strict=True)
            result = await self._tool_invoker(params, str(parent))
            reply: dict[str, Any] = {"id": frame_id, "data": result.to_wire()}
        except ReplyError as error:
            reply = {"id": frame_id, "error": error.wire}
        except ValidationError as error:
            reply = {
                "id": frame_id,
                "error": f"{ErrorCode.INVALID_REQUEST.value}: {error.errors()[0]['msg']}",
            }
        if self.lost is None:
            await self.send_frame(reply)

    # --- input ---------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason = "the worker closed its output"
        try:
            while True:
                try:
                    line = await self._stdout.readuntil(b"\n")
                except asyncio.IncompleteReadError as error:
                    if error.partial:
                        self.transcript.received(error.partial)
                        reason = f"the worker's output ended inside a frame ({len(error.partial)} bytes)"
                    break
                except asyncio.LimitOverrunError:
                    reason = f"the worker sent a frame over {WORKER_MAX_FRAME_BYTES} bytes"
                    self._lose(reason)
                    # Keep its pipe flowing until it ends, or a killed worker never finishes closing it.
                    while await self._stdout.read(1 << 20):
                        pass
                    break
                self.transcript.received(line)
                problem = self._route(line)
                if problem:
                    reason = f"malformed frame from the worker: {problem}"
                    break
        finally:
            self._lose(reason)

    def _route(self, line: bytes) -> str | None:
        try:
            frame = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            return str(error)
        if not isinstance(frame, dict):
            return "not a JSON object"
        frame_id, method = frame.get("id"), frame.get("method")
        if method == "process/event" and "id" not in frame:
            try:
                self._events.put_nowait(
                    ProcessEvent.model_validate_json(orjson.dumps(frame.get("data")), strict=True)
                )
            except ValidationError as error:
                return f"process/event: {error.errors()[0]['msg']}"
            return None
        if not isinstance(frame_id, str):
            return "no string id"
        if method == "tool/invoke":
            self._background(self._answer_callback(frame))
            return None
        if method is not None:
            return f"unexpected method {method!r}"
        waiter = self._pending.get(frame_id)
        if waiter is None or waiter.done():
            return f"a reply to {frame_id!r}, which is not in flight"
        waiter.set_result(frame)
        return None

    async def _read_stderr(self) -> None:
        if self.process is not None and self.process.stderr is not None:
            while chunk := await self.process.stderr.read(65536):
                self._stderr.extend(chunk)

    def _lose(self, reason: str) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        for waiter in list(self._pending.values()):
            if not waiter.done():
                waiter.set_exception(ConnectionLost(f"{reason}; the outcome of the call is unknown"))
        self._events.put_nowait(None)

    @property
    def stderr(self) -> bytes:
        return bytes(self._stderr)

    # --- shutdown ------------------------------------------------------------------------------

    async def close(self, budget: float = 7.0) -> CloseOutcome:
        """Send EOF and wait up to `budget` seconds for the worker to end; kill a spawned one after that.

        For an attached transport the worker has ended when its output ends.
        """
        if not self._stdin.is_closing():
            self._stdin.close()
        killed = False
        ended = self.process.wait() if self.process is not None else asyncio.shield(self._reader)
        try:
            await asyncio.wait_for(ended, budget)
        except TimeoutError:
            killed = True
            if self.process is not None:
                with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
                    self.process.kill()
                await self.process.wait()
            else:
                self._reader.cancel()
        await asyncio.gather(self._reader, self._stderr_reader, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        returncode = self.process.returncode if self.process is not None else 0
        outcome = CloseOutcome(returncode, killed, self.stderr)
        if not outcome.clean:
            log.warning("worker ended with %s%s", outcome.returncode, " after kill" if killed else "")
        return outcome
