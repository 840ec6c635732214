"""The README's example worker is complete and works as a real worker process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE, ROOT, Spawner, code, initialize, ok, run_tool, until
from tools import node_pack
from wuu.generated import models as m
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UnixServer, UserHost, UserHostError
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.grpc_service import GrpcServer
from wuu.host.userhost.personal import personal
from wuu.host.userhost.personal.phone import StandInPhone
from wuu.host.userhost.tokens import TokenStore
from wuu.worker.client import WorkerClient
from wuu.worker.native.run_code import find_node

README = ROOT / "README.md"


def example(name: str, language: str = "python") -> str:
    """The code of the README's example `name` (a `language` block after `<!-- example: name -->`)."""
    match = re.search(rf"<!-- example: {name} -->\n```{language}\n(.*?)```", README.read_text(), re.S)
    assert match, f"README has no example {name}"
    return match.group(1)


async def run_example(name: str, **variables: Any) -> dict[str, Any]:
    """Run the README's example `name` as written, its free variables given; the example's variables."""
    body = "\n".join(f"    {line}" for line in example(name).splitlines())
    namespace: dict[str, Any] = {}
    exec(f"async def session({', '.join(variables)}):\n{body}\n    return locals()\n", namespace)
    found: dict[str, Any] = await asyncio.wait_for(namespace["session"](**variables), DEADLINE)
    return found


async def run_personal_example(name: str, home: Path) -> dict[str, Any]:
    """Run the README's Personal example `name` as written, against a Personal host on `home` reached over its
    Unix socket; the example's variables."""
    host = await UserHost.start(
        user_space_id="local", product_domain="personal", home=home, compose=[personal()]
    )
    server = await UnixServer.start(host, home / "run" / "userhost.sock")
    try:
        return await run_example(name, socket=server.path)
    finally:
        await server.close()
        await host.close()


def test_the_example_workers_are_short() -> None:
    for name, language in (("memory-worker", "python"), ("node-memory-worker", "js")):
        lines = [line for line in example(name, language).splitlines() if line.strip()]
        assert len(lines) <= 30, name


async def serves_the_memory_protocol(client: WorkerClient, root: Path) -> None:
    """What the README's memory worker does, in either language; it then closes cleanly."""
    init = await initialize(client, root)
    assert init["methods"] == ["cancel", "execute", "initialize"]
    ok(await run_tool(client, "write_file", path="a", content="hello"))
    assert ok(await run_tool(client, "read_file", path="a"))["output"] == "hello"
    denied = await run_tool(client, "write_file", mode="read_only", path="a", content="x")
    assert code(denied) == "permission_denied"
    assert code(await run_tool(client, "list_dir", path=".")) == "unsupported_tool"
    assert code(await client.request("process/list", {})) == "unsupported_method"
    outcome = await client.close()
    assert outcome.clean


async def test_the_example_worker_serves_the_protocol(spawn_client: Spawner, tmp_path: Path) -> None:
    script = tmp_path / "memory_worker.py"
    script.write_text(example("memory-worker"))
    await serves_the_memory_protocol(await spawn_client([sys.executable, str(script)]), tmp_path)


