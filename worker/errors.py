"""Protocol errors: a code from the spec's ErrorCode and a human message (spec/schema/worker/errors.schema.json).

An error string on the wire is `code` or `code: message`; `split_error` is the one parser of it.
"""

from __future__ import annotations

from wuu.generated.plain import ErrorCode


def split_error(wire: str) -> tuple[str, str]:
    """An error string's code and message: `code: message` gives both, a bare `code` an empty message."""
    code, _, message = wire.partition(":")
    return code, message.removeprefix(" ")


def error_code(wire: str) -> ErrorCode:
    """The ErrorCode of an error string from a peer (`internal` for a code the spec does not know)."""
    code, _ = split_error(wire)
    return ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.INTERNAL


class WorkerError(Exception):
    """A request failed with one of the protocol's error codes.

    Raise it from a handler; the SDK answers the request with `code: message`.
    """

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        message = " ".join(message.splitlines())  # an error string is one line
        super().__init__(f"{code.value}: {message}" if message else code.value)
        self.code = code
        self.message = message

    @classmethod
    def from_wire(cls, wire: str) -> WorkerError:
        """The error a peer answered: its code and message (a code the spec does not know is `internal`,
        with the whole string as the message)."""
        code = error_code(wire)
        raw, message = split_error(wire)
        return cls(code, message if raw == code.value else wire)

    @property
    def wire(self) -> str:
        """The error string as it travels in a reply frame."""
        return str(self)


class CleanupFailed(Exception):
    """A provider's cleanup did not complete; resources may remain (reported, never swallowed)."""
