"""`wuu-host`: the host's command line.

wuu-host adapter --config FILE [--profile NAME]   serve the v4 protocol on stdio through a profile's backend

Exit status: 0 after a clean shutdown (at the host's EOF, or at SIGTERM or SIGINT, which end the
connection the same way); 2 when stdin or stdout is not a pipe, socket or terminal, when the
configuration is wrong (ProfileError) or the profile's environment
cannot be provisioned (EnvironmentUnavailable), before any worker is connected (a `local` worker that
started while the file was validated gets EOF, unused: `wuu.host.prestart`); 1 when the shutdown failed
(CleanupFailed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from wuu.worker.orphans import adopt_orphans

from .errors import EnvironmentUnavailable, ProfileError
from .prestart import prestart, start_validated


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wuu-host", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="action", required=True)
    adapter = commands.add_parser("adapter", help="serve the v4 worker protocol on stdio through a profile")
    adapter.add_argument("--config", required=True, help="the user configuration file (JSON)")
    adapter.add_argument("--profile", help="the profile name (default: the configuration's default)")
    args = parser.parse_args(argv)
    from wuu.worker.stdio import stdio_problem

    problem = stdio_problem()
    if problem is not None:  # before anything starts: no worker would ever be reached
        print(f"wuu-host: {problem}", file=sys.stderr)
        return 2
    # A local worker starts now, so that its start-up overlaps the validation below (wuu.host.prestart), and
    # everything else this process imports (pathlib and asyncio first: nothing above imports them).
    prestarted = prestart(args.config, args.profile)
    try:
        from pathlib import Path

        from . import profiles

        profile = profiles.load(Path(args.config)).select(args.profile)
        prestarted = prestarted or start_validated(profile, os.environ)
        # This process serves one worker: the commands of a worker that dies are reparented to it, to be
        # ended. Only now (ctypes is a tenth of an adapter's start-up before its worker): a worker started
        # above has been sent nothing yet, so it has no command that could have been orphaned.
        adopt_orphans()
        import asyncio

        from .adapter import serve_adapter

        asyncio.run(serve_adapter(profile, prestarted=prestarted))
    except ProfileError as error:
        for line in str(error).splitlines():  # a bad configuration has a line per problem
            print(f"wuu-host: {line}", file=sys.stderr)
        return 2
    except EnvironmentUnavailable as error:
        print(f"wuu-host: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        # Imported here, not before the worker starts (the module costs a connection's start-up time);
        # a backend that raised CleanupFailed has loaded it already.
        from wuu.worker.errors import CleanupFailed

        if not isinstance(error, CleanupFailed):
            raise
        print(f"wuu-host: shutdown failed: {error}", file=sys.stderr)
        return 1
    finally:
        if prestarted is not None:
            prestarted.discard()  # unless the profile claimed it: then it has been waited for
    return 0


def entry() -> None:
    """The console script: `main`, then exit at once.

    The connection is over and everything it used is cleaned up by then; what is left is the interpreter's
    own teardown of every module (pydantic's, the SDKs'), a cost on each connection that nothing needs.
    """
    status = main()
    for stream in (sys.stdout, sys.stderr):  # stdout is closed already after a connection
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)
