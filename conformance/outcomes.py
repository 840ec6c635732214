"""How a case, or a whole run, ends other than by passing: the exceptions both suites and the runner share, and
the checks of a case's session that raise them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn


class CaseFailed(Exception):
    """The implementation broke the rule the case checks (or another rule on the way)."""


class CaseSkipped(Exception):
    """The case does not apply: the implementation does not offer what it needs."""


class StartFailure(Exception):
    """The command under test could not be started or ended before answering its first request."""

    def __init__(self, command: Sequence[str], what: str, stderr: str) -> None:
        super().__init__(what)
        self.command = list(command)
        self.what = what
        self.stderr = stderr


class Checks:
    """What every suite's session offers its cases: fail the case unless a condition holds, or skip it."""

    def expect(self, condition: object, message: str) -> None:
        """Fail the case with `message` unless `condition` holds."""
        if not condition:
            raise CaseFailed(message)

    def skip(self, reason: str) -> NoReturn:
        """End the case as skipped: it does not apply to this implementation, for `reason`."""
        raise CaseSkipped(reason)


def schema_problem(error: Any) -> str:
    """A schema validation error as a failure names it: where in the message (a dotted path), then what."""
    where = ".".join(str(part) for part in error.absolute_path) or "(the object)"
    return f"{where}: {error.message}"
