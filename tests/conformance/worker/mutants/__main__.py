"""`python -m tests.conformance.worker.mutants NAME`: the native reference worker with one rule broken (`--list`)."""

from __future__ import annotations

import asyncio
import sys

from wuu.worker import run_execution_backend_v4
from wuu.worker.native.worker import NativeWorker

from . import Mutant, load


async def serve(mutant: Mutant) -> None:
    """Serve the native worker, broken as the mutant says, on stdin/stdout until the connection ends."""
    worker = NativeWorker()
    backend = worker.backend()
    if mutant.override is not None:
        backend = mutant.override(worker, backend)
    if mutant.relay is None:
        await run_execution_backend_v4(backend)
    else:
        await mutant.relay().run(backend)


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
    if len(argv) != 1 or argv[0] not in mutants:
        print(
            f"usage: python -m tests.conformance.worker.mutants NAME | --list\nmutants: {', '.join(mutants)}",
            file=sys.stderr,
        )
        return 2
    asyncio.run(serve(mutants[argv[0]]))
    return 0


sys.exit(main(sys.argv[1:]))
