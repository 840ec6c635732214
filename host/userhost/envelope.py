"""The JSON-RPC 2.0 envelope of the user-host RPC on a byte stream (spec/schema/userhost/envelope.schema.json):
its framing, what a usable id is, and an error response."""

from __future__ import annotations

from typing import Any

from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES
from wuu.worker.framing import Framing

from .errors import UserHostError

RequestId = str | int
"""A JSON-RPC id (JsonRpcId): a string and an integer that read alike are different ids."""
FRAMING = Framing(USERHOST_MAX_FRAME_BYTES)
"""One UTF-8 JSON message per line, at most `max_frame_bytes` with its newline."""
REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
MAX_ID_CHARS = 256
MAX_METHOD_CHARS = 128
MAX_INTEGER_ID = 2**53 - 1


def usable_id(value: object) -> RequestId | None:
    """The request id if it is a JsonRpcId (a string of 1 to 256 characters, or an integer within ±(2^53 - 1))."""
    if isinstance(value, str) and 1 <= len(value) <= MAX_ID_CHARS:
        return value
    if type(value) is int and -MAX_INTEGER_ID <= value <= MAX_INTEGER_ID:
        return value
    return None


def error_response(request_id: RequestId | None, error: UserHostError) -> dict[str, Any]:
    """A JsonRpcErrorResponse."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()}
