"""The typed async client of the user-host RPC over NDJSON (a spawned host's stdio, or a Unix socket), and the
surface it shares with the gRPC client (`grpc_client.UserHostGrpcClient`).

Every request method of the catalog is a typed coroutine (from the generated `UserhostClientMethods`);
`plugin_call` calls a plugin method typed by the catalog, and cancelling the task awaiting it cancels the
call on the host. The host's notifications come out of `notifications()`. A connection that ends fails
every call in flight with `ConnectionLost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from wuu.generated.catalog import USERHOST_METHODS, USERHOST_PROTOCOL_VERSION
from wuu.generated.clients import UserhostClientMethods
from wuu.generated.models import (
    PluginClientCancelParams,
    PluginClientInvalidateParams,
    PluginClientRequestParams,
    PluginClientRequestResult,
    UserHostClientInfo,
    UserHostErrorCode,
    UserHostInitializeParams,
    UserHostInitializeResult,
    UserInput,
)
from wuu.generated.wire import WireModel
from wuu.worker.framing import Frame, MalformedFrame
from wuu.worker.peer import ConnectionLost, Envelope, Peer

from .envelope import FRAMING, RequestId, usable_id
from .errors import UserHostError

__all__ = ["ClientSurface", "ConnectionLost", "UserHostClient"]

R = TypeVar("R", bound=WireModel)
CLIENT_INFO = UserHostClientInfo(name="wuu-userhost-client", version="0.1.0")


def _jsonrpc_id(value: object) -> RequestId:
    request_id = usable_id(value)
    if request_id is None:
        raise MalformedFrame("the id is not a JsonRpcId")
    return request_id


CLIENT_ENVELOPE: Envelope[RequestId] = Envelope(
    framing=FRAMING, frame_id=_jsonrpc_id, request_keys=frozenset(), reply_too_large=None
)
"""The user-host RPC as a client reads and writes it: frames at the user host's limit, JsonRpcId ids. A
client sends no responses, so none is ever replaced."""


class ClientSurface(UserhostClientMethods):
    """What every user-host client offers, whatever its transport: typed requests, plugin calls,
    notifications. A transport supplies `request`, `lost`, `close` and the sending of plugin calls."""

    def __init__(self) -> None:
        self.initialized: UserHostInitializeResult | None = None
        """The result of this connection's `initialize`, once it has succeeded."""
        self._notifications: asyncio.Queue[PluginClientInvalidateParams | None] = asyncio.Queue()

    async def request(
        self, method: str, params: Mapping[str, Any], *, request_id: str | int | None = None
    ) -> Frame:
        """Send a request and return the host's response message (a success or an error response)."""
        raise NotImplementedError

    @property
    def lost(self) -> str | None:
        """Why the connection ended; None while it is open."""
        raise NotImplementedError

    async def close(self, timeout: float = 10.0) -> None:
        """Close the connection: the host detaches this client, as at EOF."""
        raise NotImplementedError

    async def _send_plugin_request(self, params: dict[str, Any]) -> Frame:
        """Send `plugin/client/request` so that cancelling the awaiting task cancels it on the host."""
        raise NotImplementedError

    async def call(self, method: str, params: WireModel, result: type[R]) -> R:
        """Send one request and decode its result; UserHostError on an error response."""
        return _decode(result, await self.request(method, params.to_wire()), method)

    async def initialize(self, params: UserHostInitializeParams | None = None) -> UserHostInitializeResult:
        """`initialize` (this client's info and the protocol version by default)."""
        self.initialized = await super().initialize(
            params
            or UserHostInitializeParams(protocol_version=USERHOST_PROTOCOL_VERSION, client_info=CLIENT_INFO)
        )
        return self.initialized

    async def plugin_call(
        self,
        plugin_id: str,
        method: str,
        params: WireModel,
        *,
        user_input: UserInput | None = None,
        fingerprint: str | None = None,
    ) -> WireModel:
        """Call a plugin method; its result as the catalog's result model. Cancelling the awaiting task
        cancels the call on the host (`plugin/client/cancel`)."""
        spec = USERHOST_METHODS[method]
        assert spec.kind == "plugin_request" and spec.result is not None, f"{method} is not a plugin method"
        optional = {"plugin_fingerprint": fingerprint, "user_input": user_input}
        request = PluginClientRequestParams(
            plugin_id=plugin_id,
            method=method,
            params=params.to_wire(),
            **{name: value for name, value in optional.items() if value is not None},
        )
        response = await self._send_plugin_request(request.to_wire())
        outer = _decode(PluginClientRequestResult, response, "plugin/client/request")
        return _decode(spec.result, {"result": outer.result}, method)

    async def notifications(self) -> AsyncIterator[PluginClientInvalidateParams]:
        """The host's `plugin/client/invalidate` notices, in order, until the connection ends."""
        while (notice := await self._notifications.get()) is not None:
            yield notice


