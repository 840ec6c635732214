"""`python -m wuu.host.reaper`, under which a user host runs each local or command worker: the worker alone
holds the streams, the reaper exits as the worker did, and what the worker left running ends with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, alive

REAPER = [sys.executable, "-m", "wuu.host.reaper"]


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3), ("kill -TERM $$", -15), ("exit 0", 0)])
def test_the_reaper_exits_as_its_worker_did(script: str, status: int) -> None:
    assert subprocess.run([*REAPER, "sh", "-c", script], timeout=DEADLINE).returncode == status


def test_the_worker_alone_holds_the_streams() -> None:
    # The end of the input reaches the worker (the reaper keeps no copy of it open), and so does its output.
    done = subprocess.run([*REAPER, "cat"], input=b"through", capture_output=True, timeout=DEADLINE)
    assert (done.returncode, done.stdout) == (0, b"through")


def test_what_the_worker_left_running_ends_before_the_reaper_exits(tmp_path: Path) -> None:
    pid_file = tmp_path / "left.pid"
    script = f"setsid sleep 300 & echo $! > {pid_file}"
    assert subprocess.run([*REAPER, "sh", "-c", script], timeout=DEADLINE).returncode == 0
    assert not alive(int(pid_file.read_text()))


def test_no_argv_is_a_usage_error() -> None:
    done = subprocess.run(REAPER, capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 2 and "usage: python -m wuu.host.reaper ARGV..." in done.stderr
