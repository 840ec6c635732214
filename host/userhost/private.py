"""Private storage under a user host's home (spec/schema/userhost/initialize.schema.json): every directory
the host creates is mode 0700 and every file 0600, whatever the process's umask, and a directory that
already exists is used only when it is its user's alone.

A mode given to `mkdir` or `open` is masked by the umask, so each new directory and file is also set to
its mode explicitly; the umask can only take bits away, so it is never more open in between.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


class UnsafeDirectory(PermissionError):
    """A directory of the storage exists but is not the user's alone; the message names it, its mode and
    its owner."""


def check_directories(paths: Iterable[Path]) -> None:
    """UnsafeDirectory for the first of `paths` that exists and is not a directory owned by this user and
    writable by no one else (following symbolic links). It only reads."""
    me = os.geteuid()
    for path in paths:
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISDIR(info.st_mode):
            raise UnsafeDirectory(f"{path} is not a directory")
        if info.st_uid != me or mode & 0o022:
            raise UnsafeDirectory(
                f"{path} is mode {mode:04o} and owned by uid {info.st_uid}: a directory of the host's storage "
                f"is used only when it is owned by uid {me} and writable by no one else (group and others "
                "must not have write permission)"
            )


def make_directories(path: Path) -> None:
    """Create `path` and whatever of its parents is missing, each mode 0700. A directory that exists by the
    time it would be created is checked instead (UnsafeDirectory), so none planted meanwhile is used."""
    missing = []
    for directory in (path, *path.parents):
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIRECTORY_MODE)
        except FileExistsError:
            check_directories([directory])
        else:
            os.chmod(directory, DIRECTORY_MODE)


def create_file(path: Path) -> int:
    """Create the file `path`, which must not exist, mode 0600; its descriptor, open for writing."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(descriptor, FILE_MODE)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def ensure_file(path: Path) -> None:
    """Create `path` empty, mode 0600, unless it exists (a SQLite file is then created in place, with the
    mode its companion files copy)."""
    with contextlib.suppress(FileExistsError):
        os.close(create_file(path))
