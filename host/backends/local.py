"""The `local` backend: the native worker as a child process on this machine."""

from __future__ import annotations

from wuu.generated.plain import LocalExecutionProfile

from ..prestart import INSTALLED_WORKER, Prestarted
from ..profiles import Profile
from .base import ChildProcess


class LocalEnvironment(ChildProcess):
    """Local execution: the profile's `worker` command, or this installation's native worker."""

    def __init__(self, profile: Profile[LocalExecutionProfile], prestarted: Prestarted | None = None) -> None:
        super().__init__(profile.settings.worker or INSTALLED_WORKER, prestarted=prestarted)
