"""Fixtures of the native-worker suite (tests/worker/native/test_native_*.py).

Every test that asks for a worker gets a fresh worker process, once per entry of WORKER_COMMANDS, and a
fresh workspace root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import DELEGATING_WORKER, NATIVE_WORKER, SECRET, SESSION, Spawner
from wuu.worker.client import WorkerClient

# The commands that start a worker on stdio. Every test runs against every entry, so tests must not depend
# on the pid (or anything else) of the worker process itself.
WORKER_COMMANDS: dict[str, list[str]] = {
    "native": NATIVE_WORKER,
    # The native worker behind delegate_execution_backend_v4 (the README's audit example) passes the same tests.
    "delegated": DELEGATING_WORKER,
}


@pytest.fixture(params=sorted(WORKER_COMMANDS))
def worker_command(request: pytest.FixtureRequest) -> list[str]:
    """The command of the worker under test: each test runs once per entry of WORKER_COMMANDS."""
    return WORKER_COMMANDS[request.param]


@pytest.fixture
def spawn(spawn_client: Spawner, worker_command: list[str]) -> Spawner:
    """Start fresh worker processes (uninitialized), with SECRET and `extra_env` in their environment."""

    async def start(**extra_env: str) -> WorkerClient:
        return await spawn_client(worker_command, env={**os.environ, SECRET: "1", **extra_env})

    return start


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The workspace root, an empty directory."""
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the root, with a file in it."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("outside secret")
    return path


@pytest.fixture
async def worker(spawn: Spawner, root: Path) -> WorkerClient:
    """A worker bound to `root` with `process.start.v1` requested."""
    client = await spawn()
    await client.connect(str(root), SESSION, capabilities=["process.start.v1"])
    return client


@pytest.fixture
def escapes(root: Path, outside: Path) -> dict[str, str]:
    """Paths that leave the root, by how they leave it."""
    (root / "link_file").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside)
    (root / "dangling").symlink_to(outside / "nothing-yet.txt")
    return {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "symlink-file": "link_file",
        "symlink-dir": "link_dir/secret.txt",
        "dangling-symlink": "dangling",
    }
