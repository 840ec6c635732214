"""The environment a command runs with: nothing of the worker's own (spec: execute, "A command sees only ...")."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from wuu.generated.plain import ErrorCode

from ..errors import WorkerError

MINIMAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def command_environment(
    temp_dir: Path, forwarded: Mapping[str, str] | None, requested: Mapping[str, str] | None
) -> dict[str, str]:
    """A minimal PATH, TMPDIR, then the binding's forwarded variables, then the request's own."""
    return {"PATH": MINIMAL_PATH, "TMPDIR": str(temp_dir), **(forwarded or {}), **(requested or {})}


def required_command(command: str, needed_by: str) -> str:
    """The path of `command`, which a tool runs itself; `unsupported_tool` saying what needs it when it is not
    installed where the worker runs (never a slower stand-in presented as the same tool)."""
    found = shutil.which(command)
    if found is None:
        raise WorkerError(
            ErrorCode.UNSUPPORTED_TOOL,
            f"{needed_by} (the {command} command), which is not installed where this worker runs",
        )
    return found
