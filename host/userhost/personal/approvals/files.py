"""Where a Personal file action would land in the files root, and whether it still would.

`FilesRoot.inspect` turns the `path` of a `write_file` or `edit_file` action into a `Target`: the file's
precondition (missing, or its size, digest and identity) and the bounded preview of its original
(spec/schema/userhost/approvals.schema.json, ActionPreview). A path the action may not touch is refused with
`TargetRefused` and its ActionRefusal code, and never becomes a card. `FilesRoot.check` inspects the target
again right before execution: a file that changed since the card was made fails it, and the action is stale.

The rules: `path` is a clean relative POSIX path inside the root (no `.` or `..` component, no empty one, no
NUL, at most PATH_LIMIT bytes); no component on the way is a symbolic link, a dangling one and the target
itself included; an existing target is a regular file with a single link (another link could name the same
file anywhere, as the worker's own boundary says, spec/schema/worker/execute.schema.json); the attachments
folder the host manages is protected; and the sensitive-path rules the worker applies in every mode
(spec/data/sensitive_paths.json) hold here too. The host's private state (`StorageLayout.state`: the store,
its sessions and plugin data) is a sibling of the files root, so no path that stays inside the root reaches it.

The walk opens every directory with O_NOFOLLOW beneath the one before and the target with O_NOFOLLOW, and
reads the identity from the opened descriptor, so a component swapped for a symbolic link meanwhile is
refused rather than followed. The worker checks its own boundary again when the action runs.

These are blocking file-system calls, which read and hash the whole original: call them off the event loop.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wuu.worker.native.sensitive import SensitivePaths, default_home, default_wuu_home

from ..attachments import FOLDER as ATTACHMENTS

PATH_LIMIT = 4096
"""The most bytes (UTF-8) a file action's path may have."""
ORIGINAL_LIMIT = 64 * 1024
"""The largest original, in bytes, whose text the preview includes."""
PROTECTED = frozenset({ATTACHMENTS})
"""The top-level folders of the files root that the host manages itself (attachment bytes named by receipts)."""

RefusalCode = Literal[
    "path_outside_root",
    "symlink",
    "multiple_links",
    "not_regular_file",
    "protected_path",
    "sensitive_path",
    "invalid_action",
]
"""The ActionRefusal codes a file target can get."""

_CHUNK = 1024 * 1024
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a target swapped for a FIFO after its lstat must not block the open.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class TargetRefused(Exception):
    """The action may not touch this path: `code` is its ActionRefusal code, the message says why."""

    def __init__(self, code: RefusalCode, message: str) -> None:
        super().__init__(message)
        self.code: RefusalCode = code


@dataclass(frozen=True)
class Existing:
    """An existing target as it was inspected: what must still hold when the action runs."""

    size: int
    sha256: str
    """The hex SHA-256 digest of the whole content."""


@dataclass(frozen=True)
class Original:
    """The original of a file action's preview (ActionPreview's `original`)."""

    state: Literal["missing", "text", "unavailable"]
    text: str | None = None
    """The whole original, when it is bounded plain text."""
    reason: Literal["too_large", "binary"] | None = None
    """Why the text is unavailable."""
    size: int | None = None
    sha256: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The original as the preview carries it (only the fields that are set)."""
        fields = {"text": self.text, "reason": self.reason, "size": self.size, "sha256": self.sha256}
        return {"state": self.state, **{name: value for name, value in fields.items() if value is not None}}


@dataclass(frozen=True)
class Target:
    """Where a file action lands, as inspected."""

    path: str
    """The action's path, relative to the files root."""
    absolute: Path
    existing: Existing | None
    """The file as it was, or None when it was missing."""
    original: Original

    def precondition(self) -> dict[str, Any] | None:
        """The precondition as the card's digest covers it (spec/schema/receipts/action.schema.json,
        ActionDigest): None when the target is missing, else the original's digest and size."""
        if self.existing is None:
            return None
        return {"sha256": self.existing.sha256, "size": self.existing.size}


