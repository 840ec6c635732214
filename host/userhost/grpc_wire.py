"""What both ends of the user-host RPC over gRPC share (the service `UserHost` of
spec/proto/wuu/userhost/v1/userhost.proto, whose comment states the rules): the rpcs and the catalog methods
they carry, the metadata keys, the message sizes, the status of an error and the JsonRpcError in its details,
the conversion of messages to and from the spec's JSON, and the addresses a host serves gRPC on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2, message_factory
from google.protobuf.message import Message
from google.rpc import status_pb2

from wuu.generated import protojson
from wuu.generated.catalog import USER_HOST_ERROR_CODE_GRPC_STATUS, USERHOST_MAX_FRAME_BYTES, USERHOST_METHODS
from wuu.generated.pb.wuu.userhost.v1 import userhost_pb2

from .envelope import MAX_INTEGER_ID
from .errors import UserHostError

SERVICE = userhost_pb2.DESCRIPTOR.services_by_name["UserHost"].full_name
"""The gRPC service name, `wuu.userhost.v1.UserHost` (also the health service's name for it)."""
CONNECTION_KEY = "wuu-connection"
"""The metadata key naming a connection: sent by the host with Initialize's answer, then by the client."""
RPC_ID_KEY = "wuu-rpc-id"
"""The metadata key of a call's JSON-RPC id, as the id's JSON text (`7`, `"call-7"`)."""
STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""The trailing metadata key of gRPC's rich error model: a google.rpc.Status holding the JsonRpcError."""
MESSAGE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", USERHOST_MAX_FRAME_BYTES),
    ("grpc.max_send_message_length", USERHOST_MAX_FRAME_BYTES),
)
"""Channel and server options: messages up to `max_frame_bytes` each way."""


# --- the rpcs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rpc:
    """One rpc of the service and the catalog method it carries."""

    name: str
    """The rpc's name (`PluginClientRequest`)."""
    method: str
    """The catalog method (`plugin/client/request`)."""
    request: type[Message]
    response: type[Message]

    @property
    def path(self) -> str:
        """The rpc's gRPC path."""
        return f"/{SERVICE}/{self.name}"


def _rpcs() -> dict[str, Rpc]:
    """Every rpc by its catalog method, matched by message: a request rpc takes its method's params def, the
    notification stream returns its notification's params def."""
    by_params = {
        spec.params.__name__: method
        for method, spec in USERHOST_METHODS.items()
        if spec.kind in ("request", "notification")
    }
    found: dict[str, Rpc] = {}
    for rpc in userhost_pb2.DESCRIPTOR.services_by_name["UserHost"].methods:
        carried = rpc.output_type if rpc.server_streaming else rpc.input_type
        method = by_params[carried.name]
        found[method] = Rpc(
            rpc.name,
            method,
            message_factory.GetMessageClass(rpc.input_type),
            message_factory.GetMessageClass(rpc.output_type),
        )
    missing = set(by_params.values()) - set(found)
    if missing:
        raise RuntimeError(f"the UserHost service has no rpc for {sorted(missing)}")
    return found


_ALL_RPCS = _rpcs()
NOTIFICATIONS = _ALL_RPCS.pop("plugin/client/invalidate")
"""The server-streaming rpc of the host's notifications."""
RPCS: Mapping[str, Rpc] = _ALL_RPCS
"""The unary rpcs, by the catalog method each carries."""


# --- messages ------------------------------------------------------------------------------------------


def json_integers(value: Any) -> Any:
    """`value` with every whole number within ±(2^53 - 1) as an int.

    google.protobuf.Struct and Value hold numbers as doubles, so an integer comes out of them as `7.0`, which
    the spec's strict validation rejects where an integer belongs; the service comment makes such a number
    the JSON integer it reads as.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INTEGER_ID:
        return int(value)
    if isinstance(value, dict):
        return {key: json_integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_integers(item) for item in value]
    return value


def to_json(message: Message) -> dict[str, Any]:
    """The spec's JSON of a message (its def is the message's name)."""
    value: dict[str, Any] = json_integers(protojson.from_proto(message.DESCRIPTOR.name, message))
    return value


def to_message(cls: type[Message], value: Mapping[str, Any]) -> Message:
    """The proto twin `cls` of the spec's JSON `value`."""
    return protojson.to_proto(cls.DESCRIPTOR.name, dict(value), cls())


# --- errors --------------------------------------------------------------------------------------------


def error_status(error: UserHostError) -> tuple[grpc.StatusCode, tuple[tuple[str, bytes], ...]]:
    """The status code of an error and the trailing metadata whose details carry its JsonRpcError."""
    code = USER_HOST_ERROR_CODE_GRPC_STATUS[error.code]
    detail = any_pb2.Any()
    detail.Pack(to_message(userhost_pb2.JsonRpcError, error.to_wire()))
    status = status_pb2.Status(code=code.value[0], message=error.message, details=[detail])
    return code, ((STATUS_DETAILS_KEY, status.SerializeToString()),)


def json_rpc_error(failure: grpc.aio.AioRpcError) -> dict[str, Any] | None:
    """The JsonRpcError that a failed call's status details carry; None when they carry none (a failure of
    gRPC itself: the host unreachable, a message over the limit)."""
    for key, value in failure.trailing_metadata() or ():
        if key != STATUS_DETAILS_KEY:
            continue
        for detail in status_pb2.Status.FromString(value).details:
            if detail.Is(userhost_pb2.JsonRpcError.DESCRIPTOR):
                message = userhost_pb2.JsonRpcError()
                detail.Unpack(message)
                return to_json(message)
    return None
