"""schemathesis against a live HTTP user host (row `schemathesis.userhost`): the pytest file
tests/host/userhost/test_http_schemathesis.py in a subprocess, with 1,000 examples per operation at scale 1
and every check schemathesis has, `positive_data_acceptance` among them (the host takes every request the
generated document allows)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from .campaign import Campaign, Context, Outcome

REPO = Path(__file__).resolve().parents[2]
TESTS = "tests/host/userhost/test_http_schemathesis.py"
FULL_EXAMPLES = 1_000
"""Examples per operation at scale 1."""
DEADLINE_S = 3_600.0
PARALLEL_FROM = 100


async def _run(context: Context) -> Outcome:
    examples = context.size(FULL_EXAMPLES)
    env = {**os.environ, "WUU_SCHEMATHESIS_EXAMPLES": str(examples)}
    workers = (
        ["-n", "2"] if examples > PARALLEL_FROM else ["-p", "no:xdist"]
    )  # small runs: no worker start-up
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *workers,
        TESTS,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), DEADLINE_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        return Outcome(runs=examples, failures=[f"pytest {TESTS} ran over {DEADLINE_S:g} s"])
    outcome = Outcome(runs=examples)
    if process.returncode != 0:
        tail = output.decode(errors="replace").strip().splitlines()[-15:]
        outcome.failures.append(
            f"pytest {TESTS} exited {process.returncode} at {examples} examples per operation "
            f"(rerun: WUU_SCHEMATHESIS_EXAMPLES={examples} .venv/bin/python -m pytest {TESTS}): "
            + " | ".join(tail)
        )
    return outcome


CAMPAIGNS = [Campaign("schemathesis.userhost", _run)]
