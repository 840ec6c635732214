"""Mutants of the JSON-RPC envelope: parse errors, ids, notifications, line limits, absent params."""

from __future__ import annotations

import itertools

from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES, USERHOST_METHODS

from . import mutant
from .harness import Hub, Message, Relay, RequestRewriter, code_of, encode, error_message, key, message_of


@mutant(
    "parse-error-with-an-id",
    "answers a line that is not JSON with the id of the client's last request instead of null",
    "envelope.parse-error",
)
class ParseErrorWithAnId(Relay):
    """Every `parse_error` the host answers (always with a null id) gets the id of the last request the
    client sent, or 0 before any."""

    last_id: object = 0

    def from_client(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and isinstance(message.get("id"), str | int):
            self.last_id = message["id"]
        self.to_host(line)

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and message.get("id", 0) is None and code_of(message) == "parse_error":
            self.answer({**message, "id": self.last_id})
            return
        self.to_client(line)


@mutant(
    "notifications-answered",
    "answers a client's notification with an invalid_request error instead of discarding it",
    "envelope.notifications-unanswered",
)
class NotificationsAnswered(Relay):
    """A message with a method and no id is answered `invalid_request` (null id), as if it were a request
    without a usable id; the host never sees it."""

    def from_client(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and "method" in message and "id" not in message:
            self.answer(error_message(None, -32600, "invalid_request", "a notification is not a request"))
            return
        self.to_host(line)


@mutant(
    "float-id-accepted",
    "serves a request whose id is a number with a fraction (or an exponent) as if its id were valid",
    "envelope.invalid-request",
)
class FloatIdAccepted(Relay):
    """A request whose id is a JSON number that is not an integer goes to the host under a fresh string id,
    and the response comes back with the client's number as its id."""

    fresh = itertools.count(1)

    def __init__(self, hub: Hub, transport: str) -> None:
        super().__init__(hub, transport)
        self.floats: dict[str, float] = {}

    def from_client(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and isinstance(message.get("id"), float) and "method" in message:
            stand_in = f"float-{next(self.fresh)}"
            self.floats[stand_in] = message["id"]
            self.send({**message, "id": stand_in})
            return
        self.to_host(line)

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and isinstance(message.get("id"), str) and message["id"] in self.floats:
            self.answer({**message, "id": self.floats.pop(message["id"])})
            return
        self.to_client(line)


@mutant(
    "duplicate-in-flight-id-served",
    "serves a request whose id is that of a request still in flight on the connection",
    "envelope.duplicate-in-flight-id",
)
class DuplicateInFlightIdServed(Relay):
    """A request reusing the id of a request in flight goes to the host under a fresh id, and its response
    comes back with the reused id: the client gets two responses with the same id."""

    fresh = itertools.count(1)

    def __init__(self, hub: Hub, transport: str) -> None:
        super().__init__(hub, transport)
        self.duplicates: dict[str, object] = {}

    def from_client(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and "method" in message and key(message.get("id")) in self.requests:
            stand_in = f"duplicate-{next(self.fresh)}"
            self.duplicates[stand_in] = message["id"]
            self.send({**message, "id": stand_in})
            return
        self.to_host(line)

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and isinstance(message.get("id"), str) and message["id"] in self.duplicates:
            self.answer({**message, "id": self.duplicates.pop(message["id"])})
            return
        self.to_client(line)


@mutant(
    "numeric-string-ids-answered-as-integers",
    'answers a request with the string id "7" with the integer id 7',
    "envelope.ids-echoed",
)
class NumericStringIds(Relay):
    """A response whose id is a string of decimal digits carries that number as an integer id instead."""

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        request_id = message.get("id") if message is not None else None
        if message is not None and isinstance(request_id, str) and request_id.isdecimal():
            self.answer({**message, "id": int(request_id)})
            return
        self.to_client(line)


@mutant(
    "oversize-line-unanswered",
    "drops a line over max_frame_bytes without answering it",
    "envelope.oversize-line",
)
class OversizeLineUnanswered(Relay):
    """A line over the frame limit never reaches the host, so nothing answers it."""

    def oversize_from_client(self, piece: bytes) -> None:
        pass


@mutant(
    "max-frame-refused",
    "answers parse_error to a line of exactly max_frame_bytes (the limit counts the newline)",
    "envelope.max-frame-accepted",
)
class MaxFrameRefused(Relay):
    """A line of max_frame_bytes bytes, its newline included, is refused as if it were over the limit:
    `parse_error` with a null id, and the host never sees it."""

    def from_client(self, line: bytes) -> None:
        if len(line) >= USERHOST_MAX_FRAME_BYTES:
            self.answer(error_message(None, -32700, "parse_error", "the line exceeds max_frame_bytes"))
            return
        self.to_host(line)


@mutant(
    "absent-params-refused",
    "answers a request without params invalid_params instead of taking them as {}",
    "envelope.absent-params",
)
class AbsentParamsRefused(RequestRewriter):
    """A request without `params` is answered `invalid_params` before the host sees it."""

    def rewrite(self, request: Message) -> list[Message]:
        if "params" in request or "id" not in request:
            return [request]
        self.to_client(encode(error_message(request["id"], -32602, "invalid_params", "params: required")))
        return []


@mutant(
    "state-checked-before-method",
    "answers not_initialized, not unsupported_method, to a method it does not serve before initialize",
    "envelope.check-order",
)
class StateCheckedBeforeMethod(RequestRewriter):
    """Until the connection is initialized, a well-formed request for a method outside the catalog is
    answered `not_initialized` (the connection state checked before the method); the host never sees it."""

    def rewrite(self, request: Message) -> list[Message]:
        well_formed = request.get("jsonrpc") == "2.0" and isinstance(request.get("params", {}), dict)
        if self.initialized is not None or not well_formed or request["method"] in USERHOST_METHODS:
            return [request]
        if "id" not in request:
            return [request]
        self.answer(error_message(request["id"], -32000, "not_initialized", "initialize first"))
        return []
