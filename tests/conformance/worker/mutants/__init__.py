"""Mutants: the native reference worker with exactly one rule of the spec broken, to test the suite itself.

Each mutant is named for the rule it breaks and lists the requirement ids (conformance/worker/requirements.json)
that rule belongs to. It is built from a public extension point (harness.py): a handler override of the
native worker's backend, or a relay in front of the SDK that breaks one of the SDK's rules. Everything
else stays as the reference worker has it, so the conformance suite must fail the mutant with a case
aimed at the broken requirement (tests/conformance/worker/test_mutants.py checks that it does).

`python -m tests.conformance.worker.mutants NAME` (from the repository's root) serves the mutant NAME on
stdin/stdout; `--list` prints every mutant with the requirements it breaks. The modules are split by
area, like the conformance cases.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .harness import Override, Relay

Breakage = TypeVar("Breakage", bound=Callable[..., Any])


@dataclass(frozen=True)
class Mutant:
    """One deliberately broken variant of the reference worker."""

    name: str
    """Kebab-case, named for the rule it breaks."""
    description: str
    """One line: what the mutant does wrong."""
    requirements: tuple[str, ...]
    """The ids of the requirements it breaks."""
    relay: type[Relay] | None
    """The relay that breaks an SDK rule, if that is how it is built."""
    override: Override | None
    """The handler override that breaks a provider rule, if that is how it is built."""
    doc: str
    """How it breaks the rule (its docstring)."""


MUTANTS: dict[str, Mutant] = {}


def mutant(name: str, description: str, *requirements: str) -> Callable[[Breakage], Breakage]:
    """Register the decorated `Relay` subclass or handler override as the mutant `name`."""

    def register(breakage: Breakage) -> Breakage:
        if name in MUTANTS:
            raise ValueError(f"mutant {name} is registered twice")
        if not requirements:
            raise ValueError(f"mutant {name} names no requirement")
        is_relay = inspect.isclass(breakage) and issubclass(breakage, Relay)
        MUTANTS[name] = Mutant(
            name,
            description,
            tuple(requirements),
            breakage if is_relay else None,
            None if is_relay else breakage,
            inspect.getdoc(breakage) or "",
        )
        return breakage

    return register


def load() -> dict[str, Mutant]:
    """Every mutant (importing the area modules registers them)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name not in ("harness", "__main__"):
            importlib.import_module(f"{__name__}.{module.name}")
    return MUTANTS
