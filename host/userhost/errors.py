"""User-host errors: a stable code and its JSON-RPC error object (spec/schema/userhost/envelope.schema.json)."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from wuu.generated.catalog import USER_HOST_ERROR_CODE_JSONRPC_NUMBER
from wuu.generated.models import UserHostErrorCode

MAX_MESSAGE_CHARS = 4096

log = logging.getLogger("wuu.host.userhost")


class UserHostError(Exception):
    """A request failed with one of the user-host error codes.

    Raise it from a plugin method or a host service; the host answers the request with its error object.
    `field` names the offending params field (for `invalid_params`), as a dotted path.
    """

    def __init__(self, code: UserHostErrorCode, message: str = "", field: str | None = None) -> None:
        super().__init__(f"{code.value}: {message}" if message else code.value)
        self.code = code
        self.message = " ".join(message.splitlines())[:MAX_MESSAGE_CHARS] or code.value
        self.field = field

    @property
    def number(self) -> int:
        """The JSON-RPC error number of the code (the spec's `x-jsonrpc-number`)."""
        return USER_HOST_ERROR_CODE_JSONRPC_NUMBER[self.code]

    def to_wire(self) -> dict[str, Any]:
        """The JsonRpcError object."""
        data: dict[str, Any] = {"code": self.code.value}
        if self.field:
            data["field"] = self.field
        return {"code": self.number, "message": self.message, "data": data}


class UserHostStartError(UserHostError):
    """The host cannot start (no binding, isolation not verified, an unknown isolation mode, unsafe storage,
    another host running); nothing was written."""


def internal_error(error: BaseException, request_id: object) -> UserHostError:
    """The `internal` error a client gets for a request that failed unexpectedly with `error`.

    The client learns only that it failed and an error id; the log gets the details (the exception's text
    may name files, paths or state no client may see) under the same id, so an operator can find them.
    """
    error_id = secrets.token_hex(8)
    log.error(
        "request %r failed (error id %s)", request_id, error_id, exc_info=error, extra={"error_id": error_id}
    )
    return UserHostError(
        UserHostErrorCode.INTERNAL,
        f"the host failed to answer (error id {error_id}; its log has the details)",
    )