class FilesRoot:
    """The Personal files root (`StorageLayout.files`), where file actions are inspected."""

    def __init__(self, root: Path, guard: SensitivePaths | None = None) -> None:
        """`root`: the absolute path of the files root. `guard`: the sensitive-path rules; by default those
        packaged with wuu, with the homes of this process's environment (as the worker it starts resolves
        them). Names suffice here: a target has a single link, so it is no other name of a credential file."""
        self.root = root
        self._guard = guard or SensitivePaths.load(
            home=default_home(os.environ), wuu_home=default_wuu_home(os.environ)
        )

    def inspect(self, path: str) -> Target:
        """The target of a file action at `path`; TargetRefused when the action may not touch it."""
        parts = components(path)
        if parts[0] in PROTECTED:
            raise TargetRefused("protected_path", f"{path!r} is in {parts[0]}/, which the host manages")
        absolute = self.root.joinpath(*parts)
        # No component may be a symlink (the walk refuses one), so the path as named is the path acted on.
        found = self._guard.match(absolute, absolute)
        if found.sensitive:
            raise TargetRefused("sensitive_path", f"{path!r} is a sensitive path ({', '.join(found.rules)})")
        existing, original = _read(self.root, parts, path)
        return Target(path, absolute, existing, original)


def leaves_root(path: str) -> bool:
    """Whether `path` is absolute or has a `..` component: such a path or working directory is refused with
    `path_outside_root` before any other check (ActionRefusal)."""
    return path.startswith("/") or ".." in path.split("/")


def components(path: str) -> list[str]:
    """The components of a clean relative POSIX path; TargetRefused otherwise."""
    if not path or "\0" in path or len(path.encode("utf-8", "surrogatepass")) > PATH_LIMIT:
        raise TargetRefused("invalid_action", f"the path {path!r} is empty, too long or holds a NUL")
    if leaves_root(path):
        raise TargetRefused("path_outside_root", f"{path!r} leaves the files root (absolute, or with '..')")
    parts = path.split("/")
    if any(part in ("", ".") for part in parts):
        raise TargetRefused("invalid_action", f"{path!r} is not a clean path (an empty or '.' component)")
    return parts


def _read(root: Path, parts: list[str], path: str) -> tuple[Existing | None, Original]:
    """Walk down to the target beneath `root`, refusing symlinks on the way; the target as it is now."""
    directory = os.open(root, _DIRECTORY)
    try:
        for index, name in enumerate(parts[:-1]):
            below = _open_directory(directory, name, "/".join(parts[: index + 1]), path)
            if below is None:
                return None, Original("missing")  # a missing directory: the target is missing too
            os.close(directory)
            directory = below
        return _read_file(directory, parts[-1], path)
    finally:
        os.close(directory)


def _open_directory(directory: int, name: str, where: str, path: str) -> int | None:
    """The directory `name` beneath `directory` opened, or None when it is missing."""
    try:
        return os.open(name, _DIRECTORY, dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP or _is_symlink(directory, name):
            raise TargetRefused("symlink", f"{where!r} on the way to {path!r} is a symbolic link") from None
        if error.errno == errno.ENOTDIR:
            raise TargetRefused(
                "not_regular_file", f"{where!r} on the way to {path!r} is not a directory"
            ) from None
        raise


def _is_symlink(directory: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_file(directory: int, name: str, path: str) -> tuple[Existing | None, Original]:
    try:
        opened = os.open(name, _FILE, dir_fd=directory)
    except FileNotFoundError:
        if _is_symlink(directory, name):  # a dangling one
            raise TargetRefused("symlink", f"{path!r} is a symbolic link") from None
        return None, Original("missing")
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise TargetRefused("symlink", f"{path!r} is a symbolic link") from None
        raise
    try:
        info = os.fstat(opened)
        if not stat.S_ISREG(info.st_mode):
            raise TargetRefused("not_regular_file", f"{path!r} is not a regular file")
        if info.st_nlink > 1:
            raise TargetRefused("multiple_links", f"{path!r} has {info.st_nlink} hard links")
        digest = hashlib.sha256()
        head = bytearray()
        size = 0
        while chunk := os.read(opened, _CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if len(head) <= ORIGINAL_LIMIT:
                head += chunk[: ORIGINAL_LIMIT + 1 - len(head)]
    finally:
        os.close(opened)
    sha256 = digest.hexdigest()
    return Existing(size, sha256), _original(bytes(head), size, sha256)


def _original(head: bytes, size: int, sha256: str) -> Original:
    """The preview of an original whose first bytes are `head`."""
    if size > ORIGINAL_LIMIT:
        return Original("unavailable", reason="too_large", size=size, sha256=sha256)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\0" in text:
        return Original("unavailable", reason="binary", size=size, sha256=sha256)
    return Original("text", text=text, size=size, sha256=sha256)
