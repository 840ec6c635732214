"""The environment a command runs with: nothing of the worker's own (spec: execute, "A command sees only ...")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

MINIMAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def command_environment(
    temp_dir: Path, forwarded: Mapping[str, str] | None, requested: Mapping[str, str] | None
) -> dict[str, str]:
    """A minimal PATH, TMPDIR, then the binding's forwarded variables, then the request's own."""
    return {"PATH": MINIMAL_PATH, "TMPDIR": str(temp_dir), **(forwarded or {}), **(requested or {})}
