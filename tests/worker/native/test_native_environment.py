"""The environment of the commands the native worker runs: PATH, a private TMPDIR, the binding's and the
request's variables, and nothing of the worker's own.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import SECRET, SESSION, Spawner, all_output, ok, run_tool, start
from wuu.worker.client import WorkerClient

# A command's PATH names only system directories, never the worker's own PATH.
SYSTEM_PATH_DIRS = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}


def parse_env(text: str) -> dict[str, str]:
    """The variables `env` printed."""
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.fixture
async def env_worker(spawn: Spawner, root: Path) -> WorkerClient:
    """A worker whose binding forwards FORWARDED and SHARED to every command."""
    client = await spawn()
    await client.connect(str(root), SESSION, environment={"FORWARDED": "from-binding", "SHARED": "binding"})
    return client


def check_environment(env: dict[str, str]) -> None:
    """`env` is exactly PATH, TMPDIR, the binding's and the request's variables (the request's winning)."""
    assert SECRET not in env
    assert env["FORWARDED"] == "from-binding"
    assert env["REQUESTED"] == "from-request"
    assert env["SHARED"] == "request"  # the request's env wins over the binding's
    assert set(env["PATH"].split(":")) <= SYSTEM_PATH_DIRS, env["PATH"]
    assert os.path.isabs(env["TMPDIR"])
    # Nothing of the worker's own environment (HOME, its PATH, the test runner's variables).
    assert set(env) == {"PATH", "TMPDIR", "FORWARDED", "REQUESTED", "SHARED"}, env


async def test_exec_command_sees_only_path_tmpdir_forwarded_and_requested_variables(
    env_worker: WorkerClient,
) -> None:
    request_env = {"REQUESTED": "from-request", "SHARED": "request"}
    result = ok(await run_tool(env_worker, "exec_command", argv=["env"], env=request_env))
    check_environment(parse_env(result["output"]))


async def test_background_processes_see_only_path_tmpdir_forwarded_and_requested_variables(
    env_worker: WorkerClient,
) -> None:
    record = await start(env_worker, ["env"], env={"REQUESTED": "from-request", "SHARED": "request"})
    check_environment(parse_env((await all_output(env_worker, record["id"])).decode()))
