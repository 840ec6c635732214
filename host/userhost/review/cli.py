"""`wuu state`: local maintenance commands (the `wuu` command is wuu_command.py). One so far, the migration of a
user space's legacy review ledger:

    wuu state migrate-personal-review --user-space local --composition-profile personal
    wuu state migrate-personal-review --user-space local --composition-profile personal \\
        --apply --expect-source-digest DIGEST_FROM_INSPECTION

Inspection is the default (`--dry-run` is the same). The JSON result (ReviewLedgerMigrationResult) goes to
stdout with exit status 0; anything that stops the command (a wrong flag, no legacy ledger, a running host, a
digest mismatch, a changed source, a populated or incompatible destination) is a message on stderr naming
the flag or the problem, with exit status 2 and nothing written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from wuu.generated import validators

from ..configuration import ConfigurationError, home_of
from ..storage.review_ledger.errors import ReviewLedgerError
from .migration import migrate
from .selection import select


def _pattern(name: str) -> re.Pattern[str]:
    schema = validators.bundle()["$defs"]["ReviewLedgerMigrationResult"]["properties"][name]
    return re.compile(schema["pattern"])


def add_parser(areas: Any) -> None:
    """`wuu state` beside the other areas of the `wuu` command."""
    state = areas.add_parser("state", help="maintain a user space's stored state")
    actions = state.add_subparsers(dest="action", required=True)
    migration = actions.add_parser(
        "migrate-personal-review",
        help="migrate the legacy Personal review ledger into the selected provider",
        description="Inspect (the default) or apply the migration of a user space's legacy personal-review.sqlite "
        "into the selected review-ledger provider. Stop every Personal host of the space first, and give the "
        "same home, --config and --composition-profile as the host uses.",
    )
    migration.add_argument("--user-space", required=True, metavar="ID", help="the user space to migrate")
    migration.add_argument(
        "--composition-profile",
        metavar="NAME",
        help="the profile that selects the provider (personal: wuu.review-ledger.sqlite); default: the one "
        "--config names",
    )
    migration.add_argument(
        "--config",
        metavar="FILE",
        help="the absolute path of the host's configuration file (JSON; default: HOME/config.json when it exists)",
    )
    migration.add_argument(
        "--home", metavar="DIR", help="the absolute home of the host's data (default: $WUU_HOME, else ~/.wuu)"
    )
    mode = migration.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="inspect only (the default)")
    mode.add_argument("--apply", action="store_true", help="import the source (needs --expect-source-digest)")
    migration.add_argument(
        "--expect-source-digest",
        metavar="DIGEST",
        help="with --apply: the source_digest an inspection printed",
    )


def run(args: argparse.Namespace) -> str:
    """Check the flags, run the migration, and give its JSON result."""
    if not _pattern("user_space_id").fullmatch(args.user_space):
        raise ReviewLedgerError(f"--user-space: {args.user_space!r} is not a valid user space ID")
    if args.composition_profile is not None and not _pattern("composition_profile").fullmatch(
        args.composition_profile
    ):
        raise ReviewLedgerError(
            f"--composition-profile: {args.composition_profile!r} is not a valid profile name"
        )
    expected = args.expect_source_digest
    if args.apply and expected is None:
        raise ReviewLedgerError(
            "--apply needs --expect-source-digest DIGEST (the source_digest of an inspection)"
        )
    if expected is not None and not args.apply:
        raise ReviewLedgerError("--expect-source-digest is only given with --apply")
    if expected is not None and not _pattern("source_digest").fullmatch(expected):
        raise ReviewLedgerError(
            f"--expect-source-digest: {expected!r} is not a lowercase hexadecimal SHA-256"
        )
    selection = select(home_of(args.home), args.user_space, args.composition_profile, args.config)
    return json.dumps(migrate(selection, expected).to_wire(), indent=2)


def main(args: argparse.Namespace) -> int:
    """Run `wuu state` with parsed `args`; its exit status."""
    try:
        print(run(args))
    except (ReviewLedgerError, ConfigurationError, OSError) as error:
        print(f"wuu: {error}", file=sys.stderr)
        return 2
    return 0
