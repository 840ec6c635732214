"""One worker connection: the protocol rules that every provider gets from the SDK.

The SDK owns framing, token pinning, the immutable binding, request validation against the method
catalog, overlapping handlers, cancellation, `tool/invoke` callbacks and the end of the connection
(spec/schema/worker/*.schema.json, spec/methods/worker.json). Providers only implement methods.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_PROTOCOL_VERSION
from wuu.generated.methods import MethodSpec
from wuu.generated.plain import (
    WORKER_METHODS,
    CancelParams,
    CancelResult,
    ErrorCode,
    InitializeParams,
    InitializeResult,
    Invalid,
    PlainModel,
    ProcessEvent,
    ToolInvokeParams,
    ToolResult,
)

from .backend import ExecutionBackendV4
from .binding import same_binding
from .envelope import WORKER_ENVELOPE, request_ids
from .errors import WorkerError, error_code
from .framing import FrameTooLarge
from .peer import ConnectionLost, Peer

log = logging.getLogger("wuu.worker")

REQUEST_KEYS = frozenset({"id", "method", "token", "data"})
START_CAPABILITY = "process.start.v1"
START_METHODS = frozenset({"process/start", "process/list"})
"""The handlers without which `process.start.v1` is never granted, whatever the backend declares."""


class _State(Enum):
    NEW = "new"
    INITIALIZING = "initializing"
    READY = "ready"
    DEAD = "dead"


def request_params(spec: MethodSpec[PlainModel], data: Any) -> PlainModel:
    """A request's data as the method's params, validated strictly; `invalid_request` naming the bad field if
    they are not."""
    try:
        params: PlainModel = spec.params.model_validate(data)
    except Invalid as error:
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"{error.location or 'data'}: {error.message}") from None
    return params


@dataclass(eq=False)
class _Context:
    """The RequestContext of one request."""

    connection: Connection
    id: str
    method: str
    signal: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    started: bool = False

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
        try:
            params = ToolInvokeParams.model_validate(
                {"tool": tool, "arguments": orjson.dumps(dict(arguments)).decode()}
            )
        except Invalid as invalid:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"tool/invoke: {invalid}") from None
        reply = await self.connection.call_host("tool/invoke", self.id, params)
        error, data = reply.get("error"), reply.get("data")
        if set(reply) == {"id", "error"} and isinstance(error, str):
            raise WorkerError(error_code(error), f"tool/invoke: {error}")
        if set(reply) != {"id", "data"} or not isinstance(data, dict):
            raise WorkerError(ErrorCode.INTERNAL, "the host's reply to tool/invoke is neither data nor error")
        try:
            return ToolResult.model_validate(data)
        except Invalid as error:
            raise WorkerError(ErrorCode.INTERNAL, f"tool/invoke reply: {error}") from None


class Connection:
    """Serves one backend over one stream pair, until EOF, a malformed frame or output failure.

    It is the worker's `Endpoint` on the peer core: the peer frames and routes, this applies the
    request rules (fields, ids, token, binding, validation, methods) and runs the handlers.
    """

    def __init__(
        self,
        backend: ExecutionBackendV4,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        output_closed: asyncio.Event | None = None,
    ) -> None:
        self._backend = backend
        # Every request's work is a task of this group, entered by `run`: none outlives the connection.
        self._handlers = asyncio.TaskGroup()
        self._callback_ids = request_ids("cb-")
        self._peer = Peer(
            reader,
            writer,
            self,
            WORKER_ENVELOPE,
            remote="the host",
            ignore_unknown_replies=True,
            output_closed=output_closed,
        )
        self._state = _State.NEW
        self._token: str | None = None
        self._init_reply: dict[str, Any] | None = None
        self._inflight: dict[str, _Context] = {}
        # The methods a request may call, with their catalog entries: fixed once initialize succeeds.
        self._routes: dict[str, tuple[MethodSpec[PlainModel], Any]] = {}
        self.binding: InitializeParams | None = None
        self.pending_binding: InitializeParams | None = None
        self.granted: frozenset[str] = frozenset()
        self.lifetime = asyncio.Event()
        self.end_reason = ""

    async def run(self) -> None:
        """Serve until the connection ends, then cancel and drain every handler and run `close`.

        Raises the error of the provider's `close`, if any, after everything else is done.
        """
        try:
            async with self._handlers:
                self.end_reason = await self._peer.read()
                log.debug("connection ending: %s", self.end_reason)
                for context in list(self._inflight.values()):
                    self._cancel(context)
        finally:
            self.lifetime.set()
            try:
                await self._backend.close()
            finally:
                self._peer.end_output()
                await self._peer.wait_output_closed()

    # --- input (the Endpoint of the peer) ---------------------------------------------------------

    def on_notification(self, method: str, frame: dict[str, Any]) -> str | None:
        return "no string id"  # a host sends requests and replies only

    def on_request(self, frame_id: str, method: str, frame: dict[str, Any]) -> str | None:
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
            route = self._routes.get(method)
            if route is None:
                raise WorkerError(ErrorCode.UNSUPPORTED_METHOD, method)
            spec, handler = route
            self._start(frame_id, method, handler, request_params(spec, data))

    def _check_token(self, token: str) -> None:
        if token != self._token:
            raise WorkerError(ErrorCode.TOKEN_MISMATCH, "the token differs from the pinned one")

    def _on_initialize(self, frame_id: str, token: str, data: dict[str, Any]) -> None:
        if self._state is _State.INITIALIZING:
            raise WorkerError(ErrorCode.INVALID_REQUEST, "initialize is already in progress")
        params = request_params(WORKER_METHODS["initialize"], data)
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
        self._launch(context, self._backend.initialize(params, context), lambda _: self._initialized(params))

    def _initialized(self, params: InitializeParams) -> dict[str, Any]:
        """Pin the binding once the provider's `initialize` has succeeded; the reply's data."""
        available = {name: handler for name, handler in self._backend.methods.items() if _available(handler)}
        self._routes = {
            name: (spec, handler)
            for name, handler in available.items()
            if (spec := WORKER_METHODS.get(name)) is not None and spec.direction == "host_to_worker"
        }
        honoured = set(self._backend.capabilities)
        if not available.keys() >= START_METHODS:  # the SDK's identity check needs both replies
            honoured.discard(START_CAPABILITY)
        self.granted = frozenset(set(params.capabilities or ()) & honoured)
        result = InitializeResult(
            version=WORKER_PROTOCOL_VERSION,
            capabilities=sorted(self.granted),
            methods=sorted({"initialize", "cancel", *available}),
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
        params = request_params(WORKER_METHODS["cancel"], data)
        assert isinstance(params, CancelParams)
        target = self._inflight.get(params.id)
        cancelled = target is not None and target.task is not None and not target.task.done()
        if target is not None and cancelled:
            self._cancel(target)
        self._send_reply(frame_id, CancelResult(cancelled=cancelled).to_wire())

    # --- handlers ------------------------------------------------------------------------------

    def _start(self, frame_id: str, method: str, handler: Any, params: PlainModel) -> None:
        """Call the handler: an awaitable it returns runs in the request's own task, and a result it
        returns at once (a handler that never waits) is answered at once."""
        context = _Context(self, frame_id, method)
        try:
            outcome = handler(params, context)
            if not isinstance(outcome, PlainModel) and inspect.isawaitable(outcome):
                self._launch(context, outcome, lambda result: self._result_data(context, params, result))
                return
            reply = self._outcome(context, data=self._result_data(context, params, outcome))
        except Exception as error:  # the reply carries it, as from a handler's task
            reply = self._outcome(context, error=error)
        self._finish(context, reply)

    def _launch(
        self, context: _Context, work: Awaitable[Any], shape: Callable[[Any], dict[str, Any]]
    ) -> None:
        """Await a request's work in its own task; `shape` turns its result into the reply's data.

        The task's last step sends the one terminal reply: sent from the task itself, rather than
        from a done-callback, the reply leaves with the step that produced it, and the loop goes back
        to waiting right after.
        """
        self._inflight[context.id] = context
        context.task = self._handlers.create_task(self._answer(context, work, shape))

    async def _answer(
        self, context: _Context, work: Awaitable[Any], shape: Callable[[Any], dict[str, Any]]
    ) -> None:
        context.started = True
        if context.signal.is_set():  # cancelled before its first step: the work never starts
            if inspect.iscoroutine(work):
                work.close()
            self._finish(context, self._outcome(context, cancelled=True))
            return
        try:
            data = shape(await work)
        except asyncio.CancelledError:
            self._finish(context, self._outcome(context, cancelled=True))
            raise
        except Exception as error:  # the reply carries it; the task itself ends cleanly
            self._finish(context, self._outcome(context, error=error))
        else:
            self._finish(context, self._outcome(context, data=data))

    @staticmethod
    def _cancel(context: _Context) -> None:
        """End a request's work: a task that has started is cancelled, one that has not sees the signal
        at its first step (cancelling it then would end it before it could answer)."""
        context.signal.set()
        if context.started and context.task is not None:
            context.task.cancel()

    def _outcome(
        self,
        context: _Context,
        *,
        data: dict[str, Any] | None = None,
        error: Exception | None = None,
        cancelled: bool = False,
    ) -> dict[str, Any]:
        if context.method == "initialize" and self._state is _State.INITIALIZING:
            # A failed or cancelled initialize leaves the connection dead.
            self._state = _State.DEAD
        if cancelled:
            return {"id": context.id, "error": ErrorCode.CANCELLED.value}
        if error is None:
            return {"id": context.id, "data": data}
        if isinstance(error, WorkerError):
            return {"id": context.id, "error": error.wire}
        log.error("%s %s failed", context.method, context.id, exc_info=error)
        return {"id": context.id, "error": f"{ErrorCode.INTERNAL.value}: {type(error).__name__}: {error}"}

    def _result_data(self, context: _Context, params: PlainModel, result: Any) -> dict[str, Any]:
        """The reply's data: the handler's result encoded, and checked against the method's result def.

        A handler may return the plain class or its pydantic model (a provider written against `models`);
        either way what leaves is decoded once more, so a provider's bug is an `internal` reply, never a frame
        that breaks the spec.
        """
        spec = WORKER_METHODS[context.method]
        if (
            spec.result is None
            or type(result).__name__ != spec.result.__name__
            or not hasattr(result, "to_wire")
        ):
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
        try:
            spec.result.model_validate(data)
        except Invalid as error:
            raise WorkerError(ErrorCode.INTERNAL, f"{context.method} result: {error}") from None
        return data

    def _finish(self, context: _Context, reply: dict[str, Any]) -> None:
        """Send the request's one terminal reply and forget it."""
        context.signal.set()
        self._inflight.pop(context.id, None)
        self._peer.send(reply)

    # --- output --------------------------------------------------------------------------------

    def _reply_error(self, frame_id: str, error: WorkerError) -> None:
        self._peer.send({"id": frame_id, "error": error.wire})

    def _send_reply(self, frame_id: str, data: dict[str, Any]) -> None:
        self._peer.send({"id": frame_id, "data": data})

    def emit_process(self, event: ProcessEvent) -> None:
        """Queue a `process/event` notification; it is sent while the host still reads."""
        try:
            self._peer.send({"method": "process/event", "data": event.to_wire()})
        except FrameTooLarge as error:
            log.error("dropped a process event: %s", error)

    async def call_host(self, method: str, parent: str, params: PlainModel) -> dict[str, Any]:
        """Send a callback request on behalf of `parent` and wait for the host's reply frame."""
        frame = {"id": next(self._callback_ids), "method": method, "parent": parent, "data": params.to_wire()}
        try:
            return await self._peer.request(frame)
        except (ConnectionLost, FrameTooLarge) as error:
            raise WorkerError(ErrorCode.INTERNAL, f"{method}: {error}") from None


def _available(handler: Any) -> bool:
    """Whether a handler serves its method on this connection (see backend.Handler)."""
    available = getattr(handler, "available", None)
    return available is None or bool(available())
