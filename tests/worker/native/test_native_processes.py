"""Background processes on the native worker: process/start, list, get and stop, their records and their
events.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    DEADLINE,
    PLAIN_TREE,
    SECOND_NS,
    SESSION_LEAVER,
    STUBBORN_TREE,
    alive,
    assert_gone,
    check_record,
    code,
    lines,
    ok,
    own_session,
    same_path,
    start,
    until,
    wait_ended,
    wire_events,
)
from wuu.generated.models import ProcessEvent, ProcessEventType
from wuu.worker.client import WorkerClient


async def events_until_end(client: WorkerClient, process_id: str) -> list[ProcessEvent]:
    """The process's events up to its first terminal one, plus any that follow within a round trip."""
    found: list[ProcessEvent] = []
    events = client.events()
    async with asyncio.timeout(DEADLINE):
        while not found or found[-1].type is ProcessEventType.STARTED:
            event = await anext(events)
            if event.process.id == process_id:
                found.append(event)
    # A second terminal event sent before this round trip's reply would be queued by now.
    ok(await client.request("process/list", {}))
    found += [event for event in client.pending_events() if event.process.id == process_id]
    return found


async def test_process_records_are_snake_case_with_rfc3339_timestamps(
    worker: WorkerClient, root: Path
) -> None:
    record = await start(worker, ["sh", "-c", "echo hi"], operation_id="op-1")
    check_record(record)
    assert record["operation_id"] == "op-1"
    assert record["argv"] == ["sh", "-c", "echo hi"]
    assert same_path(record["cwd"], root) and os.path.isabs(record["cwd"])
    ended = await wait_ended(worker, record["id"])
    check_record(ended)
    assert ended["status"] == "exited"
    assert ended["exit_code"] == 0 and ended["signal"] is None
    assert ended["output_bytes"] == 3
    assert ended["operation_id"] == "op-1"


async def test_a_record_without_operation_id_omits_it(worker: WorkerClient) -> None:
    record = await start(worker, ["true"])
    assert "operation_id" not in record
    check_record(record)


async def test_process_list_holds_this_sessions_processes_in_start_order(worker: WorkerClient) -> None:
    started = [await start(worker, ["sh", "-c", f"exit {n}"], operation_id=f"op-{n}") for n in range(3)]
    listed = ok(await worker.request("process/list", {}))
    assert set(listed) == {"processes"}
    records = listed["processes"]
    assert [r["id"] for r in records] == [r["id"] for r in started]
    assert len({r["id"] for r in records}) == 3
    assert [r["operation_id"] for r in records] == ["op-0", "op-1", "op-2"]
    for record in records:
        check_record(record)


async def test_a_fresh_connection_lists_no_processes(worker: WorkerClient) -> None:
    assert ok(await worker.request("process/list", {})) == {"processes": []}


@pytest.mark.parametrize(
    ("method", "data"),
    [
        ("process/get", {"id": "p-unknown"}),
        ("process/stop", {"id": "p-unknown"}),
        ("process/read", {"Process": "p-unknown"}),
        ("process/write", {"id": "p-unknown", "data": "aGk="}),
    ],
)
async def test_an_unknown_process_id_gets_not_found(
    worker: WorkerClient, method: str, data: dict[str, Any]
) -> None:
    assert code(await worker.request(method, data)) == "not_found"


async def test_process_stop_kills_a_grandchild_that_ignores_term(worker: WorkerClient) -> None:
    record = await start(worker, STUBBORN_TREE)
    grandchild, shell = (int(line) for line in await lines(worker, record["id"], 2))
    assert alive(grandchild) and alive(shell)
    stopped = ok(await worker.request("process/stop", {"id": record["id"], "grace_ms": 200}))
    check_record(stopped)
    assert stopped["status"] == "stopped"
    assert stopped["exit_code"] is None and stopped["signal"] == "KILL"
    await assert_gone(grandchild, shell)


# Leaves its process group for one of its own (in the same session), writes its pid, and sleeps.
GROUP_LEAVER = """
import os, time
os.setpgid(0, 0)
with open("pid.txt", "w") as pid_file:
    pid_file.write(f"{os.getpid()}\\n")
time.sleep(1000)
"""


