"""Execution backends: each provisions an environment, starts a worker in it, and connects its stdio.

`environment_for(profile)` returns the environment of a profile, built from its backend's typed
settings; every backend is a module of its own, imported only when a profile selects it (ssh and
kubernetes need optional SDKs).
"""

from __future__ import annotations

from typing import assert_never

from wuu.generated.plain import (
    ApptainerExecutionProfile,
    CommandExecutionProfile,
    DaytonaExecutionProfile,
    DockerExecutionProfile,
    ExecutionProfile,
    KubernetesExecutionProfile,
    LocalExecutionProfile,
    ModalExecutionProfile,
    SingularityExecutionProfile,
    SshExecutionProfile,
    VercelExecutionProfile,
)

from ..errors import BackendUnavailable
from ..prestart import Prestarted
from ..profiles import Profile
from .base import Environment

# Backend -> the top-level module of its optional SDK, and the extra that installs it (the cloud backends'
# SDKs are the host transport's, checked by `cloud`).
_SDKS = {"ssh": "asyncssh", "kubernetes": "kubernetes"}


def environment_for(profile: Profile[ExecutionProfile], prestarted: Prestarted | None = None) -> Environment:
    """The environment a profile describes; BackendUnavailable when this installation cannot serve it.

    A `local` or `command` environment uses the `prestarted` process when it runs the profile's command.
    """
    settings = profile.settings
    try:
        if isinstance(settings, LocalExecutionProfile):
            from .local import LocalEnvironment

            return LocalEnvironment(Profile(profile.name, settings), prestarted)
        if isinstance(settings, CommandExecutionProfile):
            from .command import CommandEnvironment

            return CommandEnvironment(Profile(profile.name, settings), prestarted)
        if isinstance(settings, DockerExecutionProfile):
            from .docker import DockerEnvironment

            return DockerEnvironment(Profile(profile.name, settings))
        if isinstance(settings, SshExecutionProfile):
            from .ssh import SshEnvironment

            return SshEnvironment(Profile(profile.name, settings))
        if isinstance(settings, ApptainerExecutionProfile | SingularityExecutionProfile):
            from .apptainer import ApptainerEnvironment

            return ApptainerEnvironment(Profile(profile.name, settings))
        if isinstance(settings, ModalExecutionProfile | DaytonaExecutionProfile | VercelExecutionProfile):
            from .cloud import CloudEnvironment

            return CloudEnvironment(Profile(profile.name, settings))
        if isinstance(settings, KubernetesExecutionProfile):
            from .kubernetes import KubernetesEnvironment

            return KubernetesEnvironment(Profile(profile.name, settings))
    except ModuleNotFoundError as missing:
        sdk = _SDKS.get(profile.backend)
        if sdk is None or (missing.name or "").partition(".")[0] != sdk:
            raise
        raise BackendUnavailable(
            f"profile {profile.name!r}: the {profile.backend} backend needs the {sdk} SDK: "
            f"pip install 'wuu[{profile.backend}]'"
        ) from None
    assert_never(settings)


__all__ = ["Environment", "environment_for"]