class UserHostClient(ClientSurface):
    """A connection to one user host over NDJSON, on the protocol-neutral peer core with `CLIENT_ENVELOPE`
    (the user host's frame limit, replies matched by JSON-RPC id). Cancelling a plugin call sends
    `plugin/client/cancel` for it; the call's one response is still read (and dropped)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        process: asyncio.subprocess.Process | None = None,
    ) -> None:
        """`reader` must admit a line of the user host's frame limit (`ndjson.FRAMING.stream_limit`)."""
        super().__init__()
        self.process = process
        self._ids = itertools.count(1)
        # The cancel notices of cancelled calls: they must outlive the caller's cancellation, so no group
        # of the caller's can hold them; `close` ends them.
        self._tasks: set[asyncio.Future[None]] = set()
        self._peer = Peer(reader, writer, self, CLIENT_ENVELOPE, remote="the user host")
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def spawn(cls, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> UserHostClient:
        """Start a user host serving on its stdio (`wuu-userhost serve --stdio ...`) and connect to it."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            limit=FRAMING.stream_limit,
        )
        assert process.stdin is not None and process.stdout is not None
        return cls(process.stdout, process.stdin, process=process)

    @classmethod
    async def connect_unix(cls, path: str | os.PathLike[str]) -> UserHostClient:
        """Connect to a user host's Unix socket."""
        reader, writer = await asyncio.open_unix_connection(str(Path(path)), limit=FRAMING.stream_limit)
        return cls(reader, writer)

    @property
    def lost(self) -> str | None:
        """Why the connection ended; None while it is open."""
        return self._peer.lost

    # --- requests ------------------------------------------------------------------------------

    async def request(
        self, method: str, params: Mapping[str, Any], *, request_id: str | int | None = None
    ) -> Frame:
        """Send a request and return the host's response message (a success or an error response)."""
        frame_id = next(self._ids) if request_id is None else request_id
        return await self._peer.request(
            {"jsonrpc": "2.0", "id": frame_id, "method": method, "params": dict(params)}
        )

    async def _send_plugin_request(self, params: dict[str, Any]) -> Frame:
        request_id = next(self._ids)
        frame = {"jsonrpc": "2.0", "id": request_id, "method": "plugin/client/request", "params": params}
        waiter = self._peer.request(frame)
        try:
            return await asyncio.shield(waiter)
        except asyncio.CancelledError:
            if not waiter.done() and self.lost is None:
                self._background(self._cancel(request_id))
            raise

    async def _cancel(self, request_id: int) -> None:
        with contextlib.suppress(ConnectionLost, UserHostError):
            await self.plugin_client_cancel(PluginClientCancelParams(id=request_id))

    def _background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send_bytes(self, data: bytes) -> None:
        """Write raw bytes to the host (for tests of malformed input)."""
        await self._peer.send_bytes(data)

    def expect_response(self, request_id: str | int) -> asyncio.Future[Frame]:
        """A future for the response to a request sent by hand (`send_bytes`)."""
        return self._peer.expect_reply(request_id)

    # --- notifications (the Endpoint of the peer) ----------------------------------------------

    def on_notification(self, method: str, frame: Frame) -> str | None:
        if method != "plugin/client/invalidate":
            return None  # a client ignores a notification method it does not know
        try:
            notice = PluginClientInvalidateParams.model_validate_json(
                orjson.dumps(frame.get("params")), strict=True
            )
        except ValidationError as error:
            return f"plugin/client/invalidate: {error.errors()[0]['msg']}"
        self._notifications.put_nowait(notice)
        return None

    def on_request(self, frame_id: RequestId, method: str, frame: Frame) -> str | None:
        return f"the host sent a request ({method!r}); it sends only responses and notifications"

    async def _read(self) -> None:
        await self._peer.read()
        self._notifications.put_nowait(None)

    # --- the end -------------------------------------------------------------------------------

    async def close(self, timeout: float = 10.0) -> None:
        """Close the connection (EOF: the host detaches this client) and wait up to `timeout` for the host's
        side to end; a spawned host is then waited for as well, and killed after the timeout."""
        self._peer.end_output()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        self._peer.abort_output()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        if self.process is not None:
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


def _decode(model: type[R], response: Frame, method: str) -> R:
    """A success response's result as `model`; UserHostError for an error response."""
    if "error" in response:
        error: dict[str, Any] = response["error"] if isinstance(response["error"], dict) else {}
        data: dict[str, Any] = error["data"] if isinstance(error.get("data"), dict) else {}
        code = str(data.get("code"))
        field = data.get("field")
        raise UserHostError(
            UserHostErrorCode(code)
            if code in UserHostErrorCode._value2member_map_
            else UserHostErrorCode.INTERNAL,
            f"{method}: {error.get('message', '')}",
            field if isinstance(field, str) else None,
        )
    try:
        return model.model_validate_json(orjson.dumps(response.get("result")), strict=True)
    except ValidationError as error:
        raise UserHostError(
            UserHostErrorCode.INTERNAL, f"{method}: a result that is not {model.__name__}: {error}"
        ) from None
