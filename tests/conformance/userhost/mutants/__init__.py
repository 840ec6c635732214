"""User-host mutants: the reference user host with exactly one rule of the spec broken, to test the suite itself.

Each mutant is named for the rule it breaks and lists the requirement ids it breaks
(conformance/userhost/requirements/*.json). It is built from one public extension point (harness.py): a
relay between each client transport and the unchanged host, a composition override of the reference
Personal composition, or a startup override in place of `UserHost.start`. Everything else stays as the
reference host has it, so the user-host suite must fail the mutant with a case aimed at the broken
requirement (tests/conformance/userhost/test_mutants.py checks that it does).

`python -m tests.conformance.userhost.mutants NAME serve ARGS...` (from the repository's root) serves the
mutant NAME with the arguments of `wuu-userhost serve`; `--list` prints every mutant with the requirements
it breaks. The modules are split by area, like the suite's cases; `controls.py` holds the hosts built the
same way with nothing broken.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from .harness import Compose, Relay, Startup

Breakage = TypeVar("Breakage", bound=Callable[..., Any] | Startup)
# The package's modules that hold no mutants.
_MACHINERY = frozenset({"harness", "server", "controls", "__main__"})


@dataclass(frozen=True)
class Mutant:
    """One deliberately broken variant of the reference user host."""

    name: str
    """Kebab-case, named for the rule it breaks."""
    description: str
    """One line: what the mutant does wrong."""
    requirements: tuple[str, ...]
    """The ids of the requirements it breaks."""
    relay: type[Relay] | None
    """The relay (one per client connection) that breaks the rule, if that is how it is built."""
    compose: Compose | None
    """The composition override that breaks the rule, if that is how it is built."""
    startup: Startup | None
    """The startup override that breaks the rule, if that is how it is built."""
    doc: str
    """How it breaks the rule (its docstring)."""


MUTANTS: dict[str, Mutant] = {}


def mutant(name: str, description: str, *requirements: str) -> Callable[[Breakage], Breakage]:
    """Register the decorated `Relay` subclass, composition override (a `Compose`) or startup override (a
    `Startup`) as the mutant `name`."""

    def register(breakage: Breakage) -> Breakage:
        if name in MUTANTS:
            raise ValueError(f"mutant {name} is registered twice")
        if not requirements:
            raise ValueError(f"mutant {name} names no requirement")
        rule = (name, description, tuple(requirements))
        if isinstance(breakage, Startup):
            MUTANTS[name] = Mutant(*rule, None, None, breakage, breakage.doc)
        elif inspect.isclass(breakage) and issubclass(breakage, Relay):
            MUTANTS[name] = Mutant(*rule, breakage, None, None, inspect.getdoc(breakage) or "")
        else:
            MUTANTS[name] = Mutant(*rule, None, cast(Compose, breakage), None, inspect.getdoc(breakage) or "")
        return breakage

    return register


def load() -> dict[str, Mutant]:
    """Every mutant (importing the area modules registers them)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name not in _MACHINERY:
            importlib.import_module(f"{__name__}.{module.name}")
    return MUTANTS
