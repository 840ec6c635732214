"""The typed async client of the user-host RPC over gRPC (`grpc_service.GrpcServer`), with the surface of the
NDJSON client."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Mapping
from typing import Any

import grpc
import orjson
from pydantic import ValidationError

from wuu.generated.models import PluginClientInvalidateParams
from wuu.worker.framing import Frame
from wuu.worker.peer import ConnectionLost

from .address import GrpcAddress
from .bearer import AUTHORIZATION
from .client import ClientSurface
from .grpc_wire import (
    CONNECTION_KEY,
    MESSAGE_OPTIONS,
    NOTIFICATIONS,
    RPC_ID_KEY,
    RPCS,
    json_rpc_error,
    to_json,
    to_message,
)

__all__ = ["UserHostGrpcClient"]


class UserHostGrpcClient(ClientSurface):
    """A connection to one user host over gRPC (`GrpcServer`), with the surface of `UserHostClient`.

    `initialize` opens the connection: the host names it (`wuu-connection`), every later call sends that
    name, and the client holds the connection's notification stream open until `close`, as a socket client
    holds its socket. Cancelling the task awaiting a call cancels its gRPC call, which for a plugin call
    has the effect of `plugin/client/cancel`. Once the connection has ended (`lost`), calls raise
    `ConnectionLost`; so does a call the host cannot be reached for. A call that fails in gRPC itself
    without a JsonRpcError (a message over the limit, a missing or revoked token) raises its
    `grpc.aio.AioRpcError`.
    """

    def __init__(self, channel: grpc.aio.Channel, token: str | None = None) -> None:
        """`channel` leads to the host and admits its message sizes (`grpc_wire.MESSAGE_OPTIONS`);
        `token` is the bearer token every call carries (a host on a TCP address needs one)."""
        super().__init__()
        self.connection_id: str | None = None
        """The host's name for this connection, once `initialize` has succeeded."""
        self._channel = channel
        self._authorization = () if token is None else ((AUTHORIZATION, f"Bearer {token}"),)
        self._ids = itertools.count(1)
        self._lost: str | None = None
        self._stream: asyncio.Task[None] | None = None
        self._rpcs = {
            method: channel.unary_unary(
                rpc.path,
                request_serializer=rpc.request.SerializeToString,
                response_deserializer=rpc.response.FromString,
            )
            for method, rpc in RPCS.items()
        }

    @classmethod
    async def connect(cls, address: str | GrpcAddress, *, token: str | None = None) -> UserHostGrpcClient:
        """Open a channel to a user host's gRPC address (`unix:PATH` or a loopback `IP:PORT`; GrpcAddressError
        for another). A TCP address needs `token`, a token of the host's space (`wuu-userhost token
        create`); without a valid one every call fails with UNAUTHENTICATED. Nothing is sent until
        `initialize`."""
        parsed = GrpcAddress.parse(address) if isinstance(address, str) else address
        return cls(grpc.aio.insecure_channel(parsed.target, options=MESSAGE_OPTIONS), token)

    @property
    def lost(self) -> str | None:
        """Why the connection ended; None while it is open (or not yet opened)."""
        return self._lost

    # --- requests ------------------------------------------------------------------------------

    async def request(
        self, method: str, params: Mapping[str, Any], *, request_id: str | int | None = None
    ) -> Frame:
        """Call the rpc of `method` with `params` (the spec's JSON) and return the JSON-RPC response it
        stands for: a success response, or an error response with the JsonRpcError of the call's status.

        `request_id`, when given, is sent as the call's JSON-RPC id (`wuu-rpc-id`), for a PluginClientCancel
        to name; without it the host picks an id (this client cancels a call by cancelling its gRPC call),
        and the returned response carries a local one."""
        rpc = RPCS.get(method)
        if rpc is None:
            raise ValueError(f"method: no rpc of the UserHost service carries {method!r}")
        if self._lost is not None:
            raise ConnectionLost(self._lost)
        frame_id = next(self._ids) if request_id is None else request_id
        call = self._rpcs[method](to_message(rpc.request, params), metadata=self._metadata(request_id))
        try:
            reply = await call
        except asyncio.CancelledError:
            call.cancel()
            raise
        except grpc.aio.AioRpcError as failure:
            error = json_rpc_error(failure)
            if error is not None:
                return {"jsonrpc": "2.0", "id": frame_id, "error": error}
            if failure.code() == grpc.StatusCode.UNAVAILABLE:
                raise ConnectionLost(f"the user host is unreachable: {failure.details()}") from None
            raise
        if method == "initialize":
            self._opened(await call.initial_metadata())
        return {"jsonrpc": "2.0", "id": frame_id, "result": to_json(reply)}

    def _metadata(self, request_id: str | int | None) -> tuple[tuple[str, str], ...]:
        named = () if self.connection_id is None else ((CONNECTION_KEY, self.connection_id),)
        if request_id is None:
            return (*self._authorization, *named)
        return (*self._authorization, *named, (RPC_ID_KEY, json.dumps(request_id)))

    async def _send_plugin_request(self, params: dict[str, Any]) -> Frame:
        return await self.request("plugin/client/request", params)  # its cancellation cancels the gRPC call

    def _opened(self, metadata: grpc.aio.Metadata) -> None:
        """Initialize succeeded: keep the connection's name and open its notification stream."""
        name = metadata.get(CONNECTION_KEY)
        if not isinstance(name, str) or not name:
            raise ConnectionLost(f"the host's answer to Initialize carries no {CONNECTION_KEY} metadata")
        self.connection_id = name
        self._stream = asyncio.create_task(self._read_notifications())

    # --- notifications -------------------------------------------------------------------------

    async def _read_notifications(self) -> None:
        stream = self._channel.unary_stream(
            NOTIFICATIONS.path,
            request_serializer=NOTIFICATIONS.request.SerializeToString,
            response_deserializer=NOTIFICATIONS.response.FromString,
        )(NOTIFICATIONS.request(), metadata=self._metadata(None))
        why = "the host ended the connection"
        try:
            async for message in stream:
                self._notifications.put_nowait(
                    PluginClientInvalidateParams.model_validate_json(
                        orjson.dumps(to_json(message)), strict=True
                    )
                )
        except grpc.aio.AioRpcError as failure:
            error = json_rpc_error(failure)
            why = (
                str(error["message"]) if error is not None else f"{failure.code().name}: {failure.details()}"
            )
        except ValidationError as error:
            stream.cancel()
            why = f"plugin/client/invalidate: {error.errors()[0]['msg']}"
        finally:
            self._lost = self._lost or why
            self._notifications.put_nowait(None)

    # --- the end -------------------------------------------------------------------------------

    async def close(self, timeout: float = 10.0) -> None:
        """Close the connection: a Shutdown detaches this client from the host, its notification stream
        ends, then the channel, giving calls still in flight up to `timeout` seconds.

        The Shutdown is what ends an open connection for sure: the end of the stream alone would not when
        the stream's call has not yet reached the host, and the host would keep the connection until its
        idle timeout."""
        if self._lost is None and self.connection_id is not None:
            with contextlib.suppress(ConnectionLost, grpc.aio.AioRpcError):
                await self.request("shutdown", {})
        self._lost = self._lost or "the client closed the connection"
        if self._stream is not None:
            self._stream.cancel()
            await asyncio.gather(self._stream, return_exceptions=True)
        self._notifications.put_nowait(None)
        await self._channel.close(timeout)
