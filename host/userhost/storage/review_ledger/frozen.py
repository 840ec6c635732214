"""Frozen snapshots of SQLite files that are only ever read: a private copy of the file and its `-wal` and
`-journal` companions (never its `-shm`, which SQLite rebuilds from the WAL), opened, and copied with the
backup API into an in-memory database.

Opening the copy is what applies the committed WAL frames that were never checkpointed (and rolls back a hot
journal): `immutable=1` on the original would miss them, and opening the original would write beside it. The
original is only read, so its bytes and times stay as they were, in a read-only folder too.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from .errors import ReviewLedgerError

COMPANIONS = ("-wal", "-journal")
"""The files beside a database that hold part of its committed state."""


def freeze(path: Path) -> sqlite3.Connection:
    """An in-memory database holding the committed content of the SQLite file at `path`, committed WAL
    frames included. ReviewLedgerError when the file changes while it is copied or is no SQLite database."""
    with tempfile.TemporaryDirectory(prefix="wuu-review-") as folder:
        copy = Path(folder) / "copy.sqlite"
        before = _versions(path)
        shutil.copyfile(path, copy)
        for suffix in COMPANIONS:
            if before[suffix] is not None:
                shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")
        if _versions(path) != before:
            raise ReviewLedgerError(
                f"{path} changed while it was read: stop every writer, then run the command again"
            )
        opened = sqlite3.connect(copy, isolation_level=None)
        frozen = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        try:
            opened.backup(frozen)
        except sqlite3.DatabaseError as error:
            frozen.close()
            raise ReviewLedgerError(f"{path} cannot be read as a SQLite database: {error}") from None
        finally:
            opened.close()
    return frozen


def _versions(path: Path) -> dict[str, tuple[int, int, int] | None]:
    """Size, modification time and inode of the file and of each companion (None when it does not exist)."""
    found: dict[str, tuple[int, int, int] | None] = {}
    for suffix in ("", *COMPANIONS):
        try:
            status = os.stat(f"{path}{suffix}")
        except FileNotFoundError:
            found[suffix] = None
        else:
            found[suffix] = (status.st_size, status.st_mtime_ns, status.st_ino)
    return found
