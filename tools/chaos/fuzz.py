"""Fuzz: seeded frames against the native worker and through the delegate (rows `fuzz.native`, `fuzz.delegate`).

Each connection is a fresh worker process: the harness's initialize, then frames from `FrameMaker` until
one of them ends the connection (or `MAX_FRAMES_PER_CONNECTION`, then EOF). A connection with a problem
is saved under tests/chaos/corpus/ (named for its hash) and replayed by tests/chaos/test_corpus.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import random
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .campaign import Campaign, Context, Outcome, reap_leftovers
from .frames import FrameMaker
from .oracle import Expect, judge
from .wire import NO_INITIALIZE, run_connection

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "chaos" / "corpus"
FULL_FRAMES = 100_000
"""Frames per target at scale 1."""
MAX_FRAMES_PER_CONNECTION = 2_000
SHRINK_ATTEMPTS = 40
CONCURRENT_CONNECTIONS = 2
"""Worker processes fuzzed at once (one per core of a small machine)."""
TARGETS: dict[str, list[str]] = {
    "native": [sys.executable, "-m", "wuu.worker"],
    "delegate": [sys.executable, "-m", "tools.chaos.delegating_worker"],
}
_KEPT_BYTES = 4096  # an oversize frame is kept as its start, its length and its filler


def connection_frames(maker: FrameMaker, budget: int) -> list[bytes]:
    """The frames of one connection: up to `budget`, ending with the first one that may end it."""
    frames: list[bytes] = []
    while len(frames) < budget:
        made = maker.next()
        frames += made
        if judge(made[-1]).expect in (Expect.ENDS, Expect.EITHER):
            break
    return frames


def _keep(frame: bytes) -> Any:
    if len(frame) <= _KEPT_BYTES:
        return base64.b64encode(frame).decode()
    start = frame[:_KEPT_BYTES]
    return {"start": base64.b64encode(start).decode(), "size": len(frame), "fill": frame[-2]}


def _unkeep(kept: Any) -> bytes:
    if isinstance(kept, str):
        return base64.b64decode(kept)
    start = base64.b64decode(kept["start"])
    fill = bytes([int(kept["fill"])]) * (int(kept["size"]) - len(start) - 1)
    return start + fill + b"\n"


def save_case(target: str, seed: int, frames: list[bytes], problems: list[str]) -> Path:
    """Keep a failing connection in the corpus as `<hash>.json`; its path."""
    kept = [_keep(frame) for frame in frames]
    body = json.dumps({"target": target, "frames": kept}, sort_keys=True)
    path = CORPUS / f"{hashlib.sha256(body.encode()).hexdigest()[:16]}.json"
    CORPUS.mkdir(parents=True, exist_ok=True)
    case = {"target": target, "seed": seed, "problems": problems, "frames": kept}
    path.write_text(json.dumps(case, indent=1) + "\n")
    return path


def load_case(path: Path) -> tuple[str, list[bytes]]:
    """A kept case: its target and its frames."""
    case = json.loads(path.read_text())
    return case["target"], [_unkeep(kept) for kept in case["frames"]]


async def check_connection(target: str, frames: list[bytes], workdir: Path) -> tuple[int, list[str]]:
    """Run one connection of `frames` on `target`; frames written and the problems (leaks included)."""
    report = await run_connection(TARGETS[target], frames, workdir, cwd=REPO)
    problems = list(report.problems)
    leaked = reap_leftovers(workdir)
    if leaked:
        problems.append(f"processes left behind: {leaked}")
    return report.sent, problems


async def shrink(target: str, frames: list[bytes], workdir: Path, kind: str) -> list[bytes]:
    """Fewer frames that still show a problem of `kind` (its `signature`): chunks are dropped while it
    stays (at most SHRINK_ATTEMPTS reruns; a problem that does not come back keeps the frames)."""
    attempts = 0
    chunk = max(1, len(frames) // 2)
    while attempts < SHRINK_ATTEMPTS:
        start = 0
        while start < len(frames) and attempts < SHRINK_ATTEMPTS and len(frames) > 1:
            candidate = frames[:start] + frames[start + chunk :]
            attempts += 1
            _, problems = await check_connection(target, candidate, workdir / f"shrink-{attempts}")
            if any(signature(problem) == kind for problem in problems):
                frames = candidate
            else:
                start += chunk
        if chunk == 1:
            break
        chunk = max(1, chunk // 2)
    return frames


async def _keep_input(target: str, seed: int, frames: list[bytes], workdir: Path, problems: list[str]) -> str:
    """Shrink and save the input of a failed connection when its failure comes back; what became of it."""
    kind = signature(problems[0])
    if problems[0] == NO_INITIALIZE:
        return "input not kept: the worker did not start"
    _, again = await check_connection(target, frames, workdir / "again")
    if not any(signature(problem) == kind for problem in again):
        return "input not kept: the failure did not come back"
    for path in sorted(CORPUS.glob("*.json")):  # a failure kept by an earlier run is not kept twice
        case = json.loads(path.read_text())
        if case["target"] == target and signature(case["problems"][0]) == kind:
            return f"input of this kind already kept as {path.relative_to(REPO)}"
    small = await shrink(target, frames, workdir, kind)
    return f"input kept as {save_case(target, seed, small, problems).relative_to(REPO)}"


def signature(problem: str) -> str:
    """A problem without its numbers, paths and quoted values: failures of one kind share it."""
    return re.sub(r"[0-9]+|/\S+|'[^']*'|b'.*", "", problem)[:100]


def _plan(name: str, seed: int, total: int) -> Iterator[tuple[int, int, list[bytes]]]:
    """The run's connections, in order: (index, frame seed, frames), `total` frames in all."""
    seeds = random.Random(f"{name}:{seed}")
    planned = 0
    for index in itertools.count():
        if planned >= total:
            return
        frame_seed = seeds.randrange(2**32)
        budget = min(MAX_FRAMES_PER_CONNECTION, total - planned)
        frames = connection_frames(FrameMaker(random.Random(frame_seed)), budget)
        planned += len(frames)
        yield index, frame_seed, frames


def _campaign(target: str) -> Campaign:
    name = f"fuzz.{target}"

    async def run(context: Context) -> Outcome:
        outcome = Outcome()
        kept: dict[str, str] = {}
        plan = _plan(name, context.seed, context.size(FULL_FRAMES))
        connections = 0

        async def connect() -> None:
            nonlocal connections
            for index, seed, frames in plan:  # each connection is taken by whichever runner is free
                workdir = context.workdir / f"{target}-{index}"
                sent, problems = await check_connection(target, frames, workdir)
                outcome.runs += max(sent, 1)
                connections += 1
                if not problems:
                    shutil.rmtree(workdir, ignore_errors=True)
                    continue
                kind = signature(problems[0])
                if kind not in kept:  # one kept input per kind of failure, once it has come back
                    kept[kind] = await _keep_input(target, seed, frames[:sent], workdir, problems)
                outcome.failures += [
                    f"connection {index} (frame seed {seed}): {problem}; {kept[kind]}; rerun: {context.rerun(name)}"
                    for problem in problems
                ]

        await asyncio.gather(*(connect() for _ in range(CONCURRENT_CONNECTIONS)))
        context.log(f"{name}: {outcome.runs} frames on {connections} connections")
        return outcome

    return Campaign(name, run)


CAMPAIGNS = [_campaign("native"), _campaign("delegate")]
