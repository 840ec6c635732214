"""The rules of the user-host RPC that every transport applies, written once and without I/O
(spec/schema/userhost/envelope.schema.json, spec/methods/userhost.json).

A transport turns what it receives into a `Request`: an NDJSON line through `decode`, an HTTP path or a gRPC
call through its own binding; what cannot be one is a `Refusal`, answered at once. The connection's
`Requests` admits a request or refuses it (an id already in flight, a method the catalog does not serve to
clients, anything but `initialize` before it, `initialize` twice or at another protocol version), and
`outcome` and `reply` turn a finished request into what its client gets. Nothing here reads, writes, waits
or needs an event loop, so every state transition is a plain function call (the approach of h11).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import orjson

from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES, USERHOST_METHODS, USERHOST_PROTOCOL_VERSION
from wuu.generated.methods import MethodSpec
from wuu.generated.models import UserHostErrorCode
from wuu.generated.wire import WireModel

from .envelope import MAX_METHOD_CHARS, REQUEST_KEYS, RequestId, error_response, usable_id
from .errors import UserHostError, internal_error

Work = TypeVar("Work")


@dataclass(frozen=True)
class Request:
    """One request a transport has received: its id, its method and its params (the spec's JSON)."""

    id: RequestId
    method: str
    params: Mapping[str, Any]
    id_name: str = "id"
    """What the transport calls the id (the envelope's `id`, a header, a metadata key), for an error naming it."""


@dataclass(frozen=True)
class Refusal:
    """A message that is no request the session can take: answered with `error` (`id` None when the message
    has no usable one)."""

    id: RequestId | None
    error: UserHostError

    def to_wire(self) -> dict[str, Any]:
        """The JsonRpcErrorResponse."""
        return error_response(self.id, self.error)


def decode(line: bytes) -> Request | Refusal | None:
    """One NDJSON message: a JsonRpcRequest, a refusal naming what is wrong with it, or None for a client's
    notification (discarded, never answered)."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        return Refusal(None, UserHostError(UserHostErrorCode.PARSE_ERROR, f"not JSON: {error}"))
    if isinstance(message, list):
        return Refusal(None, UserHostError(UserHostErrorCode.INVALID_REQUEST, "batches are not supported"))
    if not isinstance(message, dict):
        return Refusal(None, UserHostError(UserHostErrorCode.PARSE_ERROR, "not a JSON object"))
    if "id" not in message and "method" in message:
        return None
    request_id = usable_id(message.get("id"))
    if request_id is None:
        return Refusal(None, UserHostError(UserHostErrorCode.INVALID_REQUEST, "id: not a JsonRpcId"))
    extra = sorted(set(message) - REQUEST_KEYS)
    method, params = message.get("method"), message.get("params", {})
    problem = None
    if message.get("jsonrpc") != "2.0":
        problem = 'jsonrpc: must be "2.0"'
    elif extra:
        problem = f"unknown member {extra[0]!r}"
    elif not isinstance(method, str) or not 1 <= len(method) <= MAX_METHOD_CHARS:
        problem = f"method: a string of 1 to {MAX_METHOD_CHARS} characters"
    elif not isinstance(params, dict):
        problem = "params: an object"
    if problem is not None:
        return Refusal(request_id, UserHostError(UserHostErrorCode.INVALID_REQUEST, problem))
    assert isinstance(method, str) and isinstance(params, dict)
    return Request(request_id, method, params)


def check_protocol_version(version: int) -> None:
    """`unsupported_protocol_version` unless `version` is the one this host speaks."""
    if version != USERHOST_PROTOCOL_VERSION:
        raise UserHostError(
            UserHostErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
            f"version {version}; this host speaks {USERHOST_PROTOCOL_VERSION}",
        )


class Requests(Generic[Work]):
    """The protocol state of one connection: whether it has initialized, and its requests in flight, each
    with the work that will answer it."""

    def __init__(self) -> None:
        self.initialized = False
        self._in_flight: dict[RequestId, Work] = {}

    def admit(self, request: Request) -> MethodSpec[WireModel]:
        """The catalog entry of a request the connection may make now; UserHostError when it may not."""
        if request.id in self._in_flight:
            raise UserHostError(
                UserHostErrorCode.INVALID_REQUEST,
                f"{request.id_name}: {request.id!r} is already in flight on this connection",
            )
        spec = USERHOST_METHODS.get(request.method)
        if spec is None or spec.kind != "request" or spec.direction != "client_to_host":
            raise UserHostError(
                UserHostErrorCode.UNSUPPORTED_METHOD, f"{request.method} is not served on this transport"
            )
        if request.method != "initialize" and not self.initialized:
            raise UserHostError(UserHostErrorCode.NOT_INITIALIZED, f"{request.method} before initialize")
        return spec

    def initialize(self, protocol_version: int) -> None:
        """Initialize the connection at `protocol_version`: `already_initialized` the second time,
        `unsupported_protocol_version` at a version this host does not speak."""
        if self.initialized:
            raise UserHostError(UserHostErrorCode.ALREADY_INITIALIZED, "this connection is initialized")
        check_protocol_version(protocol_version)
        self.initialized = True

    def start(self, request_id: RequestId, work: Work) -> None:
        """An admitted request is in flight until `finish`, answered by `work`."""
        self._in_flight[request_id] = work

    def finish(self, request_id: RequestId) -> None:
        """The request is answered: its id may be used again."""
        self._in_flight.pop(request_id, None)

    def in_flight(self, request_id: RequestId) -> bool:
        """Whether a request with this id is in flight."""
        return request_id in self._in_flight

    def get(self, request_id: RequestId) -> Work | None:
        """The work of the request in flight with this id, if there is one."""
        return self._in_flight.get(request_id)

    def work(self) -> list[Work]:
        """The work of every request in flight."""
        return list(self._in_flight.values())


class Finished(Protocol):
    """A finished request's future (an asyncio or a concurrent.futures one)."""

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def result(self) -> dict[str, Any]: ...


def outcome(finished: Finished, request_id: object) -> dict[str, Any] | UserHostError:
    """What the client of a finished request gets: its result object, `cancelled` when its work was
    cancelled, its UserHostError, or `internal` for any other failure (whose details go to the log only)."""
    if finished.cancelled():
        return UserHostError(UserHostErrorCode.CANCELLED, "cancelled")
    error = finished.exception()
    return finished.result() if error is None else failure(error, request_id)


def failure(error: BaseException, request_id: object) -> UserHostError:
    """The error the client of a request that failed with `error` gets: `error` itself when it is a
    UserHostError, else `internal`, whose details go to the log only."""
    return error if isinstance(error, UserHostError) else internal_error(error, request_id)


def reply(request_id: RequestId, answer: dict[str, Any] | UserHostError) -> dict[str, Any]:
    """The JSON-RPC response of a request: its result, or its error."""
    if isinstance(answer, UserHostError):
        return error_response(request_id, answer)
    return {"jsonrpc": "2.0", "id": request_id, "result": answer}


def too_large(size: int) -> UserHostError | None:
    """The error that replaces a response of `size` bytes on the wire when it is over `max_frame_bytes`."""
    if size <= USERHOST_MAX_FRAME_BYTES:
        return None
    return UserHostError(UserHostErrorCode.INTERNAL, f"the response of {size} bytes is too large")
