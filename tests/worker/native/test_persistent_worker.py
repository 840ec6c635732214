"""A persistent worker outlives its connection (spec/schema/config/execution_environments.schema.json):
a later connection with the same binding finds the same processes.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
import stat
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, SECOND_NS, Spawner, alive, binding, initialize, read, start, until
from wuu.worker.client import WorkerClient


@pytest.fixture
def attach(spawn_client: Spawner) -> Spawner:
    """Connect to the persistent worker on a socket, starting it if none listens there."""

    async def connect(socket: Path, lifetime: float = 30) -> WorkerClient:
        argv = [
            sys.executable,
            "-m",
            "wuu.worker",
            "attach",
            "--socket",
            str(socket),
            "--lifetime-seconds",
            str(lifetime),
        ]
        return await spawn_client(argv)

    return connect


async def test_a_later_connection_finds_the_processes_and_resumes_reads(
    attach: Spawner, tmp_path: Path
) -> None:
    socket = tmp_path / "worker.sock"
    first = await attach(socket)
    await initialize(first, tmp_path / "ws")
    script = "echo one; read _; echo two; exec sleep 1000"
    record = await start(
        first, ["sh", "-c", script], permission_mode="unconfined", stdin=True, operation_id="op-1"
    )
    chunk = await read(first, record["id"], OffsetBytes=0, Wait=5 * SECOND_NS)
    assert base64.b64decode(chunk["Output"]) == b"one\n"
    assert (await first.close(budget=DEADLINE)).clean

    second = await attach(socket)
    await initialize(second, tmp_path / "ws")
    listed = (await second.request("process/list", {}))["data"]["processes"]
    assert [(p["id"], p["status"], p["operation_id"]) for p in listed] == [(record["id"], "running", "op-1")]
    await second.request("process/write", {"id": record["id"], "data": base64.b64encode(b"\n").decode()})
    resumed = await read(second, record["id"], OffsetBytes=chunk["EndOffset"], Wait=5 * SECOND_NS)
    assert base64.b64decode(resumed["Output"]) == b"two\n" and resumed["StartOffset"] == chunk["EndOffset"]
    stopped = (await second.request("process/stop", {"id": record["id"]}))["data"]
    assert stopped["status"] == "stopped"
    assert any(event.type.value == "stopped" for event in second.pending_events())


async def test_the_socket_and_its_log_are_private_under_any_umask(
    spawn_client: Spawner, tmp_path: Path
) -> None:
    """Under umask 000 the worker's socket and log are still 0600 from their creation, while its commands
    keep the umask they inherit."""
    socket = tmp_path / "worker.sock"
    attach = shlex.join(
        [sys.executable, "-m", "wuu.worker", "attach", "--socket", str(socket), "--lifetime-seconds", "30"]
    )
    client = await spawn_client(["sh", "-c", f"umask 000; exec {attach}"])
    await initialize(client, tmp_path / "ws")
    assert stat.S_IMODE(socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(socket.with_suffix(".log").stat().st_mode) == 0o600
    record = await start(
        client, ["sh", "-c", "echo x > made"], permission_mode="unconfined", cwd=str(tmp_path / "ws")
    )
    await until(lambda: (tmp_path / "ws" / "made").exists(), "the command's file")
    assert stat.S_IMODE((tmp_path / "ws" / "made").stat().st_mode) == 0o666, record
    await client.request("process/stop", {"id": record["id"]})


async def test_a_later_connection_with_another_binding_is_refused(attach: Spawner, tmp_path: Path) -> None:
    socket = tmp_path / "worker.sock"
    first = await attach(socket)
    await initialize(first, tmp_path / "ws")
    await first.close(budget=DEADLINE)
    second = await attach(socket)
    reply = await second.request("initialize", binding(tmp_path / "elsewhere"))
    assert reply["error"].startswith("binding_immutable")


async def test_a_reconnect_may_require_the_workspace_it_bound_and_finds_it_missing(
    attach: Spawner, tmp_path: Path
) -> None:
    socket, workspace = tmp_path / "worker.sock", tmp_path / "ws"
    first = await attach(socket)
    await initialize(first, workspace)
    await first.close(budget=DEADLINE)
    again = await attach(socket)
    await initialize(again, workspace, require_existing_workspace=True)
    await again.close(budget=DEADLINE)
    workspace.rmdir()
    missing = await attach(socket)
    reply = await missing.request("initialize", binding(workspace, require_existing_workspace=True))
    assert reply["error"] == f"workspace_missing: root: {workspace} does not exist"
    assert not workspace.exists(), "a missing workspace is never made again"


async def test_a_new_environment_refuses_a_reconnect(spawn_client: Spawner, tmp_path: Path) -> None:
    """`--new-environment`: nothing was retained, so a binding that expects retained state is refused;
    the first binding of the environment is not."""
    socket, workspace = tmp_path / "worker.sock", tmp_path / "ws"
    workspace.mkdir()
    attach = [sys.executable, "-m", "wuu.worker", "attach", "--socket", str(socket)]
    argv = [*attach, "--lifetime-seconds", "1", "--new-environment"]  # the worker goes soon after the test
    refused = await spawn_client(argv)
    reply = await refused.request("initialize", binding(workspace, require_existing_workspace=True))
    assert reply["error"].startswith(
        "workspace_missing: require_existing_workspace: this environment was made"
    )
    again = await refused.request("execute", {})
    assert again["error"].startswith("initialization_failed"), again
    await refused.close(budget=DEADLINE)
    first = await spawn_client(argv)
    await initialize(first, workspace)


async def test_the_worker_exits_after_its_idle_lifetime_and_cleans_up(
    attach: Spawner, tmp_path: Path
) -> None:
    socket = tmp_path / "worker.sock"
    client = await attach(socket, lifetime=0.5)
    await initialize(client, tmp_path / "ws", remove_workspace_on_exit=True)
    record = await start(client, ["sh", "-c", "echo $$; exec sleep 1000"], permission_mode="unconfined")
    await client.close(budget=DEADLINE)
    assert alive(record["pid"]), "the process outlives the connection"
    await until(lambda: not socket.exists(), "the idle worker to exit")
    await until(lambda: not alive(record["pid"]), "the process to be stopped")
    await until(lambda: not (tmp_path / "ws").exists(), "the workspace to be removed")


async def test_attach_is_a_byte_relay_that_loads_nothing_of_the_worker(tmp_path: Path) -> None:
    # `attach` is on every connection's path through a backend: its start-up is a connection's cost.
    socket = tmp_path / "worker.sock"
    argv = [
        "-X",
        "importtime",
        "-m",
        "wuu.worker",
        "attach",
        "--socket",
        str(socket),
        "--lifetime-seconds",
        "0.5",
    ]
    attach = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(attach.communicate(b""), DEADLINE)
    assert attach.returncode == 0, stderr.decode()[-2000:]
    loaded = {
        line.rsplit("|", 1)[-1].strip()
        for line in stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "wuu.worker.native.daemon" in loaded
    assert (
        not {"pydantic", "orjson", "wuu.generated.catalog", "wuu.worker.relay", "wuu.worker.native.worker"}
        & loaded
    )
    await until(lambda: not socket.exists(), "the worker it started to exit after its idle lifetime")
