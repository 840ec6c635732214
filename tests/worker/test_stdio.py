"""A command whose stdin or stdout cannot carry the protocol says so and exits 2, at once.

The event loop watches only pipes, sockets and terminals: on `/dev/null` it failed inside the loop and
left the command waiting forever, and on a regular file it failed with a traceback. Every command that
speaks a protocol on stdio (the worker, its `attach` relay, the adapter, the user host's `--stdio`)
checks its stdio before it starts anything.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, NATIVE_WORKER
from wuu.worker.stdio import UnusableStream
from wuu.worker.streams import connect_pipes


def run(
    argv: list[str], *, stdin: object = subprocess.DEVNULL, stdout: object = subprocess.PIPE
) -> tuple[int, str]:
    done = subprocess.run(
        argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=DEADLINE, check=False
    )
    return done.returncode, done.stderr.decode()


def commands(tmp_path: Path) -> dict[str, list[str]]:
    config = tmp_path / "profiles.json"
    config.write_text(json.dumps({"execution_environments": {"profiles": {"here": {"backend": "local"}}}}))
    return {
        "worker": NATIVE_WORKER,
        "attach": [*NATIVE_WORKER, "attach", "--socket", str(tmp_path / "w.sock")],
        "adapter": [
            sys.executable,
            "-m",
            "wuu.host",
            "adapter",
            "--config",
            str(config),
            "--profile",
            "here",
        ],
        "userhost": [
            sys.executable,
            "-m",
            "wuu.host.userhost",
            "serve",
            "--stdio",
            "--user-space",
            "u",
            "--product-domain",
            "personal",
            "--home",
            str(tmp_path / "home"),
        ],
    }


@pytest.mark.parametrize("name", ["worker", "attach", "adapter", "userhost"])
def test_a_stdin_of_dev_null_is_refused_at_once(tmp_path: Path, name: str) -> None:
    returncode, stderr = run(commands(tmp_path)[name])
    assert returncode == 2, stderr
    assert "stdin (/dev/null) is a device, not a pipe, socket or terminal" in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "w.sock").exists()  # attach started no persistent worker


def test_a_stdout_to_a_regular_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out.ndjson"
    with out.open("wb") as file:
        returncode, stderr = run(NATIVE_WORKER, stdin=subprocess.PIPE, stdout=file)
    assert returncode == 2
    assert f"stdout ({out}) is a regular file, not a pipe, socket or terminal" in stderr
    assert out.read_bytes() == b""


async def test_connect_pipes_names_the_stream_it_cannot_use(tmp_path: Path) -> None:
    frames = tmp_path / "frames.ndjson"
    frames.write_bytes(b"{}\n")
    with (
        frames.open("rb") as given,
        pytest.raises(UnusableStream, match=r"the input \(.*frames.ndjson\) is a regular file"),
    ):
        await asyncio.wait_for(connect_pipes(given, sys.stdout.buffer), DEADLINE)
