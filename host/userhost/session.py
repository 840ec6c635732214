"""One client's connection to a user host: its requests, run by the RPC's rules, whatever its transport.

A transport (NDJSON on a byte stream, HTTP or gRPC) turns messages into `submit(request)` calls and writes
what the returned future gives. The session applies the catalog's rules (spec/methods/userhost.json,
spec/schema/userhost/*.schema.json) with the connection's `protocol.Requests` (methods this transport
serves, `initialize` first and once, ids unique among the requests in flight), and runs them: strict params
naming the bad field, plugin calls routed by the graph captured at `initialize`, cancellation of this
connection's calls only, and the end of the connection revoking its calls' foreground authority.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from wuu.generated.catalog import USERHOST_METHODS
from wuu.generated.methods import MethodSpec
from wuu.generated.models import (
    PluginClientCancelParams,
    PluginClientCancelResult,
    PluginClientRequestParams,
    UserHostErrorCode,
    UserHostInitializeParams,
    UserHostInitializeResult,
    UserHostIsolation,
    UserHostServerInfo,
    UserHostShutdownResult,
    UserInput,
)
from wuu.generated.params import InvalidParams, parse_params
from wuu.generated.servers import push_handlers, user_question_handlers
from wuu.generated.wire import WireModel

from .envelope import RequestId
from .errors import UserHostError
from .plugins import Graph, PluginHandler
from .protocol import Request, Requests, outcome
from .services import Caller, HostServices

log = logging.getLogger("wuu.host.userhost")

# The capabilities this host supports; the protocol's version 1 defines none.
HOST_CAPABILITIES: frozenset[str] = frozenset()


class Authority(Protocol):
    """What a session needs of its host (the UserHost authority)."""

    user_space_id: str
    product_domain: str
    composition_profile: str | None
    isolation: UserHostIsolation
    server_info: UserHostServerInfo
    services: HostServices

    @property
    def graph(self) -> Graph: ...

    def admit(self, work: Coroutine[Any, Any, None]) -> None: ...

    def detached(self, session: ClientSession) -> None: ...


class _Call:
    """One plugin call in flight: the PluginCall its handler sees."""

    def __init__(self, session: ClientSession, user_input: UserInput | None) -> None:
        self._session = session
        self._user_input = user_input
        self._revoked = asyncio.Event()
        self.task: asyncio.Task[dict[str, Any]] | None = None

    @property
    def user_input(self) -> UserInput | None:
        return self._user_input

    @property
    def caller(self) -> Caller:
        return self._session.caller

    @property
    def revoked(self) -> asyncio.Event:
        return self._revoked

    def admit(self, work: Coroutine[Any, Any, None]) -> None:
        if self._revoked.is_set():
            work.close()
            raise UserHostError(UserHostErrorCode.CANCELLED, "the call has lost its foreground authority")
        self._session.host.admit(work)

    def revoke(self) -> bool:
        """Take the call's foreground authority and stop its handler; False when it had already finished."""
        self._revoked.set()
        if self.task is None or self.task.done():
            return False
        self.task.cancel()
        return True


def checked_params(model: type[WireModel], params: Any, prefix: str = "") -> WireModel:
    """Params as their model, validated strictly; `invalid_params` naming the first bad field (under
    `prefix`) if they are not."""
    try:
        return parse_params(model, params)
    except InvalidParams as error:
        if error.location is None:
            raise UserHostError(UserHostErrorCode.INVALID_PARAMS, f"params: {error.message}") from None
        field = ".".join(part for part in (prefix, error.field()) if part) or None
        raise UserHostError(UserHostErrorCode.INVALID_PARAMS, error.message, field) from None


