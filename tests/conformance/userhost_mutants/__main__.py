"""`python -m tests.conformance.userhost_mutants NAME serve ARGS...`: the reference user host with one rule
broken, taking the arguments of `wuu-userhost serve` (`--list` prints the mutants; the name `harness` serves
the relay with nothing broken)."""

from __future__ import annotations

import sys

from . import Mutant, load
from .server import main as serve

HARNESS = Mutant(
    "harness", "nothing broken: the plain relay in front of the reference host", (), None, None, ""
)
"""`harness` serves the mutants' machinery with nothing broken (the control of the harness itself)."""


def describe(mutants: dict[str, Mutant]) -> str:
    """The mutant table: name, the requirements it breaks, what it does."""
    width = max(len(name) for name in mutants)
    return "\n".join(
        f"{m.name:<{width}}  {', '.join(m.requirements)}\n{'':<{width}}  {m.description}"
        for m in mutants.values()
    )


def main(argv: list[str]) -> int:
    mutants = load()
    if argv == ["--list"]:
        print(describe(mutants))
        return 0
    mutants_and_control = {**mutants, HARNESS.name: HARNESS}
    if len(argv) < 2 or argv[0] not in mutants_and_control or argv[1] != "serve":
        print(
            "usage: python -m tests.conformance.userhost_mutants NAME serve ARGS... | --list\n"
            f"mutants: {', '.join(mutants)} (and {HARNESS.name}: nothing broken)",
            file=sys.stderr,
        )
        return 2
    return serve(mutants_and_control[argv[0]], argv[2:])


sys.exit(main(sys.argv[1:]))
