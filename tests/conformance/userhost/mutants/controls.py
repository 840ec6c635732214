"""The controls of the mutation table: hosts built like the mutants with no rule broken, which the user-host
suite must not fail.

- `harness`: the mutants' machinery (the plain relay) in front of the reference host.
- `without-history-read`: the reference host whose `wuu.personal` serves no `agents.history.read`, a method
  the catalog marks optional; the cases that need it skip, and the others observe another way.
"""

from __future__ import annotations

import dataclasses

from wuu.host.userhost.authority import Composer, Composition, UserHost

from . import Mutant
from .harness import recompose

HISTORY_READ = "agents.history.read"


def without_history_read() -> Composer:
    """The reference composer with `agents.history.read` left out of every plugin's methods: the host answers
    it `unsupported_method`, as it does any method a plugin does not serve."""

    def change(host: UserHost, composition: Composition) -> Composition:
        plugins = [
            dataclasses.replace(
                plugin, methods={k: v for k, v in plugin.methods.items() if k != HISTORY_READ}
            )
            for plugin in composition.plugins
        ]
        return dataclasses.replace(composition, plugins=plugins)

    return recompose(change)


HARNESS = Mutant(
    "harness", "nothing broken: the plain relay in front of the reference host", (), None, None, None, ""
)
WITHOUT_HISTORY_READ = Mutant(
    "without-history-read",
    f"nothing broken: serves no {HISTORY_READ}, an optional method",
    (),
    None,
    without_history_read,
    None,
    without_history_read.__doc__ or "",
)
CONTROLS = {control.name: control for control in (HARNESS, WITHOUT_HISTORY_READ)}
"""The controls by the name that serves them."""
