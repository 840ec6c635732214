"""Running the mutation table's selections: each (cases, command, timeout) once per pytest session, shared by
every xdist worker through claim files in a directory they all see, a few at once in a background thread."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from wuu.conformance.registry import Case
from wuu.conformance.runner import CaseResult, Status, run_all

Job = tuple[list[Case], list[str], float]
"""A selection: its cases, the command they run against, the reply timeout."""
JOBS = 2
"""Cases of one selection run at once."""
BACKGROUND = 3
"""Selections one pytest process runs in the background at once (each with up to JOBS processes)."""
CASE_ALLOWANCE_S = 5.0
"""What each case adds to a selection's deadline: a case of an unbroken host takes one or two seconds, and
several times that on a loaded machine, so a long selection is not mistaken for a hung runner."""


@dataclass(frozen=True)
class Outcome:
    """How one case of a selection went (what a CaseResult says, in a form that crosses processes)."""

    case: str
    requirements: tuple[str, ...]
    status: str
    message: str

    @classmethod
    def of(cls, result: CaseResult) -> Outcome:
        return cls(result.case.id, result.case.requirements, result.status.value, result.message)

    @property
    def failed(self) -> bool:
        return self.status == Status.FAILED.value


def deadline_of(job: Job, base: float) -> float:
    """The longest a selection may run: `base`, and CASE_ALLOWANCE_S for each of its cases."""
    return base + CASE_ALLOWANCE_S * len(job[0])


async def run_selection(job: Job, deadline: float) -> list[Outcome]:
    """Run one selection; a runner that takes longer than `deadline` gives one `hung` outcome."""
    cases, command, timeout = job
    try:
        results = await asyncio.wait_for(run_all(cases, command, jobs=JOBS, timeout=timeout), deadline)
    except TimeoutError:
        message = f"the runner did not finish within {deadline:g} s"
        return [Outcome("(runner)", (), "hung", message)]
    return [Outcome.of(result) for result in results]


class Selections:
    """The selections' outcomes, each run once per pytest session across all of its xdist workers."""

    def __init__(self, shared: Path, jobs: dict[str, Job], wanted: set[str], deadline: float) -> None:
        """`jobs`: every selection by key, the longest first; `wanted`: the keys this session's tests ask for
        (the only ones to prefetch); `deadline`: the longest one selection may run, besides what its cases
        add (`deadline_of`)."""
        self._shared = shared
        self._jobs = jobs
        self._wanted = wanted
        self._deadline = deadline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._background()), daemon=True)
        self._thread.start()

    def _claim(self, key: str) -> bool:
        try:
            os.close(os.open(self._shared / f"{key}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def _store(self, key: str, outcomes: list[Outcome]) -> None:
        temporary = self._shared / f"{key}.json.part"
        temporary.write_text(json.dumps([outcome.__dict__ for outcome in outcomes]), "utf-8")
        temporary.rename(self._shared / f"{key}.json")

    def _load(self, key: str) -> list[Outcome] | None:
        try:
            entries: list[dict[str, Any]] = json.loads((self._shared / f"{key}.json").read_text("utf-8"))
        except FileNotFoundError:
            return None
        return [Outcome(e["case"], tuple(e["requirements"]), e["status"], e["message"]) for e in entries]

    async def _background(self) -> None:
        """Claim and run pending selections, BACKGROUND at once, until none is left or `stop`."""
        gate = asyncio.Semaphore(BACKGROUND)
        running: set[asyncio.Task[None]] = set()

        async def one(key: str) -> None:
            try:
                job = self._jobs[key]
                self._store(key, await run_selection(job, deadline_of(job, self._deadline)))
            finally:
                gate.release()

        for key in [key for key in self._jobs if key in self._wanted]:
            await gate.acquire()
            if self._stop.is_set() or not self._claim(key):
                gate.release()
                continue
            task = asyncio.create_task(one(key))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)

    def outcomes(self, key: str) -> list[Outcome]:
        """The outcomes of one selection: run here and now if nobody has claimed it yet, else awaited."""
        job = self._jobs[key]
        limit = deadline_of(job, self._deadline)
        if self._claim(key):
            ran = asyncio.run(run_selection(job, limit))
            self._store(key, ran)
            return ran
        # Queued behind other selections, it may start late.
        deadline = time.monotonic() + 3 * limit
        while (stored := self._load(key)) is None:
            if time.monotonic() > deadline:
                pytest.fail(f"no worker finished the selection {key} within {3 * limit:g} s")
            time.sleep(0.05)
        return stored

    def close(self) -> None:
        """Start nothing new; wait for the selections already claimed (other workers may await them)."""
        self._stop.set()
        self._thread.join()


def summary(outcomes: Sequence[Outcome]) -> str:
    lines = []
    for outcome in outcomes:
        first = outcome.message.splitlines()[0] if outcome.message else ""
        lines.append(f"  {outcome.status.upper():7} {outcome.case}  {first}")
    return "\n".join(lines)
