"""`wuu-host`: the host's command line.

wuu-host adapter --config FILE [--profile NAME]   serve the v4 protocol on stdio through a profile's backend

Exit status: 0 after a clean shutdown; 2 when the configuration is wrong (ProfileError) or the profile's
environment cannot be provisioned (EnvironmentUnavailable), before any worker runs; 1 when the shutdown
failed (CleanupFailed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from wuu.worker.errors import CleanupFailed

from . import profiles
from .adapter import serve_adapter
from .errors import EnvironmentUnavailable, ProfileError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wuu-host", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="action", required=True)
    adapter = commands.add_parser("adapter", help="serve the v4 worker protocol on stdio through a profile")
    adapter.add_argument("--config", required=True, type=Path, help="the user configuration file (JSON)")
    adapter.add_argument("--profile", help="the profile name (default: the configuration's default)")
    args = parser.parse_args(argv)
    try:
        profile = profiles.load(args.config).select(args.profile)
        asyncio.run(serve_adapter(profile))
    except ProfileError as error:
        for line in str(error).splitlines():  # a bad configuration has a line per problem
            print(f"wuu-host: {line}", file=sys.stderr)
        return 2
    except EnvironmentUnavailable as error:
        print(f"wuu-host: {error}", file=sys.stderr)
        return 2
    except CleanupFailed as error:
        print(f"wuu-host: shutdown failed: {error}", file=sys.stderr)
        return 1
    return 0


def entry() -> None:
    sys.exit(main())
