"""The presence of user hosts in a state folder: a `flock` on the folder itself. A running host holds it
shared from the moment it has created the folder until it closes; a maintenance command (the review-ledger
migration) takes it exclusively, without waiting, and so runs only while no host of the space and domain
does, and no host starts while it runs.

Locking the folder, not a file in it, creates nothing and works in a read-only folder. The descriptor is not
inherited by child processes, and the kernel drops the lock when its holder dies, so a killed host or
command never leaves the space locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType


class PresenceHeld(OSError):
    """The state folder's presence lock is held against this taker: by a running host, for a maintenance
    command; by a maintenance command, for a host."""


class PresenceLock:
    """A held presence lock. Take it with `PresenceLock.acquire(state, exclusive=...)`; `release` (or
    leaving a `with` block) gives it up."""

    def __init__(self, folder: Path, descriptor: int) -> None:
        self.folder = folder
        self._descriptor: int | None = descriptor

    @classmethod
    def acquire(cls, folder: Path, *, exclusive: bool) -> PresenceLock:
        """Take the lock without waiting: shared for a host, exclusive for a maintenance command.
        PresenceHeld when it is held against this taker."""
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(descriptor, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            holder = "a running user host" if exclusive else "a maintenance command (wuu state ...)"
            raise PresenceHeld(f"{holder} holds {folder}") from None
        except BaseException:
            os.close(descriptor)
            raise
        return cls(folder, descriptor)

    def release(self) -> None:
        """Give the lock up; releasing it again does nothing."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def __enter__(self) -> PresenceLock:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()
