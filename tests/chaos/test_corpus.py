"""Every input the fuzz campaign kept (tests/chaos/corpus/, each a connection that once failed) replays
without a problem: no crash, no hang, the connection ending exactly where the spec says, nothing left."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.chaos.fuzz import CORPUS, check_connection, load_case

CASES = sorted(CORPUS.glob("*.json"))


@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
async def test_kept_input_replays_cleanly(case: Path, tmp_path: Path) -> None:
    target, frames = load_case(case)
    sent, problems = await check_connection(target, frames, tmp_path / "run")
    assert sent >= 1
    assert not problems, "\n".join(problems)