async def test_process_stop_ends_a_descendant_that_left_the_group_and_lost_its_parent(
    worker: WorkerClient, root: Path
) -> None:
    (root / "leaver.py").write_text(GROUP_LEAVER)
    # The subshell ends at once: the leaver's parent is gone, and only its session still tells where it is.
    record = await start(worker, ["sh", "-c", f"({sys.executable} leaver.py &); sleep 1000"])
    pid_file = root / "pid.txt"
    await until(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"), "the leaver's pid")
    stopped = ok(await worker.request("process/stop", {"id": record["id"], "grace_ms": 200}))
    assert stopped["status"] == "stopped"
    assert not alive(int(pid_file.read_text()))


async def test_process_stop_with_term_ends_a_process_that_honours_it(worker: WorkerClient) -> None:
    record = await start(worker, ["sleep", "1000"])
    stopped = ok(
        await worker.request("process/stop", {"id": record["id"], "signal": "TERM", "grace_ms": 10_000})
    )
    assert stopped["status"] == "stopped" and stopped["signal"] == "TERM" and stopped["exit_code"] is None
    assert stopped["duration_ns"] < 10 * SECOND_NS


async def test_a_program_that_cannot_start_has_a_failed_record_and_only_a_failed_event(
    worker: WorkerClient,
) -> None:
    record = await start(worker, ["no-such-program-wuu"])
    assert record["status"] == "failed"
    check_record(record)
    events = await events_until_end(worker, record["id"])
    assert [(e.type.value, e.cause.value) for e in events] == [("failed", "error")]


async def test_process_stop_of_an_ended_process_returns_its_record_unchanged(worker: WorkerClient) -> None:
    record = await start(worker, ["sh", "-c", "exit 4"])
    ended = await wait_ended(worker, record["id"])
    again = ok(await worker.request("process/stop", {"id": record["id"]}))
    assert again == ended


async def test_process_timeout_stops_the_tree(worker: WorkerClient) -> None:
    record = await start(worker, PLAIN_TREE, timeout_ms=300)
    grandchild, shell = (int(line) for line in await lines(worker, record["id"], 2))
    ended = await wait_ended(worker, record["id"])
    assert ended["status"] == "stopped"
    await assert_gone(grandchild, shell)


SCENARIOS = {
    "exit": (["sh", "-c", "exit 0"], {}, None, ("exited", "exit")),
    "stop_request": (["sleep", "1000"], {}, "stop", ("stopped", "stop_request")),
    "timeout": (["sleep", "1000"], {"timeout_ms": 200}, None, ("stopped", "timeout")),
    "signal": (["sh", "-c", "kill -KILL $$"], {}, None, ("exited", "signal")),
}


@pytest.mark.parametrize(("argv", "params", "action", "terminal"), SCENARIOS.values(), ids=SCENARIOS.keys())
async def test_process_events_are_started_then_exactly_one_terminal_event(
    worker: WorkerClient,
    argv: list[str],
    params: dict[str, Any],
    action: str | None,
    terminal: tuple[str, str],
) -> None:
    record = await start(worker, argv, **params)
    if action == "stop":
        ok(await worker.request("process/stop", {"id": record["id"], "signal": "KILL"}))
    events = await events_until_end(worker, record["id"])
    assert [(e.type.value, e.cause.value) for e in events] == [("started", "start"), terminal]
    # On the wire: Go casing for the event, snake_case for the record inside it.
    raw = wire_events(worker, record["id"])
    assert [(e["Type"], e["Cause"]) for e in raw] == [("started", "start"), terminal]
    for event in raw:
        assert set(event) == {"Type", "Cause", "Process"}
        check_record(event["Process"])
    assert raw[-1]["Process"]["status"] == terminal[0]
    received = b"".join(data for direction, data in worker.transcript.entries if direction == "<")
    assert b'"Type":"started"' in received.replace(b" ", b"")


# --- descendants that left the process group (a bug found by these tests, now fixed) ----------------------


async def test_process_stop_ends_descendants_that_left_the_process_group(worker: WorkerClient) -> None:
    record = await start(worker, SESSION_LEAVER)
    (line,) = await lines(worker, record["id"], 1)
    pid = int(line)
    try:
        await own_session(pid)
        stopped = ok(await worker.request("process/stop", {"id": record["id"], "grace_ms": 200}))
        assert stopped["status"] == "stopped"
        await assert_gone(pid, timeout_s=3)
    finally:
        if alive(pid):
            os.kill(pid, 9)