async def test_the_node_example_worker_serves_the_protocol(spawn_client: Spawner, tmp_path: Path) -> None:
    """As its user would run it: `@wuu/plugin-sdk` installed beside it from the tarball `make node-pack`
    writes, with no network."""
    tarball = node_pack.pack(tmp_path / "dist")
    (tmp_path / "package.json").write_text("{}")
    install = ["npm", "install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", str(tarball)]
    subprocess.run(install, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    script = tmp_path / "memory-worker.mjs"
    script.write_text(example("node-memory-worker", "js"))
    await serves_the_memory_protocol(await spawn_client([find_node(), str(script)]), tmp_path / "ws")


async def test_the_personal_session_runs_against_a_host(tmp_path: Path) -> None:
    """The README's Personal session, run as written against a Personal host."""
    found = await run_personal_example("personal-session", tmp_path)
    assert found["sent"].receipt.history_seq == 1 and not found["sent"].replayed
    assert found["reply"].text == "Received: Plan the trip"
    assert found["receipts"].receipts[0].client_input_id == "in-1"
    assert [message.message_seq for message in found["found"].messages] == [2, 1]
    assert found["found"].messages[0].reactions.owner == "🎉"


async def test_the_approvals_session_runs_against_a_host(tmp_path: Path) -> None:
    """The README's session of actions under approval, run as written against a Personal host: allow once
    writes the file, a saved rule handles the identical request, a denied command never runs."""
    found = await run_personal_example("personal-approvals", tmp_path)
    files = tmp_path / "user-spaces" / "local" / "personal" / "files"
    assert (files / "notes" / "todo.txt").read_text() == "milk, eggs"
    assert not (files / "ran").exists()
    card, done, again, denied = found["card"], found["done"], found["again"], found["denied"]
    assert (card.status.value, card.summary) == ("waiting", "Create notes/todo.txt (10 bytes)")
    assert done.status.value == "succeeded" and done.receipt.digest == card.digest
    assert again.status.value == "succeeded" and again.decision.by.value == "rule"
    assert again.decision.rule_id == found["rule"].rule_id
    assert denied.status.value == "denied" and denied.receipt is None
    shown = [
        (message.text, message.approval_id) for message in reversed(found["history"]) if message.approval_id
    ]
    assert shown[:2] == [(card.summary, card.card_id), (f"Done: {card.summary}", card.card_id)]
    assert shown[-1] == (f"Not done, you denied it: {denied.summary}", denied.card_id)


async def test_the_push_session_registers_a_device_and_its_phone_is_told_once(tmp_path: Path) -> None:
    """The README's push session, run as written: a device token's gRPC connection registers the device, and
    three task replies within the grouping window reach the stand-in provider as one content-free
    notification."""
    deliveries = tmp_path / "phone.jsonl"
    host = await UserHost.start(
        user_space_id="local",
        product_domain="personal",
        home=tmp_path,
        compose=[personal(phone=StandInPhone(deliveries))],
    )
    tokens = TokenStore.of_space(tmp_path, "local", "personal")
    server = await UnixServer.start(host, tmp_path / "run" / "userhost.sock")
    grpc = await GrpcServer.start(host, "127.0.0.1:0", tokens=tokens)
    try:
        found = await run_example(
            "personal-push",
            socket=server.path,
            phone_address=grpc.address.target,
            token=tokens.create("my-phone", "phone-1"),
            deliveries=deliveries,
        )
    finally:
        await grpc.close()
        await server.close()
        await host.close()
    assert found["registration"].device_id == "phone-1"
    [phoned] = found["phoned"]
    assert phoned["registration_id"] == found["registration"].registration_id
    notification = phoned["notification"]
    assert (notification["kind"], notification["agent_id"], notification["count"]) == (
        "agent_attention",
        "main",
        3,
    )
    assert notification["session_id"] == found["main"]
    assert "check the mail" not in deliveries.read_text() and "APNs" not in deliveries.read_text()


async def test_the_tasks_session_runs_against_a_host(tmp_path: Path) -> None:
    """The README's session of background tasks, run as written against a Personal host: a task admitted over the
    Unix socket runs under its grant, its card allowed writes the file and its reply is delivered; after its
    grant is revoked, another task's allowed card is unauthorized and writes nothing. A memory is saved,
    corrected to a second version, and forgotten: its texts are gone from the store's file."""
    found = await run_personal_example("personal-tasks", tmp_path)
    files = tmp_path / "user-spaces" / "local" / "personal" / "files"
    assert (files / "notes" / "later.txt").read_text() == "buy milk"
    assert not (files / "notes" / "second.txt").exists()
    card, other = found["card"], found["other"]
    assert (card.source.value, card.task_id, card.summary) == (
        "task",
        found["first"],
        "Create notes/later.txt (8 bytes)",
    )
    assert found["done"] == f"Done: {card.summary} (succeeded)"
    assert found["grants"][0].task_id == found["second"] and found["grants"][1].task_id == found["first"]
    assert found["revoked"].status.value == "revoked"
    assert found["refused"] == f"Not done: {other.summary} (unauthorized)"
    assert [c.status.value for c in found["cards"]] == ["succeeded", "unauthorized"]
    assert found["cards"][1].receipt is None
    memory_id = found["memory_id"]
    assert found["saved"] == f"remembered {memory_id} (version 1): the owner takes tea without sugar"
    assert found["corrected"] == f"corrected {memory_id} (version 2): the owner takes green tea"
    assert re.fullmatch(
        rf"{memory_id} v2: the owner takes green tea \(corrected by main agent, message \d+\)",
        found["recalled"],
    )
    assert found["forgot"].startswith(f"forgot {memory_id}: its text is redacted")
    assert found["after"] == "no memories match"
    # The conversation keeps what was said (forgetting does not erase it); the memory's own versions are redacted.
    store = sqlite3.connect(tmp_path / "user-spaces" / "local" / "personal" / "state" / "personal.sqlite")
    try:
        rows = store.execute("SELECT version, text FROM memory_versions WHERE memory_id = ?", (memory_id,))
        assert sorted(rows.fetchall()) == [(1, None), (2, None)]
    finally:
        store.close()


async def test_the_configuration_session_composes_the_profile_its_file_selects(tmp_path: Path) -> None:
    """The README's configuration session, run as written by bash: the host composes the file's `quiet`
    profile, Personal without receipts, so `agents.send` answers `input_receipts_unavailable`."""
    match = re.search(r'```sh\n(cat > "\$HOME/wuu.json".*?)```', README.read_text(), re.S)
    assert match, "README has no configuration session"
    runtime = tmp_path / "run"
    (runtime / "wuu").mkdir(parents=True, mode=0o700)
    environment = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_RUNTIME_DIR": str(runtime),
        "LLM_KEY": "never-used",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    environment.pop("WUU_HOME", None)
    shell = await asyncio.create_subprocess_exec(
        "bash", "-e", "-c", match.group(1), env=environment, start_new_session=True
    )
    socket = runtime / "wuu" / "userhost.sock"
    try:
        await until(lambda: socket.exists() or shell.returncode is not None, "the host's socket")
        assert shell.returncode is None, f"the session's host exited with status {shell.returncode}"
        client = await UserHostClient.connect_unix(socket)
        init = await client.initialize()
        assert (init.composition_profile, [p.plugin_id for p in init.plugins]) == ("quiet", ["wuu.personal"])
        main = await client.plugin_call("wuu.personal", "agents.main_session", m.AgentsMainSessionParams())
        assert isinstance(main, m.AgentsMainSessionResult)
        envelope = m.UserInput(client_input_id="in-1", request_id="req-1", text="hello")
        with pytest.raises(UserHostError) as refused:
            await client.plugin_call(
                "wuu.personal",
                "agents.send",
                m.AgentsSendParams(session_id=main.session_id),
                user_input=envelope,
            )
        assert refused.value.code is UserHostErrorCode.INPUT_RECEIPTS_UNAVAILABLE
        await client.close()
    finally:
        os.killpg(shell.pid, signal.SIGTERM)
        await shell.wait()
    assert (tmp_path / ".wuu" / "user-spaces" / "local" / "personal").is_dir()


async def test_the_acp_engine_example_runs_an_acp_agent(tmp_path: Path) -> None:
    agent = [
        sys.executable,
        str(ROOT / "tests/host/userhost/fixtures/acp_agent.py"),
        "--modes",
        "plan,default",
    ]
    done = await run_example("acp-engine", agent=agent, project=tmp_path)
    assert (done["session"].mode_id, done["turn"].text) == ("default", "mode=default permission=none")
