"""Execution backends: each provisions an environment, starts a worker in it, and connects its stdio.

`environment_for(profile)` returns the backend of a profile; every backend is a module of its own.
"""

from __future__ import annotations

from ..profiles import Profile
from .base import Environment


def environment_for(profile: Profile) -> Environment:
    """The environment a profile describes (its backend's module is imported only when selected)."""
    if profile.backend == "local":
        from .local import LocalEnvironment

        return LocalEnvironment(profile)
    if profile.backend == "command":
        from .command import CommandEnvironment

        return CommandEnvironment(profile)
    if profile.backend == "docker":
        from .docker import DockerEnvironment

        return DockerEnvironment(profile)
    if profile.backend == "ssh":
        from .ssh import SshEnvironment

        return SshEnvironment(profile)
    raise NotImplementedError(f"profile {profile.name!r}: the {profile.backend} backend is not available yet")


__all__ = ["Environment", "environment_for"]
