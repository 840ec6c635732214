"""The user-host RPC over gRPC: the service `UserHost` of spec/proto/wuu/userhost/v1/userhost.proto.

The service's comment states the rules; `grpc_wire` holds what both ends of them share (the rpcs, the
metadata keys, the status of an error, the conversion of messages, the addresses), and this module the
server, `GrpcServer`:

- it listens on a Unix socket in a private directory or on a loopback TCP address, nothing else, with
  messages of up to `USERHOST_MAX_FRAME_BYTES` each way (a maximal `user_input` envelope fits);
- on TCP every call, the health service's included, carries a bearer token of the space's token file in
  its `authorization` metadata (`bearer.BearerTokens`), or fails with UNAUTHENTICATED and nothing else; a
  connection belongs to the token that opened it, and ends when that token is revoked;
- every rpc converts its request to the spec's JSON (protojson), submits it to the connection's
  `ClientSession` as the NDJSON transport does, and converts the result back; an error ends the call with
  the status of its code (the spec's `x-grpc-status`) and the JsonRpcError in its details (`grpc-status-details-bin`);
- a successful Initialize opens a connection (one client transport of the host's 16) and names it in its
  initial metadata (`wuu-connection`); later calls of the connection send that name. The connection ends
  on Shutdown, at the end of its PluginClientInvalidate stream, when it falls behind on notifications, or
  after `idle_timeout` seconds with neither that stream open nor a call in flight;
- the stream carries the connection's notifications, queued from Initialize on, so none is lost before the
  client opens it; cancelling a PluginClientRequest's gRPC call has the effect of PluginClientCancel;
- the standard health service (`grpc.health.v1.Health`) answers SERVING until the server closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NoReturn

import grpc
import orjson
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from wuu.generated.models import UserHostErrorCode

from .address import GrpcAddress, GrpcAddressError
from .authority import UserHost
from .bearer import AUTHORIZATION, BEARER, BearerTokens
from .envelope import MAX_INTEGER_ID, RequestId, usable_id
from .errors import UserHostError, internal_error
from .grpc_wire import (
    CONNECTION_KEY,
    MESSAGE_OPTIONS,
    NOTIFICATIONS,
    RPC_ID_KEY,
    RPCS,
    SERVICE,
    Rpc,
    error_status,
    to_json,
    to_message,
)
from .idle import DEFAULT_IDLE_SECONDS, IdleTimer
from .ndjson import DEFAULT_OUTBOX_BYTES
from .protocol import Request, failure, too_large
from .server import Listener
from .session import ClientSession
from .tokens import TokenStore
from .tokens import digest as token_digest
from .unix import prepare_socket_path

log = logging.getLogger("wuu.host.userhost")

CLOSE_GRACE_SECONDS = 5.0
HANDSHAKE_MS = 10_000
"""How long a TCP connection may take to open its HTTP/2 session before the server drops it."""
IDLE_CHANNEL_MS = 60_000
"""How long an HTTP/2 session may go without a call before the server ends it (a client's channel opens a new
one at its next call): a connection that never calls cannot be held open."""
MAX_TCP_CONNECTIONS = 128
"""The most HTTP/2 sessions the server holds on TCP, so that connections cannot use up its descriptors."""
MAX_STREAMS = 32
"""The most calls in flight on one HTTP/2 session."""


# --- params and errors ---------------------------------------------------------------------------------


def _params(message: Message) -> dict[str, Any]:
    """A request's params as the spec's JSON; `invalid_params` when the message stands for no JSON value
    (an enum left UNSPECIFIED, an unknown enum number)."""
    try:
        return to_json(message)
    except (ValueError, KeyError) as error:
        raise UserHostError(
            UserHostErrorCode.INVALID_PARAMS, f"{message.DESCRIPTOR.name} is not a valid message: {error}"
        ) from None


async def _abort(context: grpc.aio.ServicerContext, error: UserHostError) -> NoReturn:
    code, trailers = error_status(error)
    await context.abort(code, error.message, trailers)
    raise AssertionError("ServicerContext.abort returns only by raising")


# --- connections ---------------------------------------------------------------------------------------


class _Connection:
    """One client connection: its session, its queued notifications and its idle timer."""

    def __init__(self, server: GrpcServer, token: str | None, device_id: str | None) -> None:
        self.id = secrets.token_urlsafe(24)
        self.token = token
        """The SHA-256 digest of the bearer token that opened the connection (TCP); None on a Unix socket."""
        self._server = server
        self._notices: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._queued_bytes = 0
        self.idle = IdleTimer(server.idle_timeout, self._expire)
        self.streaming = False
        self.overflowed = False
        # Last: `attach` refuses the 17th client (too_many_clients) before anything else exists.
        self.session: ClientSession = server.host.attach("grpc", self._send, self._closed, device_id)

    async def call(self, method: str, request_id: RequestId, params: Mapping[str, Any]) -> dict[str, Any]:
        """Submit one request to the session and wait for its result; UserHostError for its error.

        A cancelled gRPC call leaves its work running, unanswered; a plugin call's is cancelled as
        PluginClientCancel would."""
        with self.idle.active():
            try:
                return await self.session.call(Request(request_id, method, params, RPC_ID_KEY))
            except asyncio.CancelledError:
                if method == "plugin/client/request":
                    self._revoke(request_id)
                raise

    def _revoke(self, request_id: RequestId) -> None:
        """Cancel a plugin call whose gRPC call was cancelled, as PluginClientCancel does; stop its work
        directly when PluginClientCancel cannot (an id the host chose, a graph that has moved on)."""
        cancel = self.session.submit(
            Request(self._server.internal_id(), "plugin/client/cancel", {"id": request_id}, RPC_ID_KEY)
        )
        if cancel.exception() is not None or not cancel.result()["cancelled"]:
            self.session.stop(request_id)

    def open_stream(self) -> None:
        """The connection's notification stream starts; `invalid_request` if it already has one."""
        if self.streaming:
            raise UserHostError(
                UserHostErrorCode.INVALID_REQUEST, "this connection's notification stream is already open"
            )
        self.streaming = True
        self.idle.hold()

    async def next_notice(self) -> dict[str, Any] | None:
        """The next notification's params; None once the connection has ended."""
        notice = await self._notices.get()
        if notice is not None:
            self._queued_bytes -= len(orjson.dumps(notice))
        return notice

    def _expire(self) -> None:
        log.info("idle connection ended", extra={"transport": "grpc", "seconds": self._server.idle_timeout})
        self.session.detach()

    def _send(self, message: dict[str, Any]) -> None:
        """The session's outgoing message: a notification, queued for the stream within the bound."""
        if message.get("method") != NOTIFICATIONS.method:
            log.warning("a notification without an rpc is dropped", extra={"method": message.get("method")})
            return
        params: dict[str, Any] = message["params"]
        size = len(orjson.dumps(params))
        if self._queued_bytes + size > self._server.max_queued_bytes:
            # The client does not keep up: it is disconnected, and nobody else waits for it.
            self.overflowed = True
            asyncio.get_running_loop().call_soon(self.session.detach)
            return
        self._queued_bytes += size
        self._notices.put_nowait(params)

    def _closed(self) -> None:
        """The session has ended: the stream ends after what is queued, and the name is forgotten."""
        self.idle.stop()
        self._server.connections.pop(self.id, None)
        self._notices.put_nowait(None)