class ClientSession:
    """The protocol state of one client connection. The host creates it (`UserHost.attach`)."""

    def __init__(
        self,
        host: Authority,
        transport: str,
        send: Callable[[dict[str, Any]], None],
        close: Callable[[], None],
        device_id: str | None = None,
    ) -> None:
        self.host = host
        self.transport = transport
        self.caller = Caller(transport, device_id)
        self.graph: Graph | None = None
        """The composition graph captured by this connection's `initialize`; None before it."""
        self._send = send
        self._close = close
        self._calls: dict[RequestId, _Call] = {}
        self._requests: Requests[asyncio.Future[dict[str, Any]]] = Requests()
        self._detached = False

    # --- requests ------------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        """Whether the connection has completed `initialize`."""
        return self._requests.initialized

    def in_flight(self, request_id: RequestId) -> bool:
        """Whether a request with this id is still in flight on this connection."""
        return self._requests.in_flight(request_id)

    def submit(self, request: Request) -> asyncio.Future[dict[str, Any]]:
        """Start one request; a future for its result object, or its UserHostError (a request the protocol's
        rules refuse among them)."""
        loop = asyncio.get_running_loop()
        request_id = request.id
        try:
            work = self._dispatch(request)
        except UserHostError as error:
            failed: asyncio.Future[dict[str, Any]] = loop.create_future()
            failed.set_exception(error)
            return failed
        if isinstance(work, dict):
            done: asyncio.Future[dict[str, Any]] = loop.create_future()
            done.set_result(work)
            return done
        call, coroutine = work
        task = asyncio.create_task(coroutine)
        self._requests.start(request_id, task)
        if call is not None:
            call.task = task
            self._calls[request_id] = call
        task.add_done_callback(lambda _: self._forget(request_id))
        return task

    async def call(self, request: Request) -> dict[str, Any]:
        """Submit one request and wait for it: its result object, or its UserHostError raised (`cancelled`
        when its work was cancelled, `internal` for an unexpected failure).

        Waited on, never awaited: cancelling the caller leaves the request's work running, its outcome
        unanswered; what the end of its own call means is the transport's to decide (`stop`).
        """
        future = self.submit(request)
        if not future.done():
            try:
                await asyncio.wait({future})
            except asyncio.CancelledError:
                future.add_done_callback(_unanswered)
                raise
        answer = outcome(future, request.id)
        if isinstance(answer, UserHostError):
            raise answer
        return answer

    def stop(self, request_id: RequestId) -> None:
        """Cancel the work of the request in flight with this id, if there is one (it is answered
        `cancelled`)."""
        work = self._requests.get(request_id)
        if work is not None:
            work.cancel()

    def _forget(self, request_id: RequestId) -> None:
        self._requests.finish(request_id)
        self._calls.pop(request_id, None)

    def _dispatch(
        self, request: Request
    ) -> dict[str, Any] | tuple[_Call | None, Coroutine[Any, Any, dict[str, Any]]]:
        """A request's result at once, or the call and the work that will give it."""
        spec = self._requests.admit(request)
        parsed = checked_params(spec.params, request.params)
        if request.method == "initialize":
            return self._initialize(parsed)
        if isinstance(parsed, PluginClientRequestParams):
            return self._plugin_request(parsed)
        if isinstance(parsed, PluginClientCancelParams):
            return self._cancel(parsed)
        if request.method == "shutdown":
            asyncio.get_running_loop().call_soon(self.detach)
            return UserHostShutdownResult().to_wire()
        return None, self._service(spec, parsed)

    def _initialize(self, params: WireModel) -> dict[str, Any]:
        assert isinstance(params, UserHostInitializeParams)
        self._requests.initialize(params.protocol_version)
        graph = self.graph = self.host.graph
        host = self.host
        return UserHostInitializeResult(
            protocol_version=params.protocol_version,
            server_info=host.server_info,
            user_space_id=host.user_space_id,
            product_domain=host.product_domain,
            user_host_isolation=host.isolation,
            composition_profile=host.composition_profile,
            graph_generation=graph.generation,
            plugins=graph.inventory(),
            capabilities=sorted(HOST_CAPABILITIES & set(params.capabilities or ())),
        ).to_wire()

    def _current_graph(self) -> Graph:
        assert self.graph is not None
        if self.host.graph.generation != self.graph.generation:
            raise UserHostError(
                UserHostErrorCode.GRAPH_GENERATION_CHANGED,
                f"this connection captured generation {self.graph.generation}; the host is at "
                f"{self.host.graph.generation}: open a new connection",
            )
        return self.graph

    def _plugin_request(
        self, params: PluginClientRequestParams
    ) -> tuple[_Call, Coroutine[Any, Any, dict[str, Any]]]:
        graph = self._current_graph()
        plugin = graph.plugins.get(params.plugin_id)
        if plugin is None:
            raise UserHostError(
                UserHostErrorCode.PLUGIN_NOT_FOUND, f"no plugin {params.plugin_id} in the graph"
            )
        if params.plugin_fingerprint is not None and params.plugin_fingerprint != plugin.fingerprint:
            raise UserHostError(
                UserHostErrorCode.PLUGIN_FINGERPRINT_MISMATCH,
                f"{params.plugin_id} has another fingerprint in this connection's graph",
            )
        handler = plugin.methods.get(params.method)
        if handler is None:
            raise UserHostError(
                UserHostErrorCode.UNSUPPORTED_METHOD,
                f"{params.plugin_id} serves no client method {params.method}",
            )
        spec = USERHOST_METHODS[params.method]
        method_params = checked_params(spec.params, params.params, "params")
        if spec.user_input and params.user_input is None:
            raise UserHostError(
                UserHostErrorCode.INVALID_PARAMS, f"{params.method} takes the user's input", "user_input"
            )
        if not spec.user_input and params.user_input is not None:
            raise UserHostError(
                UserHostErrorCode.INVALID_PARAMS, f"{params.method} takes no user input", "user_input"
            )
        call = _Call(self, params.user_input)
        return call, self._run_plugin(spec, handler, method_params, call)

    async def _run_plugin(
        self, spec: MethodSpec[WireModel], handler: PluginHandler, params: WireModel, call: _Call
    ) -> dict[str, Any]:
        result = await handler(params, call)
        if spec.result is None or not isinstance(result, spec.result):
            raise UserHostError(UserHostErrorCode.INTERNAL, f"{spec.method} returned {type(result).__name__}")
        # `PluginClientRequestResult` on the wire: its one field holds the method's result, already checked.
        return {"result": result.to_wire()}

    def _cancel(self, params: PluginClientCancelParams) -> dict[str, Any]:
        self._current_graph()
        call = self._calls.get(params.id)
        cancelled = call is not None and call.revoke()
        return PluginClientCancelResult(cancelled=cancelled).to_wire()

    async def _service(self, spec: MethodSpec[WireModel], params: WireModel) -> dict[str, Any]:
        services = self.host.services
        handlers = {**user_question_handlers(services), **push_handlers(services)}
        result = await handlers[spec.method](params, self.caller)
        data: dict[str, Any] = result.to_wire()
        return data

    # --- notifications and the end -------------------------------------------------------------

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification to this client (dropped once it has detached)."""
        if not self._detached:
            self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def detach(self) -> None:
        """The client is gone (EOF, `shutdown`, a failed transport): revoke its calls' foreground authority,
        close its transport, and leave the host. Admitted work goes on."""
        if self._detached:
            return
        self._detached = True
        for call in list(self._calls.values()):
            call.revoke()
        for pending in self._requests.work():
            pending.cancel()
        self.host.detached(self)
        self._close()


def _unanswered(future: asyncio.Future[dict[str, Any]]) -> None:
    """Take the outcome of a request nobody waits for any more, so that its error is not reported as lost."""
    if not future.cancelled():
        future.exception()
