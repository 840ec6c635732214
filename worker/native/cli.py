"""`wuu-worker` / `python -m wuu.worker`: the native worker on stdio, or persistent (`serve`, `attach`)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

NEW_ENVIRONMENT = (
    "the environment was made for this connection, so nothing was retained in it: a binding that requires "
    "an existing workspace is refused (workspace_missing)"
)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the native worker as the command line asks."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if not arguments:
        # The worker on stdio, as every host spawns it: it parses nothing, so it builds no parser (argparse is
        # a few milliseconds of every worker's start-up).
        _check_stdio()
        _run_on_stdio()
        return
    args = _parser().parse_args(arguments)
    # Each action imports only what it runs: `attach` is a relay and must start fast, without the worker.
    if args.action == "serve":
        from . import daemon

        sys.exit(daemon.supervise(Path(args.socket), args.lifetime_seconds, args.new_environment))
    _check_stdio()
    if args.action == "attach":
        from . import daemon

        sys.exit(
            asyncio.run(
                daemon.attach(
                    Path(args.socket),
                    args.lifetime_seconds,
                    start=not args.no_start,
                    new_environment=args.new_environment,
                )
            )
        )
    _run_on_stdio(args.new_environment)


def _parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(prog="wuu-worker", description="The native v4 worker.")
    parser.add_argument("--new-environment", action="store_true", help=NEW_ENVIRONMENT)
    commands = parser.add_subparsers(dest="action")
    for name, text in (
        ("serve", "serve a persistent worker on a Unix socket until it has been idle for its lifetime"),
        ("attach", "relay stdio to the persistent worker at the socket, starting it when none runs"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--socket", required=True, help="the Unix socket's path")
        sub.add_argument(
            "--lifetime-seconds", type=float, default=600.0, help="idle time before a persistent worker exits"
        )
        sub.add_argument("--new-environment", action="store_true", help=NEW_ENVIRONMENT)
        if name == "attach":
            sub.add_argument(
                "--no-start",
                action="store_true",
                help="wait for the worker that another process is starting at the socket; never start one",
            )
    return parser


def _check_stdio() -> None:
    """Exit with status 2, saying why, when stdio cannot carry the protocol."""
    from ..stdio import stdio_problem

    problem = stdio_problem()
    if problem is not None:
        sys.stderr.write(f"wuu-worker: {problem}\n")
        sys.exit(2)


def _run_on_stdio(new_environment: bool = False) -> None:
    from ..orphans import ORPHANS_S, adopt_orphans, end_orphans_now
    from ..run import run_execution_backend_v4
    from .worker import NativeWorker

    # A descendant that left its command's session and lost its parent cannot be traced to the command;
    # as the subreaper the worker inherits it, ends it with an exec_command (trees.py), and at exit.
    adopt_orphans()
    try:
        asyncio.run(run_execution_backend_v4(NativeWorker(new_environment=new_environment).backend()))
    finally:
        end_orphans_now(ORPHANS_S)
