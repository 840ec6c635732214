"""The worker SDK's protocol rules, checked on a real worker process over real pipes."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import orjson
import pytest

from tests.helpers import DEADLINE, SDK_WORKER, Spawner, binding, code, initialize, ok, tool_request, until
from wuu.generated.models import ToolInvokeParams, ToolResult
from wuu.worker.client import WorkerClient


@pytest.fixture
async def worker(spawn_client: Spawner) -> WorkerClient:
    """A fresh SDK worker, not yet initialized (in this module it stands for the native one of conftest.py)."""
    return await spawn_client(SDK_WORKER)


async def wait_exit(client: WorkerClient) -> int:
    """Wait for the worker process to exit by itself; its exit status."""
    assert client.process is not None
    return await asyncio.wait_for(client.process.wait(), DEADLINE)


# --- initialize -----------------------------------------------------------------------------------


async def test_requests_before_initialize_get_not_initialized(worker: WorkerClient) -> None:
    for method, data in [
        ("execute", tool_request("echo", text="hi")),
        ("process/list", {}),
        ("cancel", {"id": "x"}),
    ]:
        assert code(await worker.request(method, data)) == "not_initialized"


async def test_initialize_reply_lists_methods_and_grants_requested_capabilities(
    worker: WorkerClient, tmp_path: Path
) -> None:
    data = await initialize(worker, tmp_path / "ws", capabilities=["process.start.v1", "unknown.v9"])
    assert data["version"] == 4
    assert data["capabilities"] == ["process.start.v1"]
    assert data["methods"] == [
        "cancel",
        "execute",
        "initialize",
        "process/get",
        "process/list",
        "process/start",
    ]
    assert data["worker"]["name"]


async def test_process_start_v1_is_not_granted_without_process_list(
    spawn_client: Spawner, tmp_path: Path
) -> None:
    """The backend declares the capability, but without `process/list` the SDK cannot stand behind it."""
    worker = await spawn_client(SDK_WORKER, env={**os.environ, "WUU_TEST_WITHOUT_LIST": "1"})
    data = await initialize(worker, tmp_path / "ws", capabilities=["process.start.v1"])
    assert data["capabilities"] == []
    assert "process/list" not in data["methods"] and "process/start" in data["methods"]


async def test_equal_reinitialize_returns_the_same_reply(worker: WorkerClient, tmp_path: Path) -> None:
    first = await initialize(worker, tmp_path / "ws", environment={"A": "1"})
    again = await worker.request(
        "initialize", binding(tmp_path / "ws", environment={"A": "1"}, require_existing_workspace=False)
    )
    assert ok(again) == first


async def test_a_different_binding_gets_binding_immutable(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    reply = await worker.request("initialize", binding(tmp_path / "other"))
    assert code(reply) == "binding_immutable"
    reply = await worker.request("initialize", binding(tmp_path / "ws", capabilities=["process.start.v1"]))
    assert code(reply) == "binding_immutable"


async def test_another_token_gets_token_mismatch_on_every_method(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws")
    for method, data in [
        ("initialize", binding(tmp_path / "ws")),
        ("execute", tool_request("echo", text="x")),
        ("cancel", {"id": "h1"}),
    ]:
        assert code(await worker.request(method, data, token="intruder")) == "token_mismatch"
    assert (await worker.request("execute", tool_request("echo", text="ok")))["data"]["output"] == "ok"


async def test_protocol_mismatch_leaves_the_connection_uninitialized(
    worker: WorkerClient, tmp_path: Path
) -> None:
    reply = await worker.request("initialize", {**binding(tmp_path / "ws"), "version": 3})
    assert code(reply) == "protocol_mismatch"
    assert code(await worker.request("execute", tool_request("echo", text="x"))) == "not_initialized"
    await initialize(worker, tmp_path / "ws")


async def test_a_failed_initialize_kills_the_connection(worker: WorkerClient, tmp_path: Path) -> None:
    assert code(await worker.request("initialize", binding(tmp_path / "fail-init"))) == "workspace_missing"
    for method, data in [
        ("initialize", binding(tmp_path / "ws")),
        ("execute", tool_request("echo", text="x")),
    ]:
        assert code(await worker.request(method, data)) == "initialization_failed"


async def test_a_cancelled_initialize_kills_the_connection(worker: WorkerClient, tmp_path: Path) -> None:
    init = worker.expect_reply("init")
    await worker.send_frame(
        {"id": "init", "method": "initialize", "token": worker.token, "data": binding(tmp_path / "slow-init")}
    )
    assert (await worker.request("cancel", {"id": "init"}))["data"] == {"cancelled": True}
    assert code(await asyncio.wait_for(init, DEADLINE)) == "cancelled"
    assert code(await worker.request("initialize", binding(tmp_path / "ws"))) == "initialization_failed"


# --- requests -------------------------------------------------------------------------------------


async def test_unsupported_methods_and_tools(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    for method in ("process/read", "run_code", "process/event", "tool/invoke", "no/such"):
        assert code(await worker.request(method, {})) == "unsupported_method", method
    assert code(await worker.request("execute", tool_request("teleport"))) == "unsupported_tool"


async def test_invalid_params_name_the_field(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    reply = await worker.request("execute", {**tool_request("echo", text="x"), "permission_mode": "godmode"})
    assert reply["error"].startswith("invalid_request: permission_mode: ")
    reply = await worker.request("initialize", {**binding(tmp_path / "ws"), "version": "4"})
    assert reply["error"].startswith("invalid_request: version: ")


async def test_a_request_frame_with_wrong_fields_gets_invalid_request(worker: WorkerClient) -> None:
    for frame in (
        {"id": "a", "method": "initialize", "data": {}},
        {"id": "b", "method": "initialize", "token": 7, "data": {}},
        {"id": "c", "method": "initialize", "token": "t", "data": []},
        {"id": "d", "method": "initialize", "token": "t", "data": {}, "extra": 1},
    ):
        waiter = worker.expect_reply(frame["id"])
        await worker.send_frame(frame)
        assert code(await asyncio.wait_for(waiter, DEADLINE)) == "invalid_request", frame


async def test_a_duplicate_in_flight_id_gets_invalid_request(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    slow = worker.expect_reply("dup")
    frame = {"id": "dup", "method": "execute", "token": worker.token, "data": tool_request("sleep", ms=300)}
    await worker.send_frame(frame)
    await worker.send_frame({**frame, "data": tool_request("echo", text="second")})
    # The duplicate's reply carries the same id: the first reply with that id is the rejection.
    assert code(await asyncio.wait_for(slow, DEADLINE)) == "invalid_request"
    later = worker.expect_reply("dup")
    assert (await asyncio.wait_for(later, DEADLINE))["data"]["output"] == "slept"


async def test_overlapping_handlers_answer_in_completion_order(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    slow = asyncio.create_task(worker.request("execute", tool_request("sleep", ms=500)))
    fast = asyncio.create_task(worker.request("execute", tool_request("echo", text="fast")))
    done, _ = await asyncio.wait({slow, fast}, return_when=asyncio.FIRST_COMPLETED)
    assert done == {fast}
    assert (await slow)["data"]["output"] == "slept"


async def test_cancel_is_answered_at_once_and_the_request_gets_one_cancelled_reply(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws")
    target = worker.expect_reply("long")
    await worker.send_frame(
        {"id": "long", "method": "execute", "token": worker.token, "data": tool_request("sleep", ms=60_000)}
    )
    assert (await worker.request("cancel", {"id": "long"}))["data"] == {"cancelled": True}
    assert code(await asyncio.wait_for(target, DEADLINE)) == "cancelled"
    assert (await worker.request("cancel", {"id": "long"}))["data"] == {"cancelled": False}
    assert (await worker.request("cancel", {"id": "never-sent"}))["data"] == {"cancelled": False}
    received = [data for direction, data in worker.transcript.entries if direction == "<"]
    assert sum(b'"id":"long"' in data for data in received) == 1


async def test_a_request_cancelled_in_the_same_read_never_starts(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws")
    target, cancel = worker.expect_reply("early"), worker.expect_reply("stop-early")
    request = {
        "id": "early",
        "method": "execute",
        "token": worker.token,
        "data": tool_request("sleep", ms=60_000),
    }
    stop = {"id": "stop-early", "method": "cancel", "token": worker.token, "data": {"id": "early"}}
    # One write: the worker routes both frames before the request's task takes its first step.
    await worker.send_bytes(orjson.dumps(request) + b"\n" + orjson.dumps(stop) + b"\n")
    assert ok(await asyncio.wait_for(cancel, DEADLINE)) == {"cancelled": True}
    assert code(await asyncio.wait_for(target, DEADLINE)) == "cancelled"
    assert ok(await worker.request("execute", tool_request("echo", text="later")))["output"] == "later"
    assert not (tmp_path / "ws" / "sleeping").exists()


async def test_a_plain_handler_is_answered_at_once_and_its_errors_are_replies(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws")
    slow = asyncio.create_task(worker.request("execute", tool_request("sleep", ms=60_000)))
    await until((tmp_path / "ws" / "sleeping").exists, "the sleep handler to start")
    assert ok(await worker.request("process/get", {"id": "p1"}))["argv"] == ["true"]
    assert code(await worker.request("process/get", {"id": "p2"})) == "not_found"
    broken = await worker.request("process/get", {"id": "broken"})
    assert broken["error"] == "internal: RuntimeError: the lookup broke"
    assert code(await worker.request("process/get", {})) == "invalid_request"
    # Answered as it was read: nothing of it is left in flight to cancel.
    quick = worker.expect_reply("quick")
    await worker.send_frame(
        {"id": "quick", "method": "process/get", "token": worker.token, "data": {"id": "p1"}}
    )
    assert ok(await worker.request("cancel", {"id": "quick"})) == {"cancelled": False}
    assert ok(await asyncio.wait_for(quick, DEADLINE))["id"] == "p1"
    assert not slow.done()
    slow.cancel()


async def test_a_handler_that_finishes_anyway_delivers_its_result_after_cancel(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws")
    target = worker.expect_reply("stubborn")
    await worker.send_frame(
        {
            "id": "stubborn",
            "method": "execute",
            "token": worker.token,
            "data": tool_request("stubborn", ms=200),
        }
    )
    # Handlers start in arrival order: once a later request is answered, the stubborn one is running.
    await worker.request("execute", tool_request("echo", text="after"))
    assert (await worker.request("cancel", {"id": "stubborn"}))["data"] == {"cancelled": True}
    reply = await asyncio.wait_for(target, DEADLINE)
    assert reply["data"]["output"] == "finished anyway"


async def test_cancelling_the_caller_sends_cancel(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    call = asyncio.create_task(worker.request("execute", tool_request("sleep", ms=60_000)))
    await until((tmp_path / "ws" / "sleeping").exists, "the sleep handler to start")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await until(
        lambda: any(b'"error":"cancelled"' in data for _, data in worker.transcript.entries),
        "the cancelled request's reply",
    )


async def test_a_handler_error_is_internal(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    reply = await worker.request("execute", tool_request("fail"))
    assert reply["error"] == "internal: RuntimeError: the tool broke"


async def test_a_result_off_the_spec_is_internal_and_never_sent(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    reply = await worker.request("execute", tool_request("offspec"))
    assert reply == {"id": reply["id"], "error": "internal: execute result: output: is not a string"}


async def test_an_oversize_reply_becomes_reply_too_large(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    assert code(await worker.request("execute", tool_request("big", bytes=17_000_000))) == "reply_too_large"
    reply = await worker.request("execute", tool_request("big", bytes=16_000_000))
    assert len(reply["data"]["output"]) == 16_000_000


async def test_the_sdk_checks_that_start_replies_keep_the_operation_id(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws", capabilities=["process.start.v1"])
    params = {"argv": ["true"], "permission_mode": "standard", "operation_id": "op-7"}
    assert (await worker.request("process/start", params))["data"]["operation_id"] == "op-7"
    reply = await worker.request("process/start", {**params, "argv": ["lose-operation-id"]})
    assert reply["error"].startswith("internal: process.start.v1")


async def test_callbacks_reach_the_host_while_the_parent_is_live(
    spawn_client: Spawner, tmp_path: Path
) -> None:
    seen: list[tuple[str, str]] = []

    async def invoker(params: ToolInvokeParams, parent: str) -> ToolResult:
        seen.append((params.tool, parent))
        return ToolResult(output=f"{params.tool} of {json.loads(params.arguments)['path']}", is_error=False)

    client = await spawn_client(SDK_WORKER, tool_invoker=invoker)
    await initialize(client, tmp_path / "ws")
    reply = await client.request("execute", tool_request("callback", name="read_file"), request_id="parent-1")
    assert reply["data"]["output"] == "host said: read_file of a.txt"
    assert seen == [("read_file", "parent-1")]
    callback = next(data for direction, data in client.transcript.entries if b'"tool/invoke"' in data)
    assert json.loads(callback)["parent"] == "parent-1"


# --- the end of the connection --------------------------------------------------------------------


async def test_eof_cancels_handlers_runs_cleanup_and_exits(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    pending = asyncio.create_task(worker.request("execute", tool_request("sleep", ms=60_000)))
    await until((tmp_path / "ws" / "sleeping").exists, "the sleep handler to start")
    outcome = await worker.close(budget=DEADLINE)
    assert outcome.clean
    assert (tmp_path / "ws" / "closed").read_text() == "closed"
    # The drained request still got its one terminal reply before the worker exited.
    assert code(await pending) == "cancelled"


MALFORMED = {
    "not JSON": b"{nope\n",
    "not an object": b"[1, 2]\n",
    "no id": b'{"method": "cancel", "token": "t", "data": {}}\n',
    "no method and no id": b'{"data": {}}\n',
    "method not a string": b'{"id": "x", "method": 7, "token": "t", "data": {}}\n',
    "invalid UTF-8": b'{"id": "\xff\xfe", "method": "cancel", "token": "t", "data": {}}\n',
    "id over 256 bytes": b'{"id": "' + b"i" * 257 + b'", "method": "cancel", "token": "t", "data": {}}\n',
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_frame_gets_no_reply_and_ends_the_connection(
    spawn_client: Spawner, payload: bytes, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    client = await spawn_client(SDK_WORKER, env={"WUU_TEST_MARKER": str(marker), "PATH": "/usr/bin:/bin"})
    await initialize(client, tmp_path / "ws")
    pending = asyncio.create_task(client.request("execute", tool_request("sleep", ms=60_000)))
    await until((tmp_path / "ws" / "sleeping").exists, "the sleep handler to start")
    await client.send_bytes(payload)
    assert await wait_exit(client) == 0
    assert marker.read_text() == "closed"
    received = [data for direction, data in client.transcript.entries if direction == "<"]
    # Only the initialize reply and the drained request's `cancelled` reply: nothing answers the bad frame.
    assert len(received) == 2 and b'"error":"cancelled"' in received[1]
    assert code(await pending) == "cancelled"


async def test_a_frame_of_16_mib_plus_one_ends_the_connection_without_reply(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws")
    head = b'{"id": "big", "method": "execute", "token": "' + worker.token.encode() + b'", "data": {"pad": "'
    tail = b'"}}\n'
    frame = head + b"p" * (16 * 1024 * 1024 + 1 - len(head) - len(tail)) + tail
    assert len(frame) == 16 * 1024 * 1024 + 1
    await worker.send_bytes(frame)
    assert await wait_exit(worker) == 0
    assert (tmp_path / "ws" / "closed").exists()
    assert len([d for direction, d in worker.transcript.entries if direction == "<"]) == 1


async def test_a_frame_of_exactly_16_mib_is_accepted(worker: WorkerClient, tmp_path: Path) -> None:
    await initialize(worker, tmp_path / "ws")
    head = b'{"id": "big", "method": "execute", "token": "' + worker.token.encode() + b'", "data": {"pad": "'
    tail = b'"}}\n'
    frame = head + b"p" * (16 * 1024 * 1024 - len(head) - len(tail)) + tail
    waiter = worker.expect_reply("big")
    await worker.send_bytes(frame)
    assert code(await asyncio.wait_for(waiter, DEADLINE)) == "invalid_request"


async def test_output_failure_ends_the_connection_while_input_is_blocked(
    worker: WorkerClient, tmp_path: Path
) -> None:
    await initialize(worker, tmp_path / "ws")
    assert worker.process is not None and worker.process.stdout is not None
    # Stop reading the worker's output: its stdout pipe loses its reader while its stdin stays open.
    transport = worker.process._transport.get_pipe_transport(1)  # type: ignore[attr-defined]
    transport.close()
    assert await wait_exit(worker) == 0
    assert (tmp_path / "ws" / "closed").exists()


async def test_a_cleanup_failure_is_reported(spawn_client: Spawner, tmp_path: Path) -> None:
    client = await spawn_client(SDK_WORKER, env={"WUU_TEST_CLOSE_FAILS": "1", "PATH": "/usr/bin:/bin"})
    await initialize(client, tmp_path / "ws")
    outcome = await client.close(budget=DEADLINE)
    assert outcome.returncode == 1
    assert b"cleanup error: cleanup failed" in outcome.stderr
