"""`python -m tests.conformance.userhost.mutants NAME serve ARGS...`: the reference user host with one rule
broken, taking the arguments of `wuu-userhost serve` (`--list` prints the mutants; the controls `harness` and
`without-history-read`, in controls.py, serve hosts with nothing broken)."""

from __future__ import annotations

import sys

from . import Mutant, load
from .controls import CONTROLS
from .server import main as serve


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
    mutants_and_controls = {**mutants, **CONTROLS}
    if len(argv) < 2 or argv[0] not in mutants_and_controls or argv[1] != "serve":
        print(
            "usage: python -m tests.conformance.userhost.mutants NAME serve ARGS... | --list\n"
            f"mutants: {', '.join(mutants)} (and, with nothing broken: {', '.join(CONTROLS)})",
            file=sys.stderr,
        )
        return 2
    return serve(mutants_and_controls[argv[0]], argv[2:])


sys.exit(main(sys.argv[1:]))
