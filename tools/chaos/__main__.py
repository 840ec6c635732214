"""`python -m tools.chaos [--scale S] [--seed N] [--only GLOB] [--json PATH]`: run the fault campaign.

Runs every campaign of MODULES (one row each) one after another, prints one table, and exits 1 when any
row failed. A row whose service is absent is skipped, which is a failure when WUU_REQUIRE_DOCKER or
WUU_REQUIRE_SSH asks for that service.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from .campaign import Campaign, Context, Outcome
from .report import Row, table

MODULES = (
    "fuzz",
    "eof",
    "kills",
    "approval_kills",
    "task_kills",
    "memory_kills",
    "paths",
    "userhost_http",
    "token_races",
    "two_hosts",
    "slots",
)
"""The campaign modules under tools/chaos/, each with its CAMPAIGNS."""


def campaigns() -> list[Campaign]:
    """Every campaign, in the table's order. A module of MODULES that is missing is one failing row."""
    found: list[Campaign] = []
    for name in MODULES:
        try:
            module = importlib.import_module(f"tools.chaos.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"tools.chaos.{name}":
                raise
            found.append(Campaign(name, _missing(name)))
        else:
            found += module.CAMPAIGNS
    return found


def _missing(name: str) -> Callable[[Context], Awaitable[Outcome]]:
    async def run(context: Context) -> Outcome:
        return Outcome(failures=[f"tools/chaos/{name}.py is missing"])

    return run


def missing_service(needs: str | None) -> str | None:
    """Why the service `needs` names is not here, or None when it is (or none is needed)."""
    if needs == "docker" and not os.environ.get("DOCKER_HOST"):
        return "DOCKER_HOST is not set"
    if needs == "ssh" and not os.environ.get("WUU_SSH_TEST_DIR"):
        return "WUU_SSH_TEST_DIR is not set"
    return None


async def run_campaign(campaign: Campaign, seed: int, scale: float, workdir: Path) -> Row:
    """One row: run `campaign` (or skip it) and time it. A campaign that raises fails with the error."""
    row = Row(campaign.name)
    missing = missing_service(campaign.needs)
    if missing is not None:
        row.note = f"skipped: {missing}"
        required = {"docker": "WUU_REQUIRE_DOCKER", "ssh": "WUU_REQUIRE_SSH"}.get(campaign.needs or "")
        if required and os.environ.get(required):
            row.failures.append(f"{required} is set but {missing}")
        return row
    directory = workdir / campaign.name
    directory.mkdir(parents=True)
    context = Context(
        seed=seed, scale=scale, workdir=directory, log=lambda line: print(line, file=sys.stderr)
    )
    started = time.monotonic()
    try:
        outcome = await campaign.run(context)
    except Exception as error:  # a broken campaign is a failed row, not a crashed table
        outcome = Outcome(failures=[f"the campaign raised {type(error).__name__}: {error}"])
        outcome.failures[-1] += f"; rerun: {context.rerun(campaign.name)}"
    row.seconds = time.monotonic() - started
    row.runs = outcome.runs
    row.failures = outcome.failures
    return row


async def run(selected: Sequence[Campaign], seed: int, scale: float) -> list[Row]:
    """Every selected campaign's row, each in a fresh work directory (kept when it failed)."""
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="wuu-chaos-"))
    for campaign in selected:
        row = await run_campaign(campaign, seed, scale, workdir)
        if not row.failures:
            shutil.rmtree(workdir / campaign.name, ignore_errors=True)
        rows.append(row)
    if any(row.failures for row in rows):
        print(f"chaos: the failed cases' work directories are kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the campaign as the command line asks; 0 when no row failed, else 1."""
    parser = argparse.ArgumentParser(prog="python -m tools.chaos", description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="campaign sizes (1.0 = make chaos)")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="the run's seed (default: now)")
    parser.add_argument("--only", action="append", help="run only cases matching this glob (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    selected = [c for c in campaigns() if not args.only or any(fnmatch.fnmatch(c.name, g) for g in args.only)]
    if not selected:
        parser.error(f"no case matches {args.only}")
    print(f"chaos: seed {args.seed}, scale {args.scale:g}", file=sys.stderr)
    rows = asyncio.run(run(selected, args.seed, args.scale))
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps([row.__dict__ for row in rows], indent=1) + "\n")
    return 1 if any(row.failures for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
