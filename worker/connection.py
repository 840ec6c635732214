"""One worker connection: the protocol rules that every provider gets from the SDK.

The SDK owns framing, token pinning, the immutable binding, request validation against the method
catalog, overlapping handlers, cancellation, `tool/invoke` callbacks and the end of the connection
(spec/schema/worker/*.schema.json, DESIGN §3). Providers only implement methods.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson
from pydantic import ValidationError

from wuu.generated.catalog import WORKER_MAX_ID_BYTES, WORKER_METHODS, WORKER_PROTOCOL_VERSION
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
from wuu.generated.wire import MethodSpec, WireModel

from .backend import ExecutionBackendV4
from .binding import same_binding
from .errors import WorkerError
from .framing import FrameReader, FrameTooLarge, FrameWriter, MalformedFrame, OutputClosed, encode

log = logging.getLogger("wuu.worker")

REQUEST_KEYS = frozenset({"id", "method", "token", "data"})
START_CAPABILITY = "process.start.v1"


class _State(Enum):
    NEW = "new"
    INITIALIZING = "initializing"
    READY = "ready"
    DEAD = "dead"


def _validation_message(error: ValidationError) -> str:
    """Which field is wrong, in wire terms: `MaxBytes: Input should be a valid integer`."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "data"
    return f"{where}: {first['msg']}"


def parse_params(spec: MethodSpec, data: Any) -> WireModel:
    """Validate a request's data strictly against the method's params model; `invalid_request` if wrong."""
    try:
        return spec.params.model_validate_json(orjson.dumps(data), strict=True)
    except ValidationError as error:
        raise WorkerError(ErrorCode.INVALID_REQUEST, _validation_message(error)) from None


def error_code(wire_error: str) -> ErrorCode:
    """The ErrorCode of an error string from a peer (`internal` for a code the spec does not know)."""
    try:
        return ErrorCode(wire_error.split(":", 1)[0])
    except ValueError:
        return ErrorCode.INTERNAL


