"""The `command` backend: any trusted adapter executable that speaks the v4 protocol on its stdio."""

from __future__ import annotations

from wuu.generated.plain import CommandExecutionProfile

from ..prestart import Prestarted
from ..profiles import Profile
from .base import ChildProcess


class CommandEnvironment(ChildProcess):
    """A command adapter owns its own provisioning and enforcement; it is started as given."""

    def __init__(
        self, profile: Profile[CommandExecutionProfile], prestarted: Prestarted | None = None
    ) -> None:
        super().__init__(profile.settings.command, prestarted=prestarted)
