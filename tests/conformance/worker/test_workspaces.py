"""The conformance suite's own case directories: the runner removes its copy here, and the Session removes
what an adapter whose files live elsewhere (an ssh server, a container) made of it there.

"Elsewhere" is tests/worker/fixtures/elsewhere_worker.py: the native worker with every root moved beneath
another directory, as a remote machine has the same paths in a filesystem of its own. The ssh and docker
backends' own suite runs (tests/host/backends/test_ssh_backend.py, test_docker_backend.py) check their real servers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers import NATIVE_WORKER
from wuu.conformance.runner import run_all, select
from wuu.conformance.worker.session import Session
from wuu.conformance.worker.suite import WORKER

ELSEWHERE_WORKER = [
    sys.executable,
    str(Path(__file__).parents[2] / "worker" / "fixtures" / "elsewhere_worker.py"),
]
TIMEOUT = 20.0


@pytest.fixture
def starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file each adapter start of the test appends a line to."""
    path = tmp_path / "starts"
    monkeypatch.setenv("WUU_TEST_STARTS", str(path))
    return path


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the elsewhere adapter keeps its files."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    monkeypatch.setenv("WUU_TEST_ELSEWHERE", str(path))
    return path


def started(starts: Path) -> int:
    return len(starts.read_text(encoding="utf-8").splitlines()) if starts.exists() else 0


async def a_case(session: Session) -> None:
    """What a case leaves behind: a file in the root, and one beside it (unconfined)."""
    await session.start()
    await session.initialize()
    await session.ok("execute", session.tool("write_file", {"path": "in.txt", "content": "x"}))
    beside = session.tool("write_file", {"path": "../outside/x.txt", "content": "x", "create_dirs": True})
    await session.ok("execute", {**beside, "permission_mode": "unconfined"})


async def test_a_local_adapter_leaves_its_case_directory_to_the_runner(tmp_path: Path, starts: Path) -> None:
    counted = ["sh", "-c", 'echo start >> "$WUU_TEST_STARTS"; exec "$@"', "sh", *NATIVE_WORKER]
    session = Session(counted, tmp_path / "case", TIMEOUT)
    await a_case(session)
    await session.close()
    # The files are here, where the runner's temporary directory removes them: no second connection.
    assert (tmp_path / "case" / "root" / "in.txt").exists()
    assert started(starts) == 1


async def test_an_adapter_elsewhere_has_the_case_directory_removed_there(
    tmp_path: Path, elsewhere: Path, starts: Path
) -> None:
    workdir = tmp_path / "case"
    there = Path(f"{elsewhere}{workdir}")
    session = Session(ELSEWHERE_WORKER, workdir, TIMEOUT)
    await a_case(session)
    assert (there / "root" / "in.txt").exists() and (there / "outside" / "x.txt").exists()
    await session.close()
    assert not there.exists(), f"{there} is left: {sorted(os.listdir(there))}"
    assert started(starts) == 2  # the case's connection, and the one that removed the directory


async def test_no_cleanup_connection_when_no_root_was_bound(
    tmp_path: Path, elsewhere: Path, starts: Path
) -> None:
    session = Session(ELSEWHERE_WORKER, tmp_path / "case", TIMEOUT)
    await session.start()
    await session.error("initialize", session.binding(version=3), "protocol_mismatch")
    await session.close()
    assert started(starts) == 1
    assert not any(elsewhere.iterdir()), "nothing was made elsewhere"


async def test_the_runner_leaves_no_case_directory_elsewhere(elsewhere: Path) -> None:
    cases = select(WORKER.cases().values(), ["paths.outside-root", "init.workspace-created"], [])
    await run_all(cases, ELSEWHERE_WORKER, jobs=2, timeout=TIMEOUT)
    left = [str(path) for path in elsewhere.rglob("wuu-conformance-*")]
    assert not left, f"case directories left where the adapter keeps its files: {left}"