# --- authentication ------------------------------------------------------------------------------------


class _Authenticated(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Lets through only the calls that carry a valid bearer token: any other call, to any service or
    method (known or not), fails with UNAUTHENTICATED and learns nothing else."""

    def __init__(self, bearer: BearerTokens) -> None:
        self._bearer = bearer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        metadata = dict(details.invocation_metadata or ())
        if self._bearer.check(metadata.get(AUTHORIZATION)) is not None:
            return await continuation(details)
        # A request-streaming handler that never reads: the refusal comes before the call's message is
        # received, so an unauthenticated client cannot make the host hold messages of max_frame_bytes.
        return _REFUSAL


UNAUTHENTICATED = "a valid bearer token is required"
"""The whole of what a call without a valid token learns, with the status UNAUTHENTICATED."""


async def _unauthenticated(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED)


_REFUSAL = grpc.stream_stream_rpc_method_handler(_unauthenticated)


def _token_digest(metadata: Mapping[str, str]) -> str | None:
    """The digest of the bearer token of an authenticated call (None on a Unix socket, which has none)."""
    found = BEARER.fullmatch(metadata.get(AUTHORIZATION, ""))
    return None if found is None else token_digest(found.group(1))


# --- the server ----------------------------------------------------------------------------------------


class GrpcServer(Listener):
    """Serves a user host's clients over gRPC. Start it with `GrpcServer.start`."""

    def __init__(
        self,
        host: UserHost,
        address: GrpcAddress,
        tokens: TokenStore | None,
        idle_timeout: float,
        max_queued_bytes: int,
    ) -> None:
        self.host = host
        self.address = address
        self.idle_timeout = idle_timeout
        self.max_queued_bytes = max_queued_bytes
        self._bearer = None if tokens is None else BearerTokens(tokens, self._revoked)
        self.connections: dict[str, _Connection] = {}
        """The open connections by their `wuu-connection` name."""
        # Ids for calls without `wuu-rpc-id`: above every JsonRpcId, so no client id collides with them
        # and no PluginClientCancel can name them.
        self._internal_ids = itertools.count(MAX_INTEGER_ID + 1)
        self._health = health_aio.HealthServicer()
        self._server = grpc.aio.server(
            options=[
                *MESSAGE_OPTIONS,
                ("grpc.so_reuseport", 0),  # a port in use fails the start
                ("grpc.server_handshake_timeout_ms", HANDSHAKE_MS),
                ("grpc.max_connection_idle_ms", IDLE_CHANNEL_MS),
                ("grpc.max_allowed_incoming_connections", MAX_TCP_CONNECTIONS),
                ("grpc.max_concurrent_streams", MAX_STREAMS),
            ],
            interceptors=() if self._bearer is None else (_Authenticated(self._bearer),),
        )

    @classmethod
    async def start(
        cls,
        host: UserHost,
        address: str | GrpcAddress,
        *,
        tokens: TokenStore | None = None,
        idle_timeout: float = DEFAULT_IDLE_SECONDS,
        max_queued_bytes: int = DEFAULT_OUTBOX_BYTES,
    ) -> GrpcServer:
        """Serve `host` on `address` (`unix:PATH` or a loopback `IP:PORT`). A TCP address authenticates
        every call against `tokens`, the space's token store, which it needs; a Unix socket takes none (its
        mode is its authentication).

        GrpcAddressError for another address, or for a TCP address without `tokens` (or a socket with
        them); SocketInUse when the socket's path cannot be used safely; OSError when the TCP port cannot
        be bound. `address` of the result has the bound port.
        """
        parsed = GrpcAddress.parse(address) if isinstance(address, str) else address
        if (tokens is None) != (parsed.socket is not None):
            raise GrpcAddressError(
                f"{parsed}: a TCP address authenticates its clients and needs the space's token store"
                if tokens is None
                else f"{parsed}: a Unix socket is authenticated by its mode and takes no token store"
            )
        server = cls(host, parsed, tokens, idle_timeout, max_queued_bytes)
        await server._listen()
        return server

    async def _listen(self) -> None:
        if self.address.socket is not None:
            await prepare_socket_path(self.address.socket)
        handlers = {rpc.name: self._unary_handler(rpc) for rpc in RPCS.values()}
        handlers[NOTIFICATIONS.name] = grpc.unary_stream_rpc_method_handler(
            self._notifications,
            request_deserializer=NOTIFICATIONS.request.FromString,
            response_serializer=NOTIFICATIONS.response.SerializeToString,
        )
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        try:
            port = self._server.add_insecure_port(self.address.target)
        except RuntimeError as error:
            port, reason = 0, str(error)
        else:
            reason = "the address is in use or not available"
        if port == 0:
            raise OSError(f"{self.address}: cannot listen: {reason}")
        if self.address.socket is None:
            self.address = GrpcAddress(host=self.address.host, port=port)
        await self._server.start()
        if self.address.socket is not None:
            os.chmod(self.address.socket, 0o600)
        if self._bearer is not None:
            self._bearer.start()
        for name in ("", SERVICE):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("listening", extra={"transport": "grpc", "address": self.address.target})

    @property
    def transport(self) -> str:
        """`grpc ADDRESS`."""
        return f"grpc {self.address.target}"

    def internal_id(self) -> int:
        """A fresh request id for a call that the client gave none."""
        return next(self._internal_ids)

    # --- calls ---------------------------------------------------------------------------------------

    def _unary_handler(self, rpc: Rpc) -> grpc.RpcMethodHandler:
        async def handle(request: Message, context: grpc.aio.ServicerContext) -> Message:
            return await self._unary(rpc, request, context)

        return grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=rpc.request.FromString,
            response_serializer=rpc.response.SerializeToString,
        )

    async def _unary(self, rpc: Rpc, request: Message, context: grpc.aio.ServicerContext) -> Message:
        metadata = dict(context.invocation_metadata() or ())
        try:
            request_id = self._request_id(metadata.get(RPC_ID_KEY))
            if rpc.method == "initialize":
                result = await self._initialize(request, request_id, metadata, context)
            else:
                result = await self._connection(metadata).call(rpc.method, request_id, _params(request))
            response = to_message(rpc.response, result)
            if (error := too_large(response.ByteSize())) is not None:
                raise error
        except Exception as error:
            await _abort(context, failure(error, metadata.get(RPC_ID_KEY)))
        return response

    def _request_id(self, text: str | None) -> RequestId:
        """The call's JSON-RPC id from its `wuu-rpc-id`, or a fresh internal one; `invalid_request`."""
        if text is None:
            return self.internal_id()
        try:
            found = usable_id(orjson.loads(text))
        except orjson.JSONDecodeError:
            found = None
        if found is None:
            raise UserHostError(
                UserHostErrorCode.INVALID_REQUEST,
                f"{RPC_ID_KEY}: {text[:64]!r} is not the JSON text of a JsonRpcId",
            )
        return found

    def _connection(self, metadata: Mapping[str, str]) -> _Connection:
        """The open connection a call's metadata names (with the token that opened it, on TCP)."""
        name = metadata.get(CONNECTION_KEY)
        connection = self.connections.get(name or "")
        if connection is None or connection.token != _token_digest(metadata):
            raise UserHostError(
                UserHostErrorCode.NOT_INITIALIZED,
                f"no open connection {name!r}: call Initialize and send the {CONNECTION_KEY} it answers"
                if name
                else f"no {CONNECTION_KEY} metadata: call Initialize first and send the {CONNECTION_KEY} "
                "it answers",
            )
        return connection

    async def _initialize(
        self,
        request: Message,
        request_id: RequestId,
        metadata: Mapping[str, str],
        context: grpc.aio.ServicerContext,
    ) -> dict[str, Any]:
        """Initialize: on an open connection (`already_initialized`), or opening a new one."""
        if metadata.get(CONNECTION_KEY):
            return await self._connection(metadata).call("initialize", request_id, _params(request))
        # The device of the token that opens the connection (a device token's) is the connection's for its life.
        entry = None if self._bearer is None else self._bearer.check(metadata.get(AUTHORIZATION))
        connection = _Connection(self, _token_digest(metadata), None if entry is None else entry.device_id)
        try:
            result = await connection.call("initialize", request_id, _params(request))
            if self._bearer is not None:
                self._bearer.refresh()
            if not self._holds(connection.token):  # revoked while the call was on its way
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED)
            self.connections[connection.id] = connection
            await context.send_initial_metadata(((CONNECTION_KEY, connection.id),))
        except BaseException:
            # A failed or abandoned Initialize opens no connection.
            connection.session.detach()
            raise
        log.info("connection opened", extra={"transport": "grpc", "clients": self.host.clients})
        return result

    async def _notifications(self, request: Message, context: grpc.aio.ServicerContext) -> None:
        """PluginClientInvalidate: the connection's notifications until it ends; its end ends the connection."""
        metadata = dict(context.invocation_metadata() or ())
        try:
            connection = self._connection(metadata)
            connection.open_stream()
        except UserHostError as error:
            await _abort(context, error)
        try:
            while (notice := await connection.next_notice()) is not None:
                await context.write(to_message(NOTIFICATIONS.response, notice))
        except Exception as error:
            await _abort(context, internal_error(error, "the notification stream"))
        finally:
            connection.session.detach()
        if connection.overflowed:
            await _abort(
                context,
                UserHostError(
                    UserHostErrorCode.INTERNAL,
                    f"the client did not keep up with its notifications (over {self.max_queued_bytes} bytes "
                    "queued): the connection is closed",
                ),
            )

    def _holds(self, token: str | None) -> bool:
        """Whether a connection of this token digest may go on, as the token file was last read (always, on
        a Unix socket)."""
        return self._bearer is None or token is None or self._bearer.holds(token)

    def _revoked(self) -> None:
        """The token file changed: the connections of a revoked token end."""
        for connection in list(self.connections.values()):
            if not self._holds(connection.token):
                log.info("token revoked: its connection ends", extra={"transport": "grpc"})
                connection.session.detach()

    # --- the end -------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop serving: health turns NOT_SERVING, every connection ends (streams end, calls in flight get
        `cancelled`), the server stops and a Unix socket file is removed. The host goes on."""
        await self._health.enter_graceful_shutdown()
        if self._bearer is not None:
            await self._bearer.close()
        for connection in list(self.connections.values()):
            connection.session.detach()
        await self._server.stop(CLOSE_GRACE_SECONDS)
        if self.address.socket is not None:
            with contextlib.suppress(FileNotFoundError):
                self.address.socket.unlink()
