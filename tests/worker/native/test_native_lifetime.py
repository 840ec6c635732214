"""The end of the connection on the native worker: EOF stops every process tree and running command, and
the worker exits cleanly.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.helpers import (
    DEADLINE,
    PLAIN_TREE,
    SESSION_LEAVER,
    STUBBORN_TREE,
    alive,
    assert_gone,
    code,
    lines,
    own_session,
    pid_from_file,
    run_tool,
    start,
    wire_events,
)
from wuu.worker.client import WorkerClient


async def test_eof_stops_every_process_tree_and_the_worker_exits_cleanly(worker: WorkerClient) -> None:
    pids: list[int] = []
    ids = []
    for argv in (PLAIN_TREE, STUBBORN_TREE):
        record = await start(worker, argv)
        ids.append(record["id"])
        pids += [int(line) for line in await lines(worker, record["id"], 2)]
    assert all(alive(pid) for pid in pids)
    outcome = await worker.close(budget=DEADLINE)
    assert outcome.returncode == 0 and not outcome.killed, outcome
    await assert_gone(*pids)
    for process_id in ids:
        events = [(e["Type"], e["Cause"]) for e in wire_events(worker, process_id)]
        assert events == [("started", "start"), ("stopped", "shutdown")], process_id


async def test_eof_cancels_a_running_exec_command_and_ends_its_tree(worker: WorkerClient, root: Path) -> None:
    pending = asyncio.create_task(
        run_tool(worker, "exec_command", argv=["sh", "-c", "echo $$ > pid.txt; exec sleep 1000"])
    )
    pid = await pid_from_file(root / "pid.txt", pending)
    outcome = await worker.close(budget=DEADLINE)
    assert outcome.returncode == 0 and not outcome.killed, outcome
    assert code(await pending) == "cancelled"
    await assert_gone(pid)


# --- descendants that left the process group (a bug found by these tests, now fixed) ----------------------


async def test_eof_ends_descendants_that_left_the_process_group(worker: WorkerClient) -> None:
    record = await start(worker, SESSION_LEAVER)
    (line,) = await lines(worker, record["id"], 1)
    pid = int(line)
    try:
        await own_session(pid)
        outcome = await worker.close(budget=DEADLINE)
        assert outcome.returncode == 0 and not outcome.killed, outcome
        await assert_gone(pid, timeout_s=3)
    finally:
        if alive(pid):
            os.kill(pid, 9)
