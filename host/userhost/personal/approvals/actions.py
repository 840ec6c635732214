"""What a card says of an action (spec/schema/userhost/approvals.schema.json): the precondition it binds, the
preview, the one-line summary with the consequence first, and the digest over all of it.

`describe` is blocking (it inspects the files root and resolves commands): call it off the event loop.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wuu.worker.native.environment import MINIMAL_PATH

from .files import FilesRoot, TargetRefused, components
from .policy import digest


@dataclass(frozen=True)
class Described:
    """An action as its card shows and binds it."""

    action: Mapping[str, Any]
    precondition: Mapping[str, Any] | None
    """What must still hold when the action starts besides the digest: the original's digest and size (None
    when missing), or the identity of the resolved command's executable (a replaced program is a changed
    command)."""
    preview: Mapping[str, Any]
    summary: str
    resolved_command: str | None

    @property
    def digest(self) -> str:
        """The card's digest (spec/schema/receipts/action.schema.json, ActionDigest): the action with a file
        action's precondition or a command's resolved command."""
        bound: dict[str, Any] = {"action": dict(self.action)}
        if self.action["tool"] in ("write_file", "edit_file"):
            bound["precondition"] = self.precondition
        elif self.action["tool"] in ("exec_command", "process_start"):
            bound["resolved_command"] = self.resolved_command
        return digest(bound)


def describe(action: Mapping[str, Any], files: FilesRoot, process_argv: Sequence[str] = ()) -> Described:
    """The card's view of a valid action (its wire JSON); `process_argv` is the command line of the process a
    `process_write` goes to. TargetRefused when the action may not run here."""
    tool = action["tool"]
    if tool in ("write_file", "edit_file"):
        return _file(action, files)
    if tool in ("exec_command", "process_start"):
        return _command(action, files.root)
    data = action["data"]
    return Described(
        action,
        {"process_id": action["process_id"], "argv": list(process_argv)},
        {
            "kind": "process_write",
            "process_id": action["process_id"],
            "argv": list(process_argv),
            "data": data,
        },
        f"Send {len(data.encode())} bytes of input to process {action['process_id']}",
        None,
    )


def _file(action: Mapping[str, Any], files: FilesRoot) -> Described:
    target = files.inspect(action["path"])
    path = action["path"]
    if action["tool"] == "edit_file" and target.existing is None:
        raise TargetRefused("not_regular_file", f"{path!r} does not exist: edit_file needs an existing file")
    preview: dict[str, Any] = {
        "kind": "file",
        "path": path,
        "operation": action["tool"],
        "original": target.original.as_json(),
    }
    if action["tool"] == "write_file":
        preview["content"] = action["content"]
        size = len(action["content"].encode())
        if target.existing is None:
            summary = f"Create {path} ({size} bytes)"
        else:
            summary = f"Replace the content of {path} ({target.existing.size} -> {size} bytes)"
    else:
        preview["old_string"] = action["old_string"]
        preview["new_string"] = action["new_string"]
        which = "every occurrence" if action["replace_all"] else "one occurrence"
        summary = f"Edit {path}: replace {which} of a {len(action['old_string'])}-character text"
    return Described(action, target.precondition(), preview, summary, None)


def _command(action: Mapping[str, Any], root: Path) -> Described:
    cwd = action["cwd"]
    if cwd != ".":
        components(cwd)
    argv = list(action["argv"])
    if not argv or not argv[0]:
        raise TargetRefused("invalid_action", "argv is empty")
    resolved = resolve(argv[0], root / cwd, action["env"].get("PATH", MINIMAL_PATH))
    precondition = _identity(resolved)
    preview = {
        "kind": "command",
        "argv": argv,
        "resolved_command": resolved,
        "cwd": cwd,
        "env": dict(action["env"]),
        "permission_mode": "standard",
    }
    verb = "Run" if action["tool"] == "exec_command" else "Start the interactive process"
    summary = f"{verb} {shlex.join(argv)} in {cwd if cwd != '.' else 'the files root'}"
    return Described(action, precondition, preview, summary, resolved)


def resolve(command: str, cwd: Path, path: str) -> str | None:
    """The absolute path of the executable `command` names, as the command's PATH finds it (a name with a
    `/` is taken relative to `cwd`), or None when none is found."""
    if "/" in command:
        candidates = [cwd / command]
    else:
        candidates = [Path(folder) / command for folder in path.split(":") if folder.startswith("/")]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    return None


def _identity(resolved: str | None) -> Mapping[str, int] | None:
    """The identity of the resolved executable: a replaced one is a changed command."""
    if resolved is None:
        return None
    info = os.stat(resolved)
    if not stat.S_ISREG(info.st_mode):
        return None
    return {"device": info.st_dev, "inode": info.st_ino, "size": info.st_size, "mtime_ns": info.st_mtime_ns}
