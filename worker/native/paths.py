"""Resolving a workspace tool's path argument against the bound root (the path rules of execute.schema.json)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from wuu.generated.models import ErrorCode
from wuu.worker.errors import WorkerError

MAX_SYMLINK_HOPS = 40
"""How many symlinks one resolution follows before giving up, as Linux does (its ELOOP limit)."""


def resolve(root: Path, path: str, *, confined: bool) -> Path:
    """Resolve a tool's `path` argument to an absolute path, following symlinks.

    `root` is the bound root: absolute and existing (it may itself be reached through symlinks). A
    relative `path` is taken against the root, an absolute one as is. The path is walked component by
    component, and each symlink met is replaced by its target (at most MAX_SYMLINK_HOPS of them).
    Components that do not exist, such as a file about to be written or directories about to be created,
    are appended as named: the result is then the resolved existing part plus the remaining names, and a
    dangling symlink resolves to its would-be target. `..` steps back from the resolved location, never
    lexically over a symlink.

    When `confined` (`standard` and `read_only`), every location of the walk must stay inside the root's
    real path: `..` above the root, an absolute path outside it, and a symlink (at any component,
    dangling or not) whose target is outside raise WorkerError `path_outside_root`. An absolute path, or
    an absolute symlink target, may cross directories outside the root on its way in: only where it
    lands counts, and from there on it may not leave again. When not confined (`unconfined`) the walk is
    the same with no boundary.

    Raises WorkerError `invalid_request` for a NUL byte or too many symlinks (a loop), and
    `permission_denied` when a directory on the way cannot be searched (its entries cannot be checked).

    Only metadata is read (lstat, readlink), never content. The answer holds when it is given: a
    concurrent writer can swap a component for a symlink before the caller uses the path. Commands are
    contained by the OS sandbox, not by this check; file tools open the result with the flags of
    open_flags_nofollow(), so that a symlink swapped in as the final component is refused rather than
    followed. Swaps of intermediate directories remain a known limitation.
    """
    if "\0" in path:
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"path {path!r} contains a NUL byte")
    real_root = os.path.realpath(root)
    start = "/" if os.path.isabs(path) else real_root
    location = _walk(start, path, real_root, path if confined else None)
    if confined and not _within(location, real_root):
        raise _outside(path)
    return Path(location)


def open_flags_nofollow(flags: int = os.O_RDONLY) -> int:
    """The `os.open` flags for a path that resolve() returned: `flags` plus O_NOFOLLOW and O_CLOEXEC.

    resolve() gives a path whose existing final component is not a symlink; O_NOFOLLOW makes the open
    fail (ELOOP) instead of following a symlink put there since, closing that race for the last component.
    """
    return flags | os.O_NOFOLLOW | os.O_CLOEXEC


def _walk(start: str, path: str, real_root: str, confined_path: str | None) -> str:
    """Walk `path` from `start`; `confined_path` is the path to name in errors, or None when unconfined."""
    location = start
    entered = _within(location, real_root)
    # The components still to walk, last first; None marks where the target of an absolute symlink, met
    # inside the root, ends.
    pending: list[str | None] = list(reversed(path.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part is None:
            # A symlink inside the root pointed to an absolute target: that target must be inside too.
            if confined_path is not None and not _within(location, real_root):
                raise _outside(confined_path)
            entered = True
            continue
        if part in ("", "."):
            continue
        if part == "..":
            location = os.path.dirname(location)
        else:
            candidate = os.path.join(location, part)
            if _is_symlink(candidate, path):
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise WorkerError(
                        ErrorCode.INVALID_REQUEST, f"path {path!r}: too many levels of symbolic links"
                    )
                target = os.readlink(candidate)
                if os.path.isabs(target):
                    if entered:
                        pending.append(None)
                    location, entered = "/", _within("/", real_root)
                pending.extend(reversed(target.split("/")))
                continue
            location = candidate
        if _within(location, real_root):
            entered = True
        elif entered and confined_path is not None:
            raise _outside(confined_path)
    return location


def _is_symlink(candidate: str, path: str) -> bool:
    """Whether `candidate` is a symlink; a missing entry (or one below a non-directory) is not one."""
    try:
        return stat.S_ISLNK(os.lstat(candidate).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError as error:
        raise WorkerError(ErrorCode.PERMISSION_DENIED, f"path {path!r}: {error.strerror}") from error


def _within(location: str, real_root: str) -> bool:
    return location == real_root or location.startswith(real_root.rstrip("/") + "/")


def _outside(path: str) -> WorkerError:
    return WorkerError(ErrorCode.PATH_OUTSIDE_ROOT, f"path {path!r} resolves outside the workspace root")
