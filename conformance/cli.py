"""`wuu-conformance`: run the conformance suite against any adapter command, or list it.

wuu-conformance run [--json FILE] [--junit FILE] [--only GLOB] [--skip GLOB] [--known-failing FILE]
                    [--timeout S] [--jobs N] -- COMMAND ARGS...
wuu-conformance list
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from . import report
from .cases import all_cases
from .registry import requirements
from .runner import known_failing, mark_known_failing, run_all, select


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wuu-conformance", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="action", required=True)
    run = commands.add_parser("run", help="run the suite against COMMAND (after --)")
    run.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    run.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML")
    run.add_argument("--only", metavar="GLOB", action="append", default=[], help="run only matching cases")
    run.add_argument("--skip", metavar="GLOB", action="append", default=[], help="leave out matching cases")
    run.add_argument(
        "--known-failing",
        metavar="FILE",
        help="globs (one per line) of cases that must fail; a stale one fails",
    )
    run.add_argument("--timeout", type=float, default=20.0, metavar="S", help="seconds to wait for one reply")
    run.add_argument("--jobs", type=int, default=2, metavar="N", help="cases run at once")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    commands.add_parser("list", help="list the requirements and the cases that check them")
    return parser


def list_suite() -> str:
    cases = all_cases()
    lines = []
    for requirement in requirements().values():
        covering = [case.id for case in cases.values() if requirement.id in case.requirements]
        tier = (
            requirement.tier.value if not requirement.applies_to else f"capability: {requirement.applies_to}"
        )
        lines.append(f"{requirement.id}  [{tier}]  {requirement.description}")
        lines.extend(f"    case {case_id}" for case_id in covering)
    lines.append(f"{len(requirements())} requirements, {len(cases)} cases")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.action == "list":
        print(list_suite())
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("wuu-conformance run: give the adapter command after --", file=sys.stderr)
        return 2
    globs: list[str] = []
    if args.known_failing:
        with open(args.known_failing, encoding="utf-8") as handle:
            globs = known_failing(handle)
    suite = all_cases().values()
    cases = select(suite, args.only, args.skip)
    results = asyncio.run(run_all(cases, command, jobs=max(1, args.jobs), timeout=args.timeout))
    results, stale = mark_known_failing(results, globs, suite)
    print(report.terminal(results, stale, command))
    report.write(args.json, report.as_json(results, stale, command))
    report.write(args.junit, report.as_junit(results, stale))
    return 1 if report.summarize(results, stale).failed else 0


def entry() -> None:
    sys.exit(main())
