"""delegate_execution_backend_v4: the delegation rules (spec/methods/worker.json), on real processes.

(The delegating adapter around the native worker also runs the whole native-worker suite:
see WORKER_COMMANDS in tests/worker/conftest.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    DEADLINE,
    DELEGATING_WORKER,
    SDK_WORKER,
    Spawner,
    binding,
    initialize,
    tool_request,
    until,
)
from wuu.generated.models import ToolInvokeParams, ToolResult
from wuu.worker import delegate_execution_backend_v4
from wuu.worker.client import WorkerClient


def children(pid: int) -> list[int]:
    """The pids of the child processes of `pid`."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.fixture
def delegating(spawn_client: Spawner, tmp_path: Path) -> Spawner:
    """Start delegating workers bound to tmp_path/ws, with `env` added to this process's environment."""

    async def start(env: Mapping[str, str] = {}, **kwargs: Any) -> WorkerClient:
        client = await spawn_client(DELEGATING_WORKER, env={**os.environ, **env}, **kwargs)
        await initialize(client, tmp_path / "ws")
        return client

    return start


@pytest.fixture
async def delegated(delegating: Spawner, tmp_path: Path) -> WorkerClient:
    """A delegating worker that appends every `execute` to tmp_path/audit.log."""
    return await delegating({"WUU_AUDIT_LOG": str(tmp_path / "audit.log")})


def test_argument_rules_are_checked_up_front() -> None:
    with pytest.raises(ValueError, match="exactly one of command and transport"):
        delegate_execution_backend_v4()
    with pytest.raises(ValueError, match="shutdown_grace_ms"):
        delegate_execution_backend_v4(command=["x"], shutdown_grace_ms=0)
    with pytest.raises(ValueError, match="shutdown_grace_ms"):
        delegate_execution_backend_v4(command=["x"], shutdown_grace_ms=2_147_483_648)


async def test_the_override_runs_and_the_rest_is_delegated(delegated: WorkerClient, tmp_path: Path) -> None:
    reply = await delegated.request(
        "execute", tool_request("write_file", mode="unconfined", path="a.txt", content="hi")
    )
    assert reply["data"]["is_error"] is False
    assert (tmp_path / "ws" / "a.txt").read_text() == "hi"
    assert (tmp_path / "audit.log").read_text() == "write_file unconfined\n"
    assert (await delegated.request("process/list", {}))["data"] == {"processes": []}


async def test_only_the_peers_methods_are_advertised(spawn_client: Spawner, tmp_path: Path) -> None:
    # The peer, a native worker, offers run_code only with a Node.js to run it: here it has none.
    client = await spawn_client(DELEGATING_WORKER, env={**os.environ, "WUU_NODE": str(tmp_path / "no-node")})
    methods = (await initialize(client, tmp_path))["methods"]
    assert "run_code" not in methods
    assert "process/read" in methods
    assert (await client.request("run_code", {}))["error"].startswith("unsupported_method")


async def test_the_peer_gets_the_same_binding_and_its_errors_keep_their_codes(
    delegated: WorkerClient, tmp_path: Path
) -> None:
    reply = await delegated.request("initialize", binding(tmp_path / "other"))
    assert reply["error"].startswith("binding_immutable")
    reply = await delegated.request("execute", tool_request("read_file", path="../x"))
    assert reply["error"].startswith("path_outside_root: ")


async def test_a_cancelled_call_reaches_the_peer_and_ends_its_command(delegated: WorkerClient) -> None:
    waiter = delegated.expect_reply("long")
    data = tool_request(
        "exec_command", mode="unconfined", argv=["sh", "-c", "echo $$ > pid; exec sleep 1000"]
    )
    await delegated.send_frame({"id": "long", "method": "execute", "token": delegated.token, "data": data})
    assert delegated.process is not None
    (peer,) = children(delegated.process.pid)
    await until(lambda: bool(children(peer)), "the peer's command")
    assert (await delegated.request("cancel", {"id": "long"}))["data"] == {"cancelled": True}
    assert (await asyncio.wait_for(waiter, DEADLINE))["error"] == "cancelled"
    await until(lambda: not children(peer), "the command to end")


async def test_a_lost_peer_is_never_retried(delegated: WorkerClient) -> None:
    assert delegated.process is not None
    (peer,) = children(delegated.process.pid)
    pending = asyncio.create_task(
        delegated.request("execute", tool_request("exec_command", mode="unconfined", argv=["sleep", "1000"]))
    )
    await until(lambda: bool(children(peer)), "the peer's command")
    os.kill(peer, 9)
    reply = await asyncio.wait_for(pending, DEADLINE)
    assert reply["error"].startswith("internal: the delegate peer was lost")
    reply = await delegated.request("process/list", {})
    assert reply["error"].startswith("internal: the delegate peer has failed")
    assert children(delegated.process.pid) == []


async def test_a_given_env_replaces_the_inherited_environment(delegating: Spawner) -> None:
    client = await delegating({"WUU_TEST_PEER_ENV": json.dumps({"PATH": os.environ["PATH"], "ONLY": "this"})})
    assert client.process is not None
    (peer,) = children(client.process.pid)
    environ = Path(f"/proc/{peer}/environ").read_bytes().split(b"\0")
    assert b"ONLY=this" in environ
    assert not [entry for entry in environ if entry.startswith(b"WUU_TEST_PEER_ENV=")]


async def test_without_env_the_peer_inherits_the_adapters_environment(delegating: Spawner) -> None:
    client = await delegating({"WUU_INHERITED_MARKER": "yes"})
    assert client.process is not None
    (peer,) = children(client.process.pid)
    assert b"WUU_INHERITED_MARKER=yes" in Path(f"/proc/{peer}/environ").read_bytes().split(b"\0")


async def test_a_peer_over_its_exit_budget_is_terminated_and_reported(delegating: Spawner) -> None:
    env = {"WUU_TEST_PEER": json.dumps(SDK_WORKER), "WUU_TEST_CLOSE_HANGS": "1", "WUU_TEST_GRACE_MS": "300"}
    client = await delegating(env)
    assert client.process is not None
    (peer,) = children(client.process.pid)
    outcome = await client.close(budget=DEADLINE)
    assert outcome.returncode == 1
    assert b"the delegate peer was killed after its exit budget" in outcome.stderr
    assert not Path(f"/proc/{peer}").exists() or "Z" in Path(f"/proc/{peer}/stat").read_text().split()[2]


async def test_peer_callbacks_go_through_the_outer_request(delegating: Spawner) -> None:
    seen: list[str] = []

    async def invoker(params: ToolInvokeParams, parent: str) -> ToolResult:
        seen.append(parent)
        return ToolResult(output="from the outer host", is_error=False)

    client = await delegating({"WUU_TEST_PEER": json.dumps(SDK_WORKER)}, tool_invoker=invoker)
    data = tool_request("callback", mode="unconfined", name="read_file")
    reply = await client.request("execute", data, request_id="outer-7")
    assert reply["data"]["output"] == "host said: from the outer host"
    assert seen == ["outer-7"]
