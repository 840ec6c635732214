"""The presence lock of a user space's product domain: an exclusive `flock` on its state folder itself
(spec/schema/userhost/initialize.schema.json). A user host holds it for its whole life, from before it
cleans or opens any stored state until it closes, and so does a maintenance command (the review-ledger
migration) for its whole run: both take it without waiting, so at most one of them runs for a space and
domain at a time.

Locking the folder, not a file in it, creates nothing and works in a read-only folder. The descriptor is not
inherited by child processes, and the kernel drops the lock when its holder dies, so a killed host or
command never leaves the space locked.

A host records who it is next to the lock (`authority.json`: its process ID and the transports it serves),
so that a refused taker can name it. The record only informs: the lock decides, and a record that a dead
host left behind is ignored and replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ..private import FILE_MODE

RECORD = "authority.json"
"""The record of the host that holds the lock, in the state folder."""


@dataclass(frozen=True)
class Holder:
    """The host that holds a state folder's lock, as it recorded itself."""

    pid: int
    transports: tuple[str, ...]
    """The transports it serves (`unix:PATH`, `grpc ADDRESS`, `http ADDRESS`, `stdio`), once it announced them."""

    def __str__(self) -> str:
        served = ", ".join(self.transports) if self.transports else "none announced yet"
        return f"a running user host (pid {self.pid}; transports: {served})"


class PresenceHeld(OSError):
    """The state folder's presence lock is held by another host or maintenance command; `holder` is the host
    that recorded itself there, when one did and still runs."""

    def __init__(self, folder: Path, holder: Holder | None) -> None:
        self.folder = folder
        self.holder = holder
        who = (
            str(holder)
            if holder is not None
            else "another process (a user host that is still starting, or a maintenance command such as "
            "`wuu state migrate-personal-review`)"
        )
        super().__init__(f"{who} holds {folder}")


class PresenceLock:
    """A held presence lock. Take it with `PresenceLock.acquire(state)`; `release` (or leaving a `with`
    block) gives it up."""

    def __init__(self, folder: Path, descriptor: int) -> None:
        self.folder = folder
        self._descriptor: int | None = descriptor
        self._recorded = False

    @classmethod
    def acquire(cls, folder: Path) -> PresenceLock:
        """Take the lock exclusively, without waiting. PresenceHeld when another host or command holds it."""
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise PresenceHeld(folder, _recorded_holder(folder / RECORD)) from None
        except BaseException:
            os.close(descriptor)
            raise
        return cls(folder, descriptor)

    def record(self, transports: Sequence[str]) -> None:
        """Record this process as the holder, serving `transports` (replaced atomically, mode 0600)."""
        if self._descriptor is None:
            raise RuntimeError("the presence lock is released")
        document = {"pid": os.getpid(), "transports": list(transports)}
        handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=f".{RECORD}.")
        try:
            os.fchmod(handle, FILE_MODE)
            with os.fdopen(handle, "w") as file:
                json.dump(document, file)
            os.replace(temporary, self.folder / RECORD)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        self._recorded = True

    def release(self) -> None:
        """Remove this holder's record and give the lock up; releasing it again does nothing."""
        if self._descriptor is None:
            return
        try:
            if self._recorded:
                with contextlib.suppress(FileNotFoundError):
                    (self.folder / RECORD).unlink()
        finally:
            os.close(self._descriptor)
            self._descriptor = None

    def __enter__(self) -> PresenceLock:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()


def _recorded_holder(path: Path) -> Holder | None:
    """The holder `path` records, when it is readable and its process still runs; None otherwise."""
    try:
        document = json.loads(path.read_text())
        pid, transports = document["pid"], document["transports"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if type(pid) is not int or pid <= 0 or not isinstance(transports, list):
        return None
    if not all(isinstance(item, str) for item in transports):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # left by a host that was killed
    except PermissionError:
        pass  # it runs, as another user
    return Holder(pid, tuple(transports))
