"""Running cases against the command under test, each with a fresh process and directory, some in parallel."""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from .outcomes import CaseFailed, CaseSkipped
from .registry import Case, SessionFactory, Suite


class Status(Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class CaseResult:
    """How one case went."""

    case: Case
    status: Status
    message: str
    duration: float
    transcript: str
    known_failing: bool = False

    @property
    def counts_as_failure(self) -> bool:
        """A failure that is not expected, or an expected failure that passed (a stale entry)."""
        if self.known_failing:
            return self.status is Status.PASSED
        return self.status is Status.FAILED


def select(cases: Iterable[Case], only: Sequence[str], skip: Sequence[str]) -> list[Case]:
    """The cases whose id or a requirement id matches an `only` glob (all when none), minus `skip` matches."""

    def matches(case: Case, globs: Sequence[str]) -> bool:
        names = (case.id, *case.requirements)
        return any(fnmatch.fnmatchcase(name, glob) for glob in globs for name in names)

    return [case for case in cases if (not only or matches(case, only)) and not matches(case, skip)]


def known_failing(lines: Iterable[str]) -> list[str]:
    """The globs of a known-failing file: one per line, `#` comments and blank lines ignored."""
    globs = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text:
            globs.append(text)
    return globs


async def run_case(
    case: Case, command: Sequence[str], timeout: float, factory: SessionFactory | None = None
) -> CaseResult:
    """Run one case on a fresh process of the command and a fresh private directory, in a session made by
    `factory` (the suite's own unless given)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wuu-conformance-") as work:
        session = (factory or case.suite.session)(command, Path(work), timeout)
        status, message = Status.PASSED, ""
        try:
            await session.start()
            await asyncio.wait_for(case.run(session), timeout * 4)
        except CaseFailed as failure:
            status, message = Status.FAILED, str(failure)
        except CaseSkipped as skipped:
            status, message = Status.SKIPPED, str(skipped)
        except TimeoutError:
            status, message = Status.FAILED, f"the case did not finish within {timeout * 4:g} s"
        except Exception as error:
            status = Status.FAILED
            message = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}"
        finally:
            transcript = session.transcript()
            await session.close()
    return CaseResult(case, status, message, time.monotonic() - started, transcript)


async def probe(
    suite: Suite, command: Sequence[str], timeout: float, factory: SessionFactory | None = None
) -> None:
    """Start the command once and see it answer; StartFailure (reported once, not per case) if it cannot."""
    with tempfile.TemporaryDirectory(prefix="wuu-conformance-") as work:
        await (factory or suite.session)(command, Path(work), timeout).probe()


async def run_all(
    cases: Sequence[Case],
    command: Sequence[str],
    *,
    jobs: int,
    timeout: float,
    progress: Callable[[CaseResult], None] | None = None,
    factory: SessionFactory | None = None,
) -> list[CaseResult]:
    """Run `cases` with at most `jobs` at once; results in the order of `cases`. `progress` is told of
    each result as it comes; `factory` makes each case's session instead of its suite's."""
    gate = asyncio.Semaphore(jobs)

    async def one(case: Case) -> CaseResult:
        async with gate:
            result = await run_case(case, command, timeout, factory)
        if progress is not None:
            progress(result)
        return result

    return list(await asyncio.gather(*(one(case) for case in cases)))


def mark_known_failing(
    results: Sequence[CaseResult], globs: Sequence[str], suite: Iterable[Case]
) -> tuple[list[CaseResult], list[str]]:
    """Mark the results a known-failing glob names, and return the globs that name no case of the suite.

    A marked case must fail: one that passes counts as a failure of the run (its entry is stale).
    """

    def named(case: Case, glob: str) -> bool:
        return any(fnmatch.fnmatchcase(name, glob) for name in (case.id, *case.requirements))

    marked = [
        dataclasses.replace(result, known_failing=True)
        if any(named(result.case, g) for g in globs)
        else result
        for result in results
    ]
    cases = list(suite)
    return marked, [glob for glob in globs if not any(named(case, glob) for case in cases)]
