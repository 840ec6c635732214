"""A `local` worker started while the adapter validates its configuration, a `command` adapter as soon as its
profile is valid (wuu.host.prestart)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

from tests.helpers import DEADLINE, SESSION, carrying
from wuu.host.backends import environment_for
from wuu.host.backends.base import ChildProcess
from wuu.host.prestart import INSTALLED_WORKER, Prestarted, local_worker_argv, spawn
from wuu.host.profiles import parse
from wuu.worker.client import WorkerClient


def waiting_worker(marker: str) -> list[str]:
    """A stand-in worker that reads stdin until EOF, named by `marker`."""
    return [sys.executable, "-c", "import sys; sys.stdin.buffer.read()", marker]


def write_config(tmp_path: Path, environments: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"execution_environments": environments}))
    return path


def test_only_a_selected_local_profile_is_read_for_a_prestart(tmp_path: Path) -> None:
    worker = ["/opt/worker", "--flag"]
    path = write_config(
        tmp_path,
        {
            "default": "mine",
            "profiles": {"mine": {"backend": "local", "worker": worker}, "c": {"backend": "command"}},
        },
    )
    assert local_worker_argv(path, None) == tuple(worker)
    assert local_worker_argv(path, "local") == INSTALLED_WORKER
    assert local_worker_argv(path, "c") is None  # a command adapter may act as it starts: never early
    assert local_worker_argv(path, "missing") is None
    assert local_worker_argv(tmp_path / "absent.json", None) is None
    (tmp_path / "bad.json").write_text("{")
    assert local_worker_argv(tmp_path / "bad.json", None) is None


def test_a_prestarted_worker_for_another_command_is_ended_not_used() -> None:
    marker = f"wuu-prestart-{uuid.uuid4().hex}"
    argv = tuple(waiting_worker(marker))
    process = spawn(argv)
    early = Prestarted(argv, process)
    assert process.poll() is None, "it waits for frames"
    assert early.claim((*argv, "other")) is None
    assert process.returncode == 0  # EOF ended it, and it was reaped
    assert not carrying(marker)
    assert early.claim(argv) is None  # a prestarted worker is claimed at most once


async def test_a_refused_configuration_leaves_no_prestarted_worker(tmp_path: Path) -> None:
    marker = f"wuu-prestart-{uuid.uuid4().hex}"
    path = write_config(
        tmp_path,
        {
            "profiles": {
                "p": {"backend": "local", "worker": waiting_worker(marker), "shutdown_timeout_ms": -1}
            }
        },
    )
    client = await WorkerClient.spawn(
        [sys.executable, "-m", "wuu.host", "adapter", "--config", str(path), "--profile", "p"],
        env=dict(os.environ),
    )
    outcome = await client.close(budget=DEADLINE)
    assert outcome.returncode == 2
    assert "shutdown_timeout_ms" in outcome.stderr.decode()
    assert not carrying(marker)


async def test_the_local_environment_uses_the_prestarted_worker(tmp_path: Path) -> None:
    early = Prestarted(INSTALLED_WORKER, spawn(INSTALLED_WORKER))
    assert early.process is not None
    pid = early.process.pid
    profile = parse({"execution_environments": {}}).select("local")
    environment = environment_for(profile, early)
    reader, writer = await environment.start()
    root = tmp_path / "root"
    root.mkdir()
    frame = {
        "id": "1",
        "method": "initialize",
        "token": "t",
        "data": {"version": 4, "root": str(root), "session": SESSION},
    }
    writer.write(json.dumps(frame).encode() + b"\n")
    reply = json.loads(await asyncio.wait_for(reader.readline(), DEADLINE))
    assert reply["id"] == "1" and reply["data"]["version"] == 4
    assert isinstance(environment, ChildProcess) and environment.process is not None
    assert environment.process.pid == pid  # the early worker, not a second one
    await environment.close(DEADLINE)
    assert (
        not Path(f"/proc/{pid}").exists()
        or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    )


async def test_a_command_adapter_starts_only_once_its_profile_is_valid_and_its_variables_set(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "started"
    # The stand-in adapter says that it started, then serves as the native worker.
    command = ["/bin/sh", "-c", f"touch {marker}; exec {sys.executable} -m wuu.worker"]
    profile = {"backend": "command", "command": command, "workspace": str(tmp_path), "forward_env": ["WUU_X"]}
    path = write_config(tmp_path, {"profiles": {"c": profile}})
    argv = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(path), "--profile", "c"]
    environ = {key: value for key, value in os.environ.items() if key != "WUU_X"}

    refused = await WorkerClient.spawn(argv, env=environ)
    outcome = await refused.close(budget=DEADLINE)
    assert outcome.returncode == 2 and "forward_env: WUU_X" in outcome.stderr.decode()
    assert not marker.exists()

    client = await WorkerClient.spawn(argv, env={**environ, "WUU_X": "1"})
    reply = await client.request("initialize", {"version": 4, "root": str(tmp_path), "session": SESSION})
    assert reply["data"]["version"] == 4
    assert marker.exists()
    outcome = await client.close(budget=DEADLINE)
    assert outcome.clean, outcome.stderr.decode()
