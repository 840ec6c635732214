"""The user-host RPC over authenticated HTTP (spec/schema/userhost/http.schema.json), served with aiohttp.

Every request carries `Authorization: Bearer <token>`, checked against the space's token file
(`tokens.TokenStore`) before anything else: without a valid token the answer is 401 with an empty body,
whatever the path. Each token is one client transport of the host: its `ClientSession` (the same dispatcher
as the socket and gRPC transports) is attached and implicitly initialized at its first authenticated
request, and counts toward the host's 16 client transports. `POST /v1/rpc/<method>` serves the host's
request methods, `POST /v1/plugins/<plugin>/<method>` a plugin's client methods (as `plugin/client/request`),
and `GET /v1/events` the client's notifications as Server-Sent Events. Errors are `{"error": JsonRpcError}`
with the status of their code (`HTTP_STATUS`).

Before its authentication a connection is pending (`listener.Pending`): a request's head must arrive whole
within `head_timeout` seconds of the connection's start or of the previous response (aiohttp's keep-alive
timer, which also runs before the first request), at most `max_pending` connections are held pending, and
a body must arrive whole within `body_timeout`. A token's transport that has had no request in flight and
no event stream open for `idle_timeout` seconds is detached, freeing its slot; its next request attaches it
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import uuid
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from wuu.generated.catalog import (
    USER_HOST_ERROR_CODE_HTTP_STATUS,
    USERHOST_MAX_FRAME_BYTES,
    USERHOST_METHODS,
    USERHOST_PROTOCOL_VERSION,
)
from wuu.generated.models import UserHostErrorCode, UserHostInitializeParams

from .address import HttpAddress, join_host_port
from .authority import UserHost
from .bearer import AUTHORIZATION, BearerTokens
from .envelope import MAX_ID_CHARS, usable_id
from .errors import UserHostError
from .idle import DEFAULT_IDLE_SECONDS, IdleTimer
from .listener import DEFAULT_MAX_PENDING, AcceptLoop, Pending
from .protocol import Request, check_protocol_version, failure
from .server import Listener
from .session import ClientSession, checked_params
from .tokens import TokenEntry, TokenStore

log = logging.getLogger("wuu.host.userhost")

HTTP_STATUS = USER_HOST_ERROR_CODE_HTTP_STATUS
"""The HTTP status of each error code (the spec's `x-http-status`); 401 and 413 are the binding's own."""
METHOD_NOT_ALLOWED = 405
"""A known path asked with another HTTP method: the error body's code is `unsupported_method`."""
PAYLOAD_TOO_LARGE = 413
"""A body over `max_frame_bytes`: the error body's code is `parse_error`."""
EXPECTATION_FAILED = 417
"""An `Expect` other than `100-continue`."""
REQUEST_TIMEOUT = 408
"""A body that did not arrive whole within the body deadline: the error body's code is `invalid_request`."""
DEFAULT_HEAD_SECONDS = 10.0
"""How long a connection may take to send a request's head, from its start or the previous response."""
DEFAULT_BODY_SECONDS = 60.0
"""How long a request's body may take to arrive whole."""

SERVER_NAME = "wuu-userhost"
BASE = "/v1"
REQUEST_ID_HEADER = "Wuu-Request-Id"
KEEPALIVE_SECONDS = 15.0
DEFAULT_MAX_QUEUED_EVENTS = 256
"""The bound of a client's queue of notifications not yet written to its event stream."""
READ_CHUNK = 64 * 1024
LINGER_SECONDS = 1.0
RPC_METHODS = frozenset(
    method
    for method, spec in USERHOST_METHODS.items()
    if spec.kind == "request" and spec.direction == "client_to_host"
)
"""The methods of `POST /v1/rpc/<method>`."""
PLUGIN_BODY_KEYS = frozenset({"params", "user_input", "plugin_fingerprint"})


def _error_response(error: UserHostError) -> web.Response:
    if isinstance(error, _BindingError):
        status, headers = error.status, error.headers
    else:
        status, headers = HTTP_STATUS[error.code], {}
    response = web.Response(
        status=status,
        headers=headers,
        body=orjson.dumps({"error": error.to_wire()}),
        content_type="application/json",
    )
    if status in (PAYLOAD_TOO_LARGE, REQUEST_TIMEOUT):
        response.force_close()  # the rest of the body is never read: the connection ends with the answer
    return response


def _unauthorized() -> web.Response:
    response = web.Response(status=401, headers={"WWW-Authenticate": "Bearer"})
    response.force_close()  # a refused connection is not kept alive for another try
    return response


class _Revoked(Exception):
    """The request's token was revoked while the request was on its way (its body still arriving)."""


class _EventStream:
    """One open `GET /v1/events` response and its bounded queue of events."""

    def __init__(self, request: web.BaseRequest, max_queued: int) -> None:
        self._request = request
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue(max_queued + 1)  # + the end marker
        self._max_queued = max_queued

    def put(self, data: bytes) -> None:
        """Queue one event; a stream whose reader lets the queue fill is cut (its client reconnects)."""
        if self._queue.qsize() >= self._max_queued:
            log.warning("cut an event stream whose reader is too slow", extra={"transport": "http"})
            self.cut()
            return
        self._queue.put_nowait(data)

    def end(self) -> None:
        """End the stream once what is queued is written."""
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def cut(self) -> None:
        """Drop the connection at once, unwritten events and all."""
        if self._request.transport is not None:
            self._request.transport.abort()
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(None)

    async def pump(self, response: web.StreamResponse) -> None:
        """Write queued events, and a keepalive comment when there is nothing to write for a while."""
        while True:
            try:
                data = await asyncio.wait_for(self._queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                data = b": keepalive\n\n"
            if data is None:
                return
            await response.write(data)


class _HttpClient:
    """One token's client transport: its session while attached, and its event stream."""

    def __init__(self, server: HttpServer, entry: TokenEntry) -> None:
        self._server = server
        self.entry = entry
        self.session: ClientSession | None = None
        self.initialized: dict[str, Any] = {}
        self.stream: _EventStream | None = None
        self.idle = IdleTimer(server.idle_timeout, self._expire)
        self.revoked = False

    def attach(self) -> ClientSession:
        """The client's session, attached and initialized now if it is not; `too_many_clients` when full,
        _Revoked once its token is."""
        if self.revoked:
            raise _Revoked
        if self.session is None:
            session = self._server.host.attach("http", self._send, self._closed, self.entry.device_id)
            # The path's `v1` is the protocol version; the client is known by its token's name.
            handshake = {
                "protocol_version": USERHOST_PROTOCOL_VERSION,
                "client_info": {"name": self.entry.name, "version": "http"},
            }
            initialized = session.submit(Request(uuid.uuid4().hex, "initialize", handshake))
            self.session, self.initialized = session, initialized.result()
            self.idle.restart()
        return self.session

    def _expire(self) -> None:
        """Idle for the idle timeout: detach (the token's next request attaches it again)."""
        if self.session is not None:
            log.info(
                "idle client detached", extra={"transport": "http", "seconds": self._server.idle_timeout}
            )
            self.session.detach()

    def _send(self, message: dict[str, Any]) -> None:
        if self.stream is not None:
            event = f"event: {message['method']}\ndata: ".encode()
            self.stream.put(event + orjson.dumps(message["params"]) + b"\n\n")

    def _closed(self) -> None:
        """The session has detached (`shutdown`, a revoked token, idle, the host closing)."""
        self.session = None
        self.idle.stop()
        if self.stream is not None:
            self.stream.end()
            self.stream = None


class HttpServer(Listener):
    """Serves a user host's HTTP clients. Start it with `HttpServer.start`."""

    def __init__(
        self,
        host: UserHost,
        tokens: TokenStore,
        *,
        ssl_context: ssl.SSLContext | None,
        max_body_bytes: int,
        max_queued_events: int,
        head_timeout: float,
        body_timeout: float,
        idle_timeout: float,
        max_pending: int,
    ) -> None:
        self.host = host
        self.tokens = tokens
        self.idle_timeout = idle_timeout
        self._ssl = ssl_context
        self._max_body_bytes = max_body_bytes
        self._max_queued_events = max_queued_events
        self._head_timeout = head_timeout
        self._body_timeout = body_timeout
        self._pending = Pending(max_pending)
        self._clients: dict[str, _HttpClient] = {}
        self._runner: web.ServerRunner | None = None
        self._server: web.Server
        self._handler_options: dict[str, Any] = {}
        self._accepting: AcceptLoop | None = None
        self._bearer = BearerTokens(tokens, self._revoked)
        self.address = ""
        """HOST:PORT where the server listens (the port picked when 0 was asked)."""

    @classmethod
    async def start(
        cls,
        host: UserHost,
        address: HttpAddress,
        tokens: TokenStore,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_body_bytes: int = USERHOST_MAX_FRAME_BYTES,
        max_queued_events: int = DEFAULT_MAX_QUEUED_EVENTS,
        head_timeout: float = DEFAULT_HEAD_SECONDS,
        body_timeout: float = DEFAULT_BODY_SECONDS,
        idle_timeout: float = DEFAULT_IDLE_SECONDS,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> HttpServer:
        """Listen on `address` (OSError when it cannot); bodies over `max_body_bytes` are refused. The
        deadlines and bounds of a connection before its authentication, and of an idle token's transport,
        are the module's."""
        server = cls(
            host,
            tokens,
            ssl_context=ssl_context,
            max_body_bytes=max_body_bytes,
            max_queued_events=max_queued_events,
            head_timeout=head_timeout,
            body_timeout=body_timeout,
            idle_timeout=idle_timeout,
            max_pending=max_pending,
        )
        await server._listen(address)
        return server

    async def _listen(self, address: HttpAddress) -> None:
        # aiohttp's low-level server: every request, whatever its path or method, reaches `_serve` (and so
        # its authentication). No access log (it would hold what clients send). The rest of a refused body is
        # discarded, unheld, for at most LINGER_SECONDS before the connection closes: closing on unread bytes
        # would reset it, and the client could lose the answer. The keep-alive timer is the head deadline.
        self._handler_options = {
            "access_log": None,
            "lingering_time": LINGER_SECONDS,
            "keepalive_timeout": self._head_timeout,
        }
        self._server = web.Server(self._serve, **self._handler_options)
        self._runner = web.ServerRunner(self._server, handle_signals=False)
        await self._runner.setup()
        listening = _bind(address)
        self.address = join_host_port(*listening.getsockname()[:2])
        self._accepting = AcceptLoop(listening, self._connect, self._pending, "http")
        self._bearer.start()
        log.info("listening", extra={"transport": "http", "address": self.address})

    async def _connect(self, accepted: socket.socket) -> None:
        """Hand an accepted connection to aiohttp, pending until a request on it is authenticated (a TLS
        handshake is pending too, and bounded by the head deadline)."""
        handshake = asyncio.current_task()
        assert handshake is not None
        if self._ssl is not None:
            self._pending.add(handshake)
        try:
            loop = asyncio.get_running_loop()
            transport, _ = await loop.connect_accepted_socket(
                lambda: _QuietHandler(self._server, loop=loop, **self._handler_options),
                accepted,
                ssl=self._ssl,
                ssl_handshake_timeout=self._head_timeout if self._ssl is not None else None,
            )
        except (OSError, ssl.SSLError, asyncio.CancelledError):
            accepted.close()  # a failed or shed handshake, or the server closing: the connection ends
            return
        except BaseException:
            accepted.close()
            raise
        finally:
            self._pending.admit(handshake)
        self._pending.add(transport)

    @property
    def pending(self) -> int:
        """How many connections have not yet had a request authenticated."""
        return len(self._pending)

    @property
    def transport(self) -> str:
        """`http HOST:PORT`."""
        return f"http {self.address}"

    @property
    def streams(self) -> int:
        """How many event streams are open."""
        return sum(client.stream is not None for client in self._clients.values())

    async def close(self) -> None:
        """Stop serving: detach every HTTP client (their streams end) and close the listener."""
        if self._accepting is not None:
            await self._accepting.close()
            await self._accepting.cancel_connections()  # TLS handshakes still under way
        await self._bearer.close()
        for client in list(self._clients.values()):
            if client.session is not None:
                client.session.detach()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- tokens ----------------------------------------------------------------------------------

    def _revoked(self) -> None:
        """The token file changed: a revoked token's client is detached and its stream closed; a request of
        it still on its way is refused when its body has arrived. Its connections end at their next request
        (a 401 closes its connection) or at the head deadline."""
        for digest, client in list(self._clients.items()):
            if not self._bearer.holds(digest):
                del self._clients[digest]
                log.info("token revoked", extra={"transport": "http", "client": client.entry.name})
                client.revoked = True
                if client.session is not None:
                    client.session.detach()

    def _authenticate(self, request: web.BaseRequest) -> _HttpClient | None:
        entry = self._bearer.check(request.headers.get(AUTHORIZATION))
        if entry is None:
            return None
        self._pending.admit(request.transport)
        client = self._clients.get(entry.sha256)
        if client is None:
            client = self._clients[entry.sha256] = _HttpClient(self, entry)
        return client

    def _attach(self, client: _HttpClient) -> ClientSession:
        """The client's session for a request whose body has arrived: the token file is checked again
        first, so a token revoked while the body was on its way is refused (_Revoked)."""
        self._bearer.refresh()
        return client.attach()

    # --- requests --------------------------------------------------------------------------------

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        """Every request: `Expect` first, then authentication and the binding's paths."""
        if "Expect" in request.headers:
            refused = await self._expect(request)
            if refused is not None:
                return _named(refused)
        return _named(await self._handle(request))

    async def _expect(self, request: web.BaseRequest) -> web.StreamResponse | None:
        """`Expect: 100-continue`: a request that will be refused gets its answer at once, so that its body is
        never sent; any other is told to go on."""
        if self._authenticate(request) is None:
            return _unauthorized()
        if request.content_length is not None and request.content_length > self._max_body_bytes:
            return _error_response(
                _too_large(f"the body of {request.content_length} bytes is over the limit")
            )
        if request.version != aiohttp.HttpVersion11 or request.headers["Expect"].lower() != "100-continue":
            return web.Response(status=EXPECTATION_FAILED)
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's size counts from its own start
        return None

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        client = self._authenticate(request)
        if client is None:
            return _unauthorized()
        try:
            with client.idle.active():
                return await self._route(request, client)
        except _Revoked:
            return _unauthorized()
        except Exception as error:
            return _error_response(failure(error, request.headers.get(REQUEST_ID_HEADER)))

    async def _route(self, request: web.BaseRequest, client: _HttpClient) -> web.StreamResponse:
        path = request.path
        if path == f"{BASE}/events":
            _allow(request, "GET")
            return await self._events(request, client)
        if path.startswith(f"{BASE}/rpc/") and path[len(BASE) + 5 :] in RPC_METHODS:
            _allow(request, "POST")
            return await self._rpc(request, client, path[len(BASE) + 5 :])
        parts = path.split("/")
        if len(parts) == 5 and path.startswith(f"{BASE}/plugins/") and parts[3] and parts[4]:
            _allow(request, "POST")
            return await self._plugin(request, client, parts[3], parts[4])
        raise UserHostError(UserHostErrorCode.UNSUPPORTED_METHOD, f"no {path} in this binding")

    async def _rpc(self, request: web.BaseRequest, client: _HttpClient, method: str) -> web.StreamResponse:
        body = await self._body(request)
        session = self._attach(client)
        if method == "initialize":
            params = checked_params(UserHostInitializeParams, body)
            assert isinstance(params, UserHostInitializeParams)
            check_protocol_version(params.protocol_version)
            return _json(client.initialized)
        return _json(await self._call(request, session, method, body))

    async def _plugin(
        self, request: web.BaseRequest, client: _HttpClient, plugin_id: str, method: str
    ) -> web.StreamResponse:
        body = await self._body(request)
        extra = sorted(set(body) - PLUGIN_BODY_KEYS)
        if extra:
            raise UserHostError(UserHostErrorCode.INVALID_PARAMS, f"unknown member {extra[0]!r}", extra[0])
        session = self._attach(client)
        params = {"plugin_id": plugin_id, "method": method, **body}
        result = await self._call(request, session, "plugin/client/request", params)
        return _json(result["result"])

    async def _call(
        self, request: web.BaseRequest, session: ClientSession, method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """Submit one request to the session and wait for it; its result, or its UserHostError."""
        request_id = request.headers.get(REQUEST_ID_HEADER)
        if request_id is None:
            request_id = uuid.uuid4().hex
        elif usable_id(request_id) is None:
            raise UserHostError(
                UserHostErrorCode.INVALID_REQUEST, f"{REQUEST_ID_HEADER}: 1 to {MAX_ID_CHARS} characters"
            )
        # This handler ending (the server closing) leaves the call running: it ends with its session.
        return await session.call(Request(request_id, method, params, REQUEST_ID_HEADER))

    async def _body(self, request: web.BaseRequest) -> dict[str, Any]:
        """The request's JSON object, read up to the body limit: 413 from its Content-Length or as soon as
        more arrives, never holding more than the limit."""
        limit = self._max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(f"the body of {request.content_length} bytes is over {limit}")
        data = bytearray()
        try:
            async with asyncio.timeout(self._body_timeout):
                async for chunk in request.content.iter_chunked(READ_CHUNK):
                    data += chunk
                    if len(data) > limit:
                        raise _too_large(f"the body is over {limit} bytes")
        except TimeoutError:
            raise _BindingError(
                UserHostErrorCode.INVALID_REQUEST,
                f"the body did not arrive whole within {self._body_timeout:g} s",
                REQUEST_TIMEOUT,
                {},
            ) from None
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError as error:
            raise UserHostError(UserHostErrorCode.PARSE_ERROR, f"not JSON: {error}") from None
        if not isinstance(body, dict):
            raise UserHostError(UserHostErrorCode.INVALID_REQUEST, "the body is not a JSON object")
        return body

    async def _events(self, request: web.BaseRequest, client: _HttpClient) -> web.StreamResponse:
        self._attach(client)
        if client.stream is not None:
            client.stream.end()  # a client has one stream: the new one replaces it
        stream = client.stream = _EventStream(request, self._max_queued_events)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "Server": SERVER_NAME}
        )
        try:
            await response.prepare(request)
            await stream.pump(response)
        except ConnectionError:
            pass  # the client has gone, or its stream was cut
        finally:
            if client.stream is stream:
                client.stream = None
        return response


class _BindingError(UserHostError):
    """An error with a status of the binding's own: 413 (`parse_error`) or 405 (`unsupported_method`)."""

    def __init__(self, code: UserHostErrorCode, message: str, status: int, headers: dict[str, str]) -> None:
        super().__init__(code, message)
        self.status = status
        self.headers = headers


def _too_large(message: str) -> _BindingError:
    return _BindingError(UserHostErrorCode.PARSE_ERROR, message, PAYLOAD_TOO_LARGE, {})


def _allow(request: web.BaseRequest, method: str) -> None:
    if request.method != method:
        raise _BindingError(
            UserHostErrorCode.UNSUPPORTED_METHOD,
            f"{request.path} takes {method}",
            METHOD_NOT_ALLOWED,
            {"Allow": method},
        )


def _bind(address: HttpAddress) -> socket.socket:
    """A listening TCP socket on `address` (OSError when it cannot be bound)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    host = "127.0.0.1" if address.host == "localhost" else address.host
    listening = socket.socket(family, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, address.port))
        listening.listen(socket.SOMAXCONN)
    except BaseException:
        listening.close()
        raise
    return listening


def _json(result: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(result), content_type="application/json")


def _named(response: web.StreamResponse) -> web.StreamResponse:
    """Name the server plainly: aiohttp's default names the Python and aiohttp versions to anyone."""
    if not response.prepared:
        response.headers["Server"] = SERVER_NAME
    return response


class _QuietHandler(RequestHandler):
    """aiohttp's connection handler, answering a request it cannot parse (or one that failed past every
    handler) with its bare status: no body naming the parser's complaint, this server's name, no log line
    per request (an unauthenticated client must not be able to fill the log), and the connection closed."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("the response had begun: the connection ends")
        response = web.Response(status=status, headers={"Server": SERVER_NAME})
        response.force_close()
        return response
