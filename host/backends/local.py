"""The `local` backend: the native worker as a child process on this machine."""

from __future__ import annotations

import sys

from ..profiles import Profile
from .base import ChildProcess

NATIVE_WORKER = (sys.executable, "-m", "wuu.worker")


class LocalEnvironment(ChildProcess):
    """Local execution: the profile's `worker` command, or this installation's native worker."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(getattr(profile.settings, "worker", None) or NATIVE_WORKER)
