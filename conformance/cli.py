"""`wuu-conformance`: run a conformance suite against any implementation's command, or list it.

wuu-conformance run [--suite worker|userhost] [--json FILE] [--junit FILE] [--only GLOB] [--skip GLOB]
                    [--known-failing FILE] [--timeout S] [--jobs N] [--product-domain NAME]
                    -- COMMAND ARGS...
wuu-conformance list [--suite worker|userhost]

The worker suite (the default) runs COMMAND as an adapter serving the worker protocol on its stdio. The
user-host suite runs COMMAND as a user host serving the user-host RPC on its stdio, after replacing the
placeholders {home}, {user_space}, {product_domain}, {socket} and {isolation} in its arguments (see
`wuu.conformance.userhost.session`; {product_domain} is `personal` unless --product-domain names another); a
case may stop or kill it and start it again on the same {home}. Exit status: 0 when every case passed (or was
skipped), 1 when any failed, 2 when COMMAND cannot start or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from functools import partial

from . import report
from .outcomes import StartFailure
from .probe import describe
from .registry import SessionFactory, Suite
from .runner import CaseResult, Status, known_failing, mark_known_failing, probe, run_all, select
from .suites import SUITES
from .userhost.session import HostSession
from .userhost.suite import USERHOST


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wuu-conformance", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="action", required=True)
    run = commands.add_parser("run", help="run a suite against COMMAND (after --)")
    suite_help = "the suite: worker (the default) or userhost"
    run.add_argument("--suite", choices=sorted(SUITES), default="worker", help=suite_help)
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
    run.add_argument(
        "--product-domain",
        metavar="NAME",
        help="the user-host suite's {product_domain} (default personal; a coding host skips the Personal cases)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    listing = commands.add_parser("list", help="list the requirements and the cases that check them")
    listing.add_argument("--suite", choices=sorted(SUITES), default="worker", help=suite_help)
    return parser


def list_suite(suite: Suite) -> str:
    cases = suite.cases()
    lines = [f"{suite.name}: {suite.title}"]
    for requirement in suite.requirements().values():
        covering = [case.id for case in cases.values() if requirement.id in case.requirements]
        tier = (
            requirement.tier.value if not requirement.applies_to else f"capability: {requirement.applies_to}"
        )
        lines.append(f"{requirement.id}  [{tier}]  {requirement.description}")
        lines.extend(f"    case {case_id}" for case_id in covering)
    lines.append(f"{len(suite.requirements())} requirements, {len(cases)} cases")
    return "\n".join(lines)


class Progress:
    """Cases done out of the total and failures so far, on one rewritten line of a terminal's stderr."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.failed = 0

    def __call__(self, result: CaseResult) -> None:
        self.done += 1
        self.failed += result.status is Status.FAILED
        sys.stderr.write(f"\r{self.done}/{self.total} cases, {self.failed} failed")
        if self.done == self.total:
            sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    suite = SUITES[args.suite]
    if args.action == "list":
        print(list_suite(suite))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("wuu-conformance run: give the command under test after --", file=sys.stderr)
        return 2
    globs: list[str] = []
    if args.known_failing:
        with open(args.known_failing, encoding="utf-8") as handle:
            globs = known_failing(handle)
    factory: SessionFactory | None = None
    if args.product_domain is not None:
        if suite is not USERHOST:
            print("wuu-conformance run: --product-domain: only the userhost suite binds one", file=sys.stderr)
            return 2
        factory = partial(HostSession, product_domain=args.product_domain)
    every = suite.cases().values()
    cases = select(every, args.only, args.skip)
    try:
        asyncio.run(probe(suite, command, args.timeout, factory))
    except StartFailure as failure:
        print(describe(failure), file=sys.stderr)
        return 2
    progress = Progress(len(cases)) if sys.stderr.isatty() and cases else None
    results = asyncio.run(
        run_all(
            cases, command, jobs=max(1, args.jobs), timeout=args.timeout, progress=progress, factory=factory
        )
    )
    results, stale = mark_known_failing(results, globs, every)
    print(report.terminal(results, stale, command, suite))
    report.write(args.json, report.as_json(results, stale, command, suite))
    report.write(args.junit, report.as_junit(results, stale, suite))
    return 1 if report.summarize(results, stale).failed else 0


def entry() -> None:
    sys.exit(main())