@dataclass(eq=False)
class _Context:
    """The RequestContext of one request."""

    connection: Connection
    id: str
    method: str
    signal: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[dict[str, Any]] | None = None

    @property
    def binding(self) -> InitializeParams:
        binding = self.connection.binding or self.connection.pending_binding
        assert binding is not None, "no binding before initialize"
        return binding

    @property
    def lifetime_signal(self) -> asyncio.Event:
        return self.connection.lifetime

    @property
    def granted_capabilities(self) -> frozenset[str]:
        return self.connection.granted

    def emit_process(self, event: ProcessEvent) -> None:
        self.connection.emit_process(event)

    async def invoke_tool(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        if self.signal.is_set():
            raise WorkerError(ErrorCode.PARENT_NOT_LIVE, f"request {self.id} has ended")
        params = ToolInvokeParams(tool=tool, arguments=orjson.dumps(dict(arguments)).decode())
        reply = await self.connection.call_host("tool/invoke", self.id, params)
        if "error" in reply:
            raise WorkerError(error_code(reply["error"]), f"tool/invoke: {reply['error']}")
        try:
            return ToolResult.model_validate_json(orjson.dumps(reply["data"]), strict=True)
        except ValidationError as error:
            raise WorkerError(
                ErrorCode.INTERNAL, f"tool/invoke reply: {_validation_message(error)}"
            ) from None


class Connection:
    """Serves one backend over one pair of frame streams, until EOF, a malformed frame or output failure."""

    def __init__(
        self,
        backend: ExecutionBackendV4,
        reader: FrameReader,
        writer: FrameWriter,
        output_closed: asyncio.Event | None = None,
    ) -> None:
        self._backend = backend
        self._reader = reader
        self._writer = writer
        self._output_closed = output_closed or asyncio.Event()
        self._outgoing: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._state = _State.NEW
        self._token: str | None = None
        self._init_reply: dict[str, Any] | None = None
        self._inflight: dict[str, _Context] = {}
        self._callbacks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._callback_ids = itertools.count(1)
        self.binding: InitializeParams | None = None
        self.pending_binding: InitializeParams | None = None
        self.granted: frozenset[str] = frozenset()
        self.lifetime = asyncio.Event()
        self.end_reason = ""

    async def run(self) -> None:
        """Serve until the connection ends, then cancel and drain every handler and run `close`.

        Raises the error of the provider's `close`, if any, after everything else is done.
        """
        writer_task = asyncio.create_task(self._write_loop())
        reader_task = asyncio.create_task(self._read_loop())
        output_task = asyncio.create_task(self._output_closed.wait())
        await asyncio.wait({reader_task, output_task}, return_when=asyncio.FIRST_COMPLETED)
        if not reader_task.done():
            # Output failure ends the connection even while input is blocked.
            self.end_reason = self.end_reason or "output closed"
            reader_task.cancel()
        output_task.cancel()
        await asyncio.gather(reader_task, output_task, return_exceptions=True)
        log.debug("connection ending: %s", self.end_reason)
        try:
            await self._drain_handlers()
        finally:
            self.lifetime.set()
            try:
                await self._backend.close()
            finally:
                await self._outgoing.put(None)
                await writer_task

    # --- input ---------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        while True:
            try:
                frame = await self._reader.read()
            except MalformedFrame as error:
                self.end_reason = f"malformed frame: {error}"
                log.warning("%s", self.end_reason)
                return
            if frame is None:
                self.end_reason = "end of input"
                return
            problem = self._dispatch(frame)
            if problem:
                self.end_reason = f"malformed frame: {problem}"
                log.warning("%s", self.end_reason)
                return

    def _dispatch(self, frame: dict[str, Any]) -> str | None:
        """Route one frame; return why it is malformed, or None."""
        frame_id = frame.get("id")
        if not isinstance(frame_id, str) or not frame_id:
            return "no string id"
        if len(frame_id.encode()) > WORKER_MAX_ID_BYTES:
            return f"id over {WORKER_MAX_ID_BYTES} bytes"
        if "method" not in frame:
            self._on_reply(frame_id, frame)
            return None
        method = frame["method"]
        if not isinstance(method, str):
            return "method is not a string"
        try:
            self._on_request(frame_id, method, frame)
        except WorkerError as error:
            self._reply_error(frame_id, error)
        return None

    def _on_request(self, frame_id: str, method: str, frame: dict[str, Any]) -> None:
        if frame_id in self._inflight:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"request id {frame_id!r} is already in flight")
        extra = set(frame) - REQUEST_KEYS
        if extra:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"unknown frame field {sorted(extra)[0]!r}")
        token, data = frame.get("token"), frame.get("data")
        if not isinstance(token, str):
            raise WorkerError(ErrorCode.INVALID_REQUEST, "token: a request carries a string token")
        if not isinstance(data, dict):
            raise WorkerError(ErrorCode.INVALID_REQUEST, "data: a request carries an object")
        if self._state is _State.DEAD:
            raise WorkerError(ErrorCode.INITIALIZATION_FAILED, "an earlier initialize failed; reconnect")
        if method == "initialize":
            self._on_initialize(frame_id, token, data)
        elif method == "cancel":
            self._on_cancel(frame_id, token, data)
        elif self._state is not _State.READY:
            raise WorkerError(ErrorCode.NOT_INITIALIZED, f"{method} before initialize")
        else:
            self._check_token(token)
            spec = WORKER_METHODS.get(method)
            handler = self._backend.methods.get(method)
            if (
                spec is None
                or handler is None
                or spec.direction != "host_to_worker"
                or not _available(handler)
            ):
                raise WorkerError(ErrorCode.UNSUPPORTED_METHOD, method)
            self._start(frame_id, method, handler, parse_params(spec, data))

    def _check_token(self, token: str) -> None:
        if token != self._token:
            raise WorkerError(ErrorCode.TOKEN_MISMATCH, "the token differs from the pinned one")

    def _on_initialize(self, frame_id: str, token: str, data: dict[str, Any]) -> None:
        if self._state is _State.INITIALIZING:
            raise WorkerError(ErrorCode.INVALID_REQUEST, "initialize is already in progress")
        params = parse_params(WORKER_METHODS["initialize"], data)
        assert isinstance(params, InitializeParams)
        if self._state is _State.READY:
            self._check_token(token)
            assert self.binding is not None and self._init_reply is not None
            if not same_binding(params, self.binding):
                raise WorkerError(
                    ErrorCode.BINDING_IMMUTABLE, "initialize data differs from the pinned binding"
                )
            self._send_reply(frame_id, self._init_reply)
            return
        if params.version != WORKER_PROTOCOL_VERSION:
            raise WorkerError(
                ErrorCode.PROTOCOL_MISMATCH,
                f"version {params.version}; this worker speaks {WORKER_PROTOCOL_VERSION}",
            )
        self._state = _State.INITIALIZING
        self._token = token
        self.pending_binding = params
        context = _Context(self, frame_id, "initialize")
        self._launch(context, self._run_initialize(context, params))

    async def _run_initialize(self, context: _Context, params: InitializeParams) -> dict[str, Any]:
        await self._backend.initialize(params, context)
        requested = set(params.capabilities or ())
        self.granted = frozenset(requested & set(self._backend.capabilities))
        result = InitializeResult(
            version=WORKER_PROTOCOL_VERSION,
            capabilities=sorted(self.granted),
            methods=sorted(
                {
                    "initialize",
                    "cancel",
                    *(name for name, handler in self._backend.methods.items() if _available(handler)),
                }
            ),
            worker=self._backend.info,
        )
        self.binding = params
        self._init_reply = result.to_wire()
        self._state = _State.READY
        return self._init_reply

    def _on_cancel(self, frame_id: str, token: str, data: dict[str, Any]) -> None:
        if self._state is _State.NEW:
            raise WorkerError(ErrorCode.NOT_INITIALIZED, "cancel before initialize")
        self._check_token(token)
        params = parse_params(WORKER_METHODS["cancel"], data)
        assert isinstance(params, CancelParams)
        target = self._inflight.get(params.id)
        cancelled = target is not None and target.task is not None and not target.task.done()
        if target is not None and cancelled:
            target.signal.set()
            assert target.task is not None
            target.task.cancel()
        self._send_reply(frame_id, CancelResult(cancelled=cancelled).to_wire())

    def _on_reply(self, frame_id: str, frame: dict[str, Any]) -> None:
        waiter = self._callbacks.get(frame_id)
        if waiter is None or waiter.done():
            log.warning("a reply names no callback in flight: %r", frame_id)
            return
        data, error = frame.get("data"), frame.get("error")
        well_formed = set(frame) in ({"id", "data"}, {"id", "error"})
        if well_formed and (isinstance(data, dict) or isinstance(error, str)):
            waiter.set_result(frame)
        else:
            waiter.set_exception(
                WorkerError(ErrorCode.INTERNAL, "the host's reply is neither data nor error")
            )

    # --- handlers ------------------------------------------------------------------------------

    def _start(self, frame_id: str, method: str, handler: Any, params: WireModel) -> None:
        context = _Context(self, frame_id, method)
        self._launch(context, self._run_handler(context, handler, params))

    async def _run_handler(self, context: _Context, handler: Any, params: WireModel) -> dict[str, Any]:
        result = await handler(params, context)
        return self._result_data(context, params, result)

    def _launch(self, context: _Context, work: Coroutine[Any, Any, dict[str, Any]]) -> None:
        """Run a request's work in its own task; its one terminal reply is sent when the task ends.

        The reply comes from a done-callback, so a request cancelled before its task ever ran
        still gets it.
        """
        self._inflight[context.id] = context
        task = asyncio.create_task(work)
        context.task = task
        task.add_done_callback(lambda _: self._finish(context, self._outcome(context, task)))

    def _outcome(self, context: _Context, task: asyncio.Task[dict[str, Any]]) -> dict[str, Any]:
        if context.method == "initialize" and self._state is _State.INITIALIZING:
            # A failed or cancelled initialize leaves the connection dead.
            self._state = _State.DEAD
        if task.cancelled():
            return {"id": context.id, "error": ErrorCode.CANCELLED.value}
        error = task.exception()
        if error is None:
            return {"id": context.id, "data": task.result()}
        if isinstance(error, WorkerError):
            return {"id": context.id, "error": error.wire}
        log.error("%s %s failed", context.method, context.id, exc_info=error)
        return {"id": context.id, "error": f"{ErrorCode.INTERNAL.value}: {type(error).__name__}: {error}"}

    def _result_data(self, context: _Context, params: WireModel, result: Any) -> dict[str, Any]:
        spec = WORKER_METHODS[context.method]
        if spec.result is None or not isinstance(result, spec.result):
            raise WorkerError(
                ErrorCode.INTERNAL, f"{context.method} handler returned {type(result).__name__}"
            )
        if (
            context.method == "process/start"
            and START_CAPABILITY in self.granted
            and getattr(result, "operation_id", None) != getattr(params, "operation_id", None)
        ):
            raise WorkerError(
                ErrorCode.INTERNAL, f"{START_CAPABILITY}: the start reply lost the operation_id"
            )
        data: dict[str, Any] = result.to_wire()
        return data

    def _finish(self, context: _Context, reply: dict[str, Any]) -> None:
        """Send the request's one terminal reply and forget it."""
        context.signal.set()
        self._inflight.pop(context.id, None)
        self._send_frame(reply)

    async def _drain_handlers(self) -> None:
        contexts = list(self._inflight.values())
        for context in contexts:
            context.signal.set()
            if context.task is not None:
                context.task.cancel()
        await asyncio.gather(*(c.task for c in contexts if c.task is not None), return_exceptions=True)
        for waiter in self._callbacks.values():
            waiter.cancel()

    # --- output --------------------------------------------------------------------------------

    def _reply_error(self, frame_id: str, error: WorkerError) -> None:
        self._send_frame({"id": frame_id, "error": error.wire})

    def _send_reply(self, frame_id: str, data: dict[str, Any]) -> None:
        self._send_frame({"id": frame_id, "data": data})

    def _send_frame(self, frame: dict[str, Any]) -> None:
        try:
            encoded = encode(frame, self._writer.limit)
        except FrameTooLarge as error:
            if "id" not in frame or "method" in frame:
                log.error("dropped an outgoing frame: %s", error)
                return
            encoded = encode({"id": frame["id"], "error": f"{ErrorCode.REPLY_TOO_LARGE.value}: {error}"})
        self._outgoing.put_nowait(encoded)

    def emit_process(self, event: ProcessEvent) -> None:
        """Queue a `process/event` notification; it is sent while the host still reads."""
        self._send_frame({"method": "process/event", "data": event.to_wire()})

    async def call_host(self, method: str, parent: str, params: WireModel) -> dict[str, Any]:
        """Send a callback request on behalf of `parent` and wait for the host's reply frame."""
        callback_id = f"cb-{next(self._callback_ids)}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._callbacks[callback_id] = waiter
        try:
            self._send_frame(
                {"id": callback_id, "method": method, "parent": parent, "data": params.to_wire()}
            )
            return await waiter
        finally:
            self._callbacks.pop(callback_id, None)

    async def _write_loop(self) -> None:
        while (data := await self._outgoing.get()) is not None:
            if self._output_closed.is_set():
                continue
            try:
                await self._writer.write_bytes(data)
            except OutputClosed as error:
                log.warning("output failed: %s", error)
                self._output_closed.set()
            del data  # a written frame (up to 16 MiB) must not live on until the next one arrives


def _available(handler: Any) -> bool:
    """Whether a handler serves its method on this connection (see backend.Handler)."""
    available = getattr(handler, "available", None)
    return available is None or bool(available())
