"""The native worker's process registry (wuu.worker.native.processes), with real processes (no mocks)."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    DEADLINE,
    MINIMAL_ENV,
    READ_RESULT_KEYS,
    RFC3339,
    SECOND_NS,
    SESSION,
    STUBBORN_TREE,
    alive,
    assert_gone,
    children,
    parent,
    suspended,
    until,
)
from wuu.generated.catalog import WORKER_MIN_RETAINED_OUTPUT_BYTES
from wuu.generated.models import (
    ErrorCode,
    ExecutionProcessV4,
    ProcessEvent,
    ProcessEventCause,
    ProcessEventType,
    ProcessReadParams,
    ProcessReadResult,
    ProcessSignal,
    ProcessStartParams,
    ProcessStatus,
)
from wuu.worker.errors import WorkerError
from wuu.worker.native.processes import ProcessRegistry
from wuu.worker.native.spawner import Spawner


class Worker:
    """A registry plus the events it emitted."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.events: list[ProcessEvent] = []
        self.registry = ProcessRegistry(SESSION, self.events.append)

    async def start(self, *argv: str, **params: Any) -> ExecutionProcessV4:
        """Start `argv` in `standard` with `params` added; its record."""
        start = ProcessStartParams.model_validate(
            {"argv": list(argv), "permission_mode": "standard", **params}
        )
        return await self.registry.start(
            start, argv=list(argv), cwd=self.cwd, env=MINIMAL_ENV, spawner=Spawner()
        )

    async def read(self, process_id: str, **params: int) -> ProcessReadResult:
        """One `process/read` with `params` (Go-cased)."""
        return await self.registry.read(ProcessReadParams.model_validate({"Process": process_id, **params}))

    async def output_until_end(
        self, process_id: str, timeout_s: float = 10.0
    ) -> tuple[bytes, ExecutionProcessV4]:
        """Every byte of a process's output, read with long polls until its record has ended."""
        deadline = time.monotonic() + timeout_s
        data, offset = b"", 0
        while time.monotonic() < deadline:
            result = await self.read(process_id, OffsetBytes=offset, Wait=SECOND_NS // 2, MaxBytes=8 << 20)
            data += base64.b64decode(result.output)
            offset = result.end_offset
            if result.process.status is not ProcessStatus.RUNNING:
                return data, result.process
        raise AssertionError(f"process {process_id} still running after {timeout_s} s")

    async def first_line(self, process_id: str) -> bytes:
        """Wait for and return the first line of a process's output."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            result = await self.read(process_id, Wait=SECOND_NS // 2)
            data = base64.b64decode(result.output)
            if b"\n" in data:
                return data.split(b"\n", 1)[0]
        raise AssertionError("no line of output")

    def events_of(self, process_id: str) -> list[tuple[ProcessEventType, ProcessEventCause]]:
        """The type and cause of every event the registry emitted for one process, in order."""
        return [(e.type, e.cause) for e in self.events if e.process.id == process_id]


@pytest.fixture
async def worker(tmp_path: Path) -> AsyncIterator[Worker]:
    """A registry whose processes run in tmp_path, closed (every process stopped) after the test.

    In this module it stands for the worker process of conftest.py.
    """
    w = Worker(tmp_path)
    yield w
    await w.registry.close()


def python(code: str) -> tuple[str, str, str]:
    """argv running `code` with this Python."""
    return (sys.executable, "-c", code)


# --- records, listing, events -----------------------------------------------------------------------------


async def test_start_list_get_and_records(worker: Worker) -> None:
    first = await worker.start("sh", "-c", "exit 3", operation_id="op_one")
    second = await worker.start("sleep", "30")
    assert first.id != second.id
    assert first.operation_id == "op_one"
    assert second.operation_id is None and "operation_id" not in second.to_wire()
    for record in (first, second):
        assert record.root_thread_id == SESSION
        assert record.cwd == str(worker.cwd) and Path(record.cwd).is_absolute()
        assert record.status is ProcessStatus.RUNNING
        assert record.pid is not None and record.pid > 1
        assert RFC3339.match(record.started_at)
        assert record.ended_at is None and record.duration_ns is None and record.exit_code is None
    assert second.argv == ["sleep", "30"]
    assert [p.id for p in worker.registry.list()] == [first.id, second.id]
    assert worker.registry.get(second.id).status is ProcessStatus.RUNNING

    _, ended = await worker.output_until_end(first.id)
    assert ended.status is ProcessStatus.EXITED
    assert ended.exit_code == 3 and ended.signal is None
    assert ended.ended_at is not None and RFC3339.match(ended.ended_at)
    assert ended.duration_ns is not None and ended.duration_ns >= 0
    assert ended.operation_id == "op_one"
    assert worker.registry.get(first.id) == ended
    assert [p.operation_id for p in worker.registry.list()] == ["op_one", None]


async def test_events_started_first_then_exactly_one_terminal(worker: Worker) -> None:
    ran = await worker.start("true")
    killed_itself = await worker.start("sh", "-c", "kill -TERM $$")
    stopped = await worker.start("sleep", "30")
    await worker.output_until_end(ran.id)
    _, by_signal = await worker.output_until_end(killed_itself.id)
    await worker.registry.stop(stopped.id, ProcessSignal.TERM, 5000)
    assert worker.events_of(ran.id) == [
        (ProcessEventType.STARTED, ProcessEventCause.START),
        (ProcessEventType.EXITED, ProcessEventCause.EXIT),
    ]
    # A signal the worker did not send: the process ended by itself.
    assert worker.events_of(killed_itself.id) == [
        (ProcessEventType.STARTED, ProcessEventCause.START),
        (ProcessEventType.EXITED, ProcessEventCause.SIGNAL),
    ]
    assert by_signal.status is ProcessStatus.EXITED
    assert by_signal.signal == "TERM" and by_signal.exit_code is None
    assert worker.events_of(stopped.id) == [
        (ProcessEventType.STARTED, ProcessEventCause.START),
        (ProcessEventType.STOPPED, ProcessEventCause.STOP_REQUEST),
    ]
    terminal = [e for e in worker.events if e.process.id == ran.id][-1]
    assert terminal.process.status is ProcessStatus.EXITED and terminal.process.exit_code == 0
    # Events serialize with Go casing.
    assert set(terminal.to_wire()) == {"Type", "Cause", "Process"}


async def test_terminal_event_comes_after_all_output(worker: Worker) -> None:
    seen: list[tuple[int, ProcessStatus]] = []
    records: dict[str, ExecutionProcessV4] = {}

    def emit(event: ProcessEvent) -> None:
        records[event.process.id] = event.process
        seen.append((event.process.output_bytes, event.process.status))

    registry = ProcessRegistry(SESSION, emit)
    start = ProcessStartParams.model_validate({"argv": ["x"], "permission_mode": "standard"})
    # The grandchild keeps the output pipe after the shell exits and writes more.
    argv = ["sh", "-c", "(sleep 0.3; printf late) & printf early"]
    process = await registry.start(start, argv=argv, cwd=Path("/"), env=MINIMAL_ENV, spawner=Spawner())
    await until(lambda: records[process.id].status is not ProcessStatus.RUNNING, "the terminal event", 10)
    assert seen[-1] == (len(b"earlylate"), ProcessStatus.EXITED)
    await registry.close()


async def test_program_not_found_is_a_failed_record(worker: Worker) -> None:
    record = await worker.start("/nonexistent/program", "arg", operation_id="op_missing")
    assert record.status is ProcessStatus.FAILED
    assert record.pid is None and "pid" not in record.to_wire()
    assert record.exit_code is None and record.signal is None
    assert record.ended_at is not None and record.duration_ns is not None
    assert record.operation_id == "op_missing"
    assert worker.events_of(record.id) == [(ProcessEventType.FAILED, ProcessEventCause.ERROR)]
    assert worker.registry.list() == [record]
    not_executable = worker.cwd / "script"
    not_executable.write_text("#!/bin/sh\n")
    assert (await worker.start(str(not_executable))).status is ProcessStatus.FAILED
    # Stopping or reading it is harmless.
    assert await worker.registry.stop(record.id, ProcessSignal.TERM, 0) == record
    result = await worker.read(record.id, Wait=5 * SECOND_NS)
    assert result.output == "" and not result.timed_out


async def test_unknown_id_is_not_found(worker: Worker) -> None:
    calls: list[Awaitable[object]] = [
        worker.registry.stop("p404", ProcessSignal.KILL, 0),
        worker.read("p404"),
        worker.registry.write("p404", b"x", False),
    ]
    with pytest.raises(WorkerError) as caught:
        worker.registry.get("p404")
    assert caught.value.code is ErrorCode.NOT_FOUND
    for call in calls:
        with pytest.raises(WorkerError) as caught:
            await call
        assert caught.value.code is ErrorCode.NOT_FOUND


# --- output -----------------------------------------------------------------------------------------------


async def test_stdout_and_stderr_share_one_stream_in_order(worker: Worker) -> None:
    process = await worker.start("sh", "-c", "echo 1; echo 2 >&2; echo 3; echo 4 >&2; echo 5")
    data, ended = await worker.output_until_end(process.id)
    assert data == b"1\n2\n3\n4\n5\n"
    assert ended.output_bytes == len(data)


async def test_read_offsets_and_total(worker: Worker) -> None:
    process = await worker.start("printf", "abcdefghij")
    await worker.output_until_end(process.id)
    middle = await worker.read(process.id, OffsetBytes=3, MaxBytes=4)
    assert base64.b64decode(middle.output) == b"defg"
    assert (middle.start_offset, middle.end_offset, middle.total_bytes) == (3, 7, 10)
    assert not middle.truncated and not middle.timed_out
    rest = await worker.read(process.id, OffsetBytes=middle.end_offset)
    assert base64.b64decode(rest.output) == b"hij" and rest.end_offset == 10
    # At or past the end: nothing, and an ended process answers at once even with a Wait.
    for offset in (10, 15):
        empty = await worker.read(process.id, OffsetBytes=offset, Wait=10 * SECOND_NS)
        assert empty.output == "" and empty.start_offset == empty.end_offset == offset
        assert not empty.timed_out and empty.duration < SECOND_NS
    assert middle.process.output_bytes == 10
    assert set(middle.to_wire()) == READ_RESULT_KEYS


async def test_read_below_retained_start_is_truncated(tmp_path: Path) -> None:
    worker = Worker(tmp_path)
    retain, size = WORKER_MIN_RETAINED_OUTPUT_BYTES, WORKER_MIN_RETAINED_OUTPUT_BYTES + 20000
    expected = bytes(65 + i % 26 for i in range(size))
    process = await worker.start(
        *python(f"import sys; sys.stdout.write(''.join(chr(65 + i % 26) for i in range({size})))"),
        output_retention_bytes=retain,
    )
    _, ended = await worker.output_until_end(process.id)
    result = await worker.read(process.id, OffsetBytes=0, MaxBytes=1 << 20)
    assert result.truncated
    assert result.total_bytes == ended.output_bytes == size
    assert result.start_offset == size - retain
    assert base64.b64decode(result.output) == expected[-retain:]
    # Within the retained tail nothing is truncated.
    inside = await worker.read(process.id, OffsetBytes=size - 1000, MaxBytes=100)
    assert not inside.truncated and base64.b64decode(inside.output) == expected[size - 1000 : size - 900]
    await worker.registry.close()


async def test_long_poll_returns_bytes_that_arrive(worker: Worker) -> None:
    process = await worker.start("sh", "-c", "sleep 0.3; echo hi; sleep 30")
    result = await worker.read(process.id, Wait=2 * SECOND_NS)
    assert base64.b64decode(result.output) == b"hi\n"
    assert not result.timed_out
    assert 0.2 * SECOND_NS < result.duration < 2 * SECOND_NS
    assert result.process.status is ProcessStatus.RUNNING


async def test_long_poll_on_a_silent_process_times_out(worker: Worker) -> None:
    process = await worker.start("sleep", "30")
    result = await worker.read(process.id, Wait=SECOND_NS // 5)
    assert result.timed_out
    assert result.output == "" and result.start_offset == result.end_offset == 0
    assert result.duration >= SECOND_NS // 5
    # Without Wait the read answers at once and does not time out.
    assert not (await worker.read(process.id)).timed_out


async def test_long_poll_ends_without_timeout_when_the_process_ends(worker: Worker) -> None:
    process = await worker.start("sleep", "0.2")
    result = await worker.read(process.id, Wait=10 * SECOND_NS)
    assert not result.timed_out and result.output == ""
    assert result.process.status is ProcessStatus.EXITED
    assert result.duration < 5 * SECOND_NS


async def test_min_dwell_collects_bytes_that_follow_the_first(worker: Worker) -> None:
    script = "sleep 0.2; printf a; sleep 0.2; printf b; sleep 30"
    eager = await worker.start("sh", "-c", script)
    dwelling = await worker.start("sh", "-c", script)
    first = await worker.read(eager.id, Wait=5 * SECOND_NS)
    collected = await worker.read(dwelling.id, Wait=5 * SECOND_NS, MinDwell=SECOND_NS)
    assert base64.b64decode(first.output) == b"a"
    assert base64.b64decode(collected.output) == b"ab"
    assert not collected.timed_out
    # MaxBytes cuts the dwell short.
    bounded = await worker.start("sh", "-c", "printf abc; sleep 30")
    started = time.monotonic()
    short = await worker.read(bounded.id, Wait=5 * SECOND_NS, MinDwell=10 * SECOND_NS, MaxBytes=2)
    assert base64.b64decode(short.output) == b"ab"
    assert time.monotonic() - started < 5


async def test_cancelled_read_leaves_the_registry_usable(worker: Worker) -> None:
    process = await worker.start("sh", "-c", "read line; echo got $line; sleep 30", stdin=True)
    waiting = asyncio.create_task(worker.read(process.id, Wait=30 * SECOND_NS))
    other = asyncio.create_task(worker.read(process.id, Wait=30 * SECOND_NS))
    await until(lambda: suspended(waiting, other), "both reads to wait for output")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await worker.registry.write(process.id, b"x\n", False)
    result = await asyncio.wait_for(other, 10)
    assert base64.b64decode(result.output) == b"got x\n"


# --- stdin ------------------------------------------------------------------------------------------------


async def test_write_feeds_stdin_and_close_ends_it(worker: Worker) -> None:
    process = await worker.start("cat", stdin=True)
    await worker.registry.write(process.id, b"hello\n", False)
    result = await worker.read(process.id, Wait=5 * SECOND_NS)
    assert base64.b64decode(result.output) == b"hello\n"
    await worker.registry.write(process.id, b"bye\n", True)
    data, ended = await worker.output_until_end(process.id)
    assert data == b"hello\nbye\n"
    assert ended.status is ProcessStatus.EXITED and ended.exit_code == 0
    with pytest.raises(WorkerError) as caught:
        await worker.registry.write(process.id, b"more", False)
    assert caught.value.code is ErrorCode.INVALID_REQUEST


async def test_write_refused_without_stdin(worker: Worker) -> None:
    process = await worker.start("cat")
    with pytest.raises(WorkerError) as caught:
        await worker.registry.write(process.id, b"x", False)
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    # Its stdin is /dev/null: cat ends at once.
    _, ended = await worker.output_until_end(process.id)
    assert ended.exit_code == 0


async def test_large_write_waits_for_the_reader(worker: Worker) -> None:
    process = await worker.start(
        *python("import sys; sys.stdout.write(str(len(sys.stdin.buffer.read())))"), stdin=True
    )
    await worker.registry.write(process.id, b"z" * (4 << 20), True)
    data, _ = await worker.output_until_end(process.id)
    assert data == str(4 << 20).encode()


# --- stopping ---------------------------------------------------------------------------------------------


async def test_stop_ends_a_tree_whose_grandchild_ignores_term(worker: Worker) -> None:
    process = await worker.start(*STUBBORN_TREE)
    grandchild = int(await worker.first_line(process.id))
    assert alive(grandchild)
    started = time.monotonic()
    stopped = await worker.registry.stop(process.id, ProcessSignal.TERM, 300)
    assert time.monotonic() - started >= 0.3
    assert stopped.status is ProcessStatus.STOPPED
    assert stopped.signal == "KILL" and stopped.exit_code is None
    assert stopped.ended_at is not None
    await assert_gone(grandchild, timeout_s=5)
    assert process.pid is not None
    await assert_gone(process.pid, timeout_s=5)
    assert worker.events_of(process.id)[-1] == (ProcessEventType.STOPPED, ProcessEventCause.STOP_REQUEST)
    # Stopping an ended process returns its record unchanged, with no new event.
    assert await worker.registry.stop(process.id, ProcessSignal.KILL, 0) == stopped
    assert len(worker.events_of(process.id)) == 2


async def test_stop_with_term_that_is_honoured(worker: Worker) -> None:
    process = await worker.start("sleep", "30")
    stopped = await worker.registry.stop(process.id, ProcessSignal.TERM, 5000)
    assert stopped.status is ProcessStatus.STOPPED and stopped.signal == "TERM"


async def test_cancelled_stop_still_finishes(worker: Worker) -> None:
    # A tree that outlives TERM, as STUBBORN_TREE does, but whose shell says when TERM has come: it prints
    # the grandchild's pid, then `term` once the stop has begun.
    tree = "trap 'echo term' TERM; (trap '' TERM; exec sleep 1000) & echo $!; wait; wait"
    process = await worker.start("sh", "-c", tree)
    first = await worker.first_line(process.id)
    grandchild = int(first)
    stopping = asyncio.create_task(worker.registry.stop(process.id, ProcessSignal.TERM, 2000))
    heard = await worker.read(process.id, OffsetBytes=len(first) + 1, Wait=int(DEADLINE * SECOND_NS))
    assert base64.b64decode(heard.output) == b"term\n", heard
    # The cancel comes during the grace, between TERM and KILL.
    assert not stopping.done(), "the stop ended within its grace"
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    _, ended = await worker.output_until_end(process.id)
    assert ended.status is ProcessStatus.STOPPED and ended.signal == "KILL"
    await assert_gone(grandchild, timeout_s=5)


async def test_stop_does_not_wait_for_a_pipe_held_outside_the_group(worker: Worker) -> None:
    # The subshell starts the holder in a session of its own and exits, so the holder is neither in the
    # command's session nor its descendant: outside the tree a stop ends, it keeps the output pipe open.
    # The holder names itself: setsid forks when it leads its group, and then `$!` is not the holder.
    holder = "setsid sh -c 'echo $$; exec sleep 1000'"
    process = await worker.start("sh", "-c", f"({holder} &); sleep 1000")
    escaped = int(await worker.first_line(process.id))
    try:
        # Orphaned: its parent is no longer the subshell, a child of the command.
        await until(lambda: parent(escaped) not in children(process.pid), "the holder's orphaning")
        started = time.monotonic()
        stopped = await worker.registry.stop(process.id, ProcessSignal.TERM, 5000)
        assert time.monotonic() - started < 5
        assert stopped.status is ProcessStatus.STOPPED
        assert worker.events_of(process.id)[-1] == (ProcessEventType.STOPPED, ProcessEventCause.STOP_REQUEST)
        assert alive(escaped), "the stop ended a process outside the tree"
    finally:
        os.kill(escaped, signal.SIGKILL)


async def test_timeout_stops_the_process(worker: Worker) -> None:
    process = await worker.start("sleep", "30", timeout_ms=200)
    _, ended = await worker.output_until_end(process.id)
    assert ended.status is ProcessStatus.STOPPED and ended.signal == "TERM"
    assert ended.duration_ns is not None and ended.duration_ns >= 200_000_000
    assert worker.events_of(process.id) == [
        (ProcessEventType.STARTED, ProcessEventCause.START),
        (ProcessEventType.STOPPED, ProcessEventCause.TIMEOUT),
    ]


async def test_close_leaves_no_process_behind(tmp_path: Path) -> None:
    worker = Worker(tmp_path)
    stubborn = await worker.start(*STUBBORN_TREE)
    grandchild = int(await worker.first_line(stubborn.id))
    plain = await worker.start("sleep", "30")
    # A leftover of an ended process, which closed its output: the tree is still owned.
    leftover = await worker.start("sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!")
    leftover_pid = int(await worker.first_line(leftover.id))
    await worker.output_until_end(leftover.id)
    assert alive(leftover_pid)
    await worker.registry.close()
    pids = [grandchild, leftover_pid, stubborn.pid, plain.pid]
    for pid in pids:
        assert pid is not None
        await assert_gone(pid, timeout_s=5)
    for process in (stubborn, plain):
        assert worker.registry.get(process.id).status is ProcessStatus.STOPPED
        assert worker.events_of(process.id)[-1] == (ProcessEventType.STOPPED, ProcessEventCause.SHUTDOWN)
    assert worker.registry.get(leftover.id).status is ProcessStatus.EXITED
    with pytest.raises(WorkerError):
        await worker.start("true")
