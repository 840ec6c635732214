"""A persistent worker outlives its connection (spec/schema/config/execution_environments.schema.json): reconnect, same binding, same processes."""

from __future__ import annotations

import asyncio
import base64
import sys
from pathlib import Path
from typing import Any

from wuu.worker.client import WorkerClient

DEADLINE = 20.0


async def attach(socket: Path, lifetime: float = 30) -> WorkerClient:
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
    return await WorkerClient.spawn(argv)


def binding(root: Path, **extra: Any) -> dict[str, Any]:
    return {"version": 4, "root": str(root), "session": "thread-1", **extra}


async def until(predicate: Any, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


async def read(client: WorkerClient, process: str, offset: int) -> dict[str, Any]:
    params = {"Process": process, "OffsetBytes": offset, "Wait": 5_000_000_000}
    reply = await client.request("process/read", params)
    data: dict[str, Any] = reply["data"]
    return data


async def test_a_later_connection_finds_the_processes_and_resumes_reads(tmp_path: Path) -> None:
    socket = tmp_path / "worker.sock"
    first = await attach(socket)
    await first.request("initialize", binding(tmp_path / "ws"))
    script = "echo one; read _; echo two; exec sleep 1000"
    start = {
        "argv": ["sh", "-c", script],
        "permission_mode": "unconfined",
        "stdin": True,
        "operation_id": "op-1",
    }
    record = (await first.request("process/start", start))["data"]
    chunk = await read(first, record["id"], 0)
    assert base64.b64decode(chunk["Output"]) == b"one\n"
    assert (await first.close(budget=DEADLINE)).clean

    second = await attach(socket)
    try:
        reply = await second.request("initialize", binding(tmp_path / "ws"))
        assert "data" in reply, reply
        listed = (await second.request("process/list", {}))["data"]["processes"]
        assert [(p["id"], p["status"], p["operation_id"]) for p in listed] == [
            (record["id"], "running", "op-1")
        ]
        await second.request("process/write", {"id": record["id"], "data": base64.b64encode(b"\n").decode()})
        resumed = await read(second, record["id"], chunk["EndOffset"])
        assert (
            base64.b64decode(resumed["Output"]) == b"two\n" and resumed["StartOffset"] == chunk["EndOffset"]
        )
        stopped = (await second.request("process/stop", {"id": record["id"]}))["data"]
        assert stopped["status"] == "stopped"
        assert any(event.type.value == "stopped" for event in second.pending_events())
    finally:
        await second.close(budget=DEADLINE)


async def test_a_later_connection_with_another_binding_is_refused(tmp_path: Path) -> None:
    socket = tmp_path / "worker.sock"
    first = await attach(socket)
    await first.request("initialize", binding(tmp_path / "ws"))
    await first.close(budget=DEADLINE)
    second = await attach(socket)
    try:
        reply = await second.request("initialize", binding(tmp_path / "elsewhere"))
        assert reply["error"].startswith("binding_immutable")
    finally:
        await second.close(budget=DEADLINE)


async def test_the_worker_exits_after_its_idle_lifetime_and_cleans_up(tmp_path: Path) -> None:
    socket = tmp_path / "worker.sock"
    client = await attach(socket, lifetime=0.5)
    await client.request("initialize", binding(tmp_path / "ws", remove_workspace_on_exit=True))
    start = {"argv": ["sh", "-c", "echo $$; exec sleep 1000"], "permission_mode": "unconfined"}
    record = (await client.request("process/start", start))["data"]
    await client.close(budget=DEADLINE)
    assert alive(record["pid"]), "the process outlives the connection"
    await until(lambda: not socket.exists(), "the idle worker to exit")
    await until(lambda: not alive(record["pid"]), "the process to be stopped")
    await until(lambda: not (tmp_path / "ws").exists(), "the workspace to be removed")
