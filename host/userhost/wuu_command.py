"""`wuu`: the local command of Wuu. Its areas: `wuu state` (maintenance, review/cli.py) and `wuu exec` (one
non-interactive run of the built-in engine, wuu_exec.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from . import wuu_exec
from .review import cli as state


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="wuu", description="Wuu's local commands.")
    areas = top.add_subparsers(dest="area", required=True)
    state.add_parser(areas)
    wuu_exec.add_parser(areas)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.area == "exec":
        return wuu_exec.main(args)
    return state.main(args)


def entry() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
