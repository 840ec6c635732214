"""Protocol errors: a code from the spec's ErrorCode and a human message."""

from __future__ import annotations

from wuu.generated.models import ErrorCode


class WorkerError(Exception):
    """A request failed with one of the protocol's error codes.

    Raise it from a handler; the SDK answers the request with `code: message`.
    """

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        message = " ".join(message.splitlines())  # an error string is one line
        super().__init__(f"{code.value}: {message}" if message else code.value)
        self.code = code
        self.message = message

    @property
    def wire(self) -> str:
        """The error string as it travels in a reply frame."""
        return str(self)


class CleanupFailed(Exception):
    """A provider's cleanup did not complete; resources may remain (reported, never swallowed)."""
