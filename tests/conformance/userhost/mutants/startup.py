"""Mutants of the host's start: the isolation check before any private state."""

from __future__ import annotations

from typing import Any

from wuu.host.userhost.authority import UserHost
from wuu.host.userhost.storage import StorageLayout

from . import mutant
from .harness import Startup


@mutant(
    "state-before-isolation-check",
    "creates the space's state folders under its home before it refuses verified_host",
    "startup.isolation-refused",
)
@Startup
async def state_before_isolation_check(**options: Any) -> UserHost:
    """The space's `state` and `files` folders are made under the home before `UserHost.start` checks the
    isolation mode, so a refused `verified_host` start leaves them behind (it still exits 2 naming
    `user_host_isolation_required`)."""
    layout = StorageLayout.under(options["home"], options["user_space_id"], options["product_domain"])
    for folder in (layout.state, layout.files):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return await UserHost.start(**options)
