"""The background processes of one worker (`process/*`) and run-to-completion commands (`exec_command`).

Every process runs in a session of its own, at the root of its tree (`trees`): stopping it, its timeout
and the worker's cleanup signal the tree (TERM, a grace period, then KILL) and wait until none of it is
left. stdout and stderr share one pipe, so the combined stream keeps the order the process wrote
it in. A record ends (and its one terminal event goes out) only once the process is reaped and its output
pipe has closed, so a reader that sees an ended record has seen every byte.

The caller resolves argv, cwd and the environment and supplies the spawner (confined or not); this module only
runs them.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wuu.generated.plain import (
    ErrorCode,
    ExecCommandMetadata,
    ExecutionProcessV4,
    ProcessEvent,
    ProcessEventCause,
    ProcessEventType,
    ProcessOutputFlow,
    ProcessReadParams,
    ProcessReadResult,
    ProcessSignal,
    ProcessStartParams,
    ProcessStatus,
)
from wuu.worker.errors import WorkerError
from wuu.worker.native.children import READ_BYTES, ChildTransport, despite_cancellation, spawn
from wuu.worker.native.output import OutputBuffer
from wuu.worker.native.spawner import Spawner
from wuu.worker.native.trees import Tree, now_tick, running

_log = logging.getLogger(__name__)

# TERM-to-KILL grace of timeouts and of the worker's cleanup: room for a clean exit, yet well inside the
# native shutdown budget (7 s).
_SHORT_GRACE_S = 1.0
# Once a tree is gone, how long its output pipe may stay open, held by a process outside it (one whose
# parent had ended, for a background process), before the worker stops reading it.
_ORPHAN_PIPE_S = 0.5
# After an `exec_command` program exits, how long the rest of its tree may keep writing its output before
# it is killed.
_COMMAND_DRAIN_S = 1.0


class ProcessRegistry:
    """The processes of one worker and one session: start, inspect, read, write, stop, and reap them all.

    Handlers may call it concurrently. Every wait is cancellable; a stop, once begun, runs to its end in
    the background even when the request that asked for it is cancelled.
    """

    def __init__(self, session: str, emit: Callable[[ProcessEvent], None]) -> None:
        """`session` becomes every record's `root_thread_id`; `emit` publishes `process/event` notifications.
        Each process keeps its `output_retention_bytes` of output readable."""
        self._session = session
        self._emit = emit
        self._processes: dict[str, _Process] = {}  # in start order
        self._next_id = 1
        # Stops and timeouts in flight; close() waits for them.
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def start(
        self,
        params: ProcessStartParams,
        *,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        spawner: Spawner,
    ) -> ExecutionProcessV4:
        """Start a background process and return its record.

        `argv`, `cwd` and `env` are final (resolved by the caller); `params` supplies `operation_id`,
        `stdin`, `timeout_ms` and `output_retention_bytes`. A program that cannot be started (not found,
        not executable, a missing cwd, a sandbox that cannot be applied) is not an error: the process is
        recorded with status `failed`, gets a single `failed` event (cause `error`; it never started, so
        there is no `started` event), and that record is returned. Otherwise the `started` event is
        emitted before this returns.
        """
        if self._closed:
            raise WorkerError(ErrorCode.INTERNAL, "the worker is shutting down")
        loop = asyncio.get_running_loop()
        process = _Process(
            id=f"p{self._next_id}",
            session=self._session,
            operation_id=params.operation_id,
            argv=list(argv),
            cwd=os.fspath(cwd.absolute()),
            started_at=time.time_ns(),
            started_ns=time.monotonic_ns(),
            output=OutputBuffer(params.output_retention_bytes),
            done=loop.create_future(),
        )
        self._next_id += 1
        try:
            transport, pipes = await spawn(
                spawner,
                lambda: _Pipes(
                    process.output, wait_for_reader=params.output_flow is ProcessOutputFlow.WAIT_FOR_READER
                ),
                argv,
                cwd=cwd,
                env=env,
                stdin=params.stdin,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            _log.info("process %s (%s) could not start: %s", process.id, argv[0], exc)
            self._processes[process.id] = process
            self._end(
                process,
                ProcessStatus.FAILED,
                ProcessEventCause.ERROR,
                None,
                time.time_ns(),
                time.monotonic_ns(),
            )
            return process.record()
        process.transport, process.pipes, process.pid = transport, pipes, transport.get_pid()
        self._processes[process.id] = process
        # The supervisor first runs after this returns, so the `started` event still goes out first.
        process.supervisor = asyncio.create_task(self._supervise(process, transport, pipes))
        self._emit(_event(ProcessEventType.STARTED, ProcessEventCause.START, process.record()))
        if params.timeout_ms is not None:
            process.timer = loop.call_later(params.timeout_ms / 1000, self._on_timeout, process)
        if self._closed:
            # close() ran while this process was being spawned and could not see it.
            self._claim_stop(process, ProcessEventCause.SHUTDOWN)
            await self._terminate(process, signal.SIGKILL, 0.0)
        return process.record()

    def list(self) -> list[ExecutionProcessV4]:
        """The records of this session's processes, running and ended, in start order."""
        return [process.record() for process in self._processes.values()]

    def get(self, process_id: str) -> ExecutionProcessV4:
        """One process's current record; `not_found` for an unknown id."""
        return self._lookup(process_id).record()

    async def read(self, params: ProcessReadParams) -> ProcessReadResult:
        """Read the combined output from `OffsetBytes` (`process/read`).

        With no byte past `OffsetBytes` while the process runs, wait up to `Wait` ns for one (`TimedOut`
        only if none came and the process still runs). Once there are bytes (already there or just
        arrived), keep collecting for up to `MinDwell` ns, until `MaxBytes` (at most half the retention)
        are there or the process ends. An ended process answers at once. Reading past the end of the
        stream answers no bytes at `OffsetBytes`.
        """
        began = time.monotonic_ns()
        process = self._lookup(params.process)
        output = process.output
        offset = params.offset_bytes
        timed_out = False
        if params.wait > 0 and output.total_bytes <= offset and not output.closed:
            timed_out = not await output.wait_total(offset + 1, params.wait / 1e9)
        if params.min_dwell > 0 and output.total_bytes > offset and not output.closed:
            # Never dwell for more than half the retention: waiting for bytes the buffer cannot keep would
            # make this very read lose the oldest of them (half leaves room for the next pipe chunks).
            wanted = max(offset, output.retained_start) + min(params.max_bytes, output.retain_bytes // 2)
            await output.wait_total(wanted, params.min_dwell / 1e9)
        start, data, truncated = output.read(offset, params.max_bytes)
        output.note_read(start + len(data))
        if process.pipes is not None:
            process.pipes.output_taken()
        return ProcessReadResult.model_validate(
            {
                "Process": process.record(),
                "Output": base64.b64encode(data).decode("ascii"),
                "StartOffset": start,
                "EndOffset": start + len(data),
                "TotalBytes": output.total_bytes,
                "Truncated": truncated,
                "TimedOut": timed_out,
                "Duration": time.monotonic_ns() - began,
            }
        )

    async def stop(self, process_id: str, signal_name: ProcessSignal, grace_ms: int) -> ExecutionProcessV4:
        """Stop a process and its whole tree (`process/stop`) and return the record once the tree is gone.

        `TERM` is followed by KILL after `grace_ms`; `KILL` is immediate. A running process ends `stopped`
        (cause `stop_request`); an ended one keeps its record, though members of its group that outlived it
        still get the signals. Cancelling the request does not interrupt the stop itself.
        """
        process = self._lookup(process_id)
        self._claim_stop(process, ProcessEventCause.STOP_REQUEST)
        first = signal.SIGKILL if signal_name is ProcessSignal.KILL else signal.SIGTERM
        task = self._track(self._terminate(process, first, grace_ms / 1000))
        # Half a stop (TERM sent, KILL never) would leave a tree that no longer matches its record.
        await asyncio.shield(task)
        await asyncio.shield(process.done)
        return process.record()

    async def write(self, process_id: str, data: bytes, close: bool) -> ExecutionProcessV4:
        """Write to a process's stdin (`process/write`), then close it if `close`; return the record.

        `invalid_request` if the process was started without `stdin: true` or its stdin is closed. Waits
        while the pipe's buffer is full (the process is not reading).
        """
        process = self._lookup(process_id)
        stdin = None if process.transport is None else process.transport.get_pipe_transport(0)
        if not isinstance(stdin, asyncio.WriteTransport) or stdin.is_closing() or process.pipes is None:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"process {process_id} has no open stdin")
        stdin.write(data)
        if close:
            stdin.close()  # after the buffered bytes are flushed
        else:
            await process.pipes.writable()
        return process.record()

    async def close(self) -> None:
        """Stop and reap every process tree this registry owns (TERM, a short grace, KILL); cause `shutdown`.

        Afterwards `start` is refused. Raises WorkerError(`internal`) naming the trees that could not be
        ended; the others are stopped and reaped all the same.
        """
        self._closed = True
        ended = [
            p
            for p in self._processes.values()
            if p.pipes is not None and p.pid is not None and not p.tree_gone and p.pipes.exited.done()
        ]
        left = {tree.leader for tree in running([Tree(p.pid) for p in ended if p.pid is not None])}
        for process in ended:
            process.tree_gone = process.pid not in left
        owned = [p for p in self._processes.values() if p.pipes is not None and not p.tree_gone]
        for process in owned:
            self._claim_stop(process, ProcessEventCause.SHUTDOWN)
        outcomes = await asyncio.gather(
            *(self._terminate(process, signal.SIGTERM, _SHORT_GRACE_S) for process in owned),
            return_exceptions=True,
        )
        failures = [str(outcome) for outcome in outcomes if isinstance(outcome, BaseException)]
        await asyncio.gather(
            *(process.done for process, outcome in zip(owned, outcomes, strict=True) if outcome is None)
        )
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if failures:
            raise WorkerError(ErrorCode.INTERNAL, "; ".join(failures))

    def _lookup(self, process_id: str) -> _Process:
        process = self._processes.get(process_id)
        if process is None:
            raise WorkerError(ErrorCode.NOT_FOUND, f"process {process_id}")
        return process

    def _claim_stop(self, process: _Process, cause: ProcessEventCause) -> None:
        # The first reason to signal a still-running process decides its terminal cause; a process that
        # ended before any signal from us ended by itself.
        if process.stop_cause is None and process.pipes is not None and not process.pipes.exited.done():
            process.stop_cause = cause

    def _on_timeout(self, process: _Process) -> None:
        self._claim_stop(process, ProcessEventCause.TIMEOUT)
        self._track(self._terminate(process, signal.SIGTERM, _SHORT_GRACE_S))

    def _track(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._untrack)
        return task

    def _untrack(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.warning("stopping a process tree failed: %s", task.exception())

    async def _terminate(self, process: _Process, first: signal.Signals, grace_s: float) -> None:
        """Signal the process's tree, KILL it after `grace_s`, and wait until none of it is left."""
        if process.pipes is None or process.transport is None or process.pid is None or process.tree_gone:
            return
        await Tree(process.pid).end(process.pipes.exited, first, grace_s)
        process.tree_gone = True
        done, _ = await asyncio.wait((process.pipes.drained,), timeout=_ORPHAN_PIPE_S)
        if not done:
            process.transport.close()  # ends the pipe, so the record can end

    async def _supervise(self, process: _Process, transport: ChildTransport, pipes: _Pipes) -> None:
        await pipes.exited
        ended_at, ended_ns = time.time_ns(), time.monotonic_ns()
        # The pipe closes when its last writer is gone: the process and every descendant that kept it.
        await pipes.drained
        transport.close()
        returncode = transport.get_returncode()
        if process.stop_cause is not None:
            cause = process.stop_cause
        elif returncode is not None and returncode < 0:
            cause = ProcessEventCause.SIGNAL
        else:
            cause = ProcessEventCause.EXIT
        status = ProcessStatus.EXITED if process.stop_cause is None else ProcessStatus.STOPPED
        # Whether something of its tree outlives it is looked at only when it matters (a stop, the close):
        # a look reads all of /proc, and a process's exit must not pay for it.
        self._end(process, status, cause, returncode, ended_at, ended_ns)

    def _end(
        self,
        process: _Process,
        status: ProcessStatus,
        cause: ProcessEventCause,
        returncode: int | None,
        ended_at: int,
        ended_ns: int,
    ) -> None:
        """Make the record final, close its output and publish its one terminal event."""
        process.status = status
        if returncode is not None:
            process.exit_code = returncode if returncode >= 0 else None
            process.signal = _signal_name(-returncode) if returncode < 0 else None
        process.ended_at = ended_at
        process.duration_ns = ended_ns - process.started_ns
        process.output.close()
        if process.timer is not None:
            process.timer.cancel()
        try:
            self._emit(_event(_TERMINAL_EVENTS[status], cause, process.record()))
        finally:
            process.done.set_result(None)


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """How an `exec_command` run ended, and the tail of its combined output."""

    output: bytes
    """The last `max_output_bytes` of the combined stdout+stderr stream."""
    total_bytes: int
    """Every byte the command wrote; more than `len(output)` when the output was cut."""
    exit_code: int | None
    """The exit status (127 or 126 for a program that could not start), or None when a signal ended
    the command or the sandbox could not be applied."""
    signal: str | None
    """The name of the signal that ended the command (`KILL`, `TERM`, ...), or None."""
    timed_out: bool
    """True when `timeout_ms` expired and the command's tree was killed."""
    duration_ns: int
    """Wall time from start to exit."""
    start_error: str | None = None
    """Why the program could not be started (not found, not executable, ...), or None if it ran."""

    @property
    def truncated(self) -> bool:
        """True when `output` holds only the tail of what the command wrote."""
        return self.total_bytes > len(self.output)

    def metadata(self) -> ExecCommandMetadata:
        """The `exec_command` result metadata."""
        return ExecCommandMetadata(
            exit_code=self.exit_code,
            signal=self.signal,
            timed_out=self.timed_out,
            duration_ns=self.duration_ns,
        )


async def run_command(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    spawner: Spawner,
    timeout_ms: int | None,
    max_output_bytes: int,
) -> CommandOutcome:
    """Run a command to completion for `exec_command` and return how it ended.

    stdin is /dev/null; stdout and stderr are combined and only their last `max_output_bytes` are kept.
    Nothing of the command's tree (`trees.Tree`, orphans that started since it did included) outlives the
    call. When the program exits, the rest of its tree may finish its output: while it holds the output
    pipe, for at most `_COMMAND_DRAIN_S` and never past `timeout_ms`; then it is killed. After `timeout_ms`
    the whole tree is killed (`timed_out`). On cancellation the tree gets TERM, then KILL after
    `_SHORT_GRACE_S`, and the CancelledError propagates only once the tree is gone, so that the request's
    terminal reply follows the end of its command (a cancel at EOF that comes on top does not cut that wait
    short). A program that cannot be started gives `start_error`, not an exception.
    """
    output = OutputBuffer(max_output_bytes)
    began = time.monotonic_ns()
    since = now_tick()  # before the spawn: whatever the command starts, starts at or after it
    try:
        transport, pipes = await spawn(spawner, lambda: _Pipes(output), argv, cwd=cwd, env=env, stdin=False)
    except (OSError, subprocess.SubprocessError) as exc:
        # As a shell reports it: 127 not found, 126 not executable; None when the sandbox could not be applied.
        code = 127 if isinstance(exc, FileNotFoundError) else 126 if isinstance(exc, OSError) else None
        return CommandOutcome(b"", 0, code, None, False, time.monotonic_ns() - began, start_error=str(exc))
    tree = Tree(transport.get_pid(), since)
    loop = asyncio.get_running_loop()
    deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
    tree_gone = False
    try:
        done, _ = await asyncio.wait(
            (pipes.exited,), timeout=None if deadline is None else deadline - loop.time()
        )
        timed_out = not done
        if not timed_out:
            drain = _COMMAND_DRAIN_S if deadline is None else min(_COMMAND_DRAIN_S, deadline - loop.time())
            if drain > 0:
                await asyncio.wait((pipes.drained,), timeout=drain)
        await tree.end(pipes.exited, signal.SIGKILL, 0.0)
        tree_gone = True
        await asyncio.wait((pipes.drained,), timeout=_ORPHAN_PIPE_S)
    except asyncio.CancelledError:
        # The command may clean up on TERM, as a stopped process may: its handler drains meanwhile.
        await despite_cancellation(tree.end(pipes.exited, signal.SIGTERM, _SHORT_GRACE_S))
        tree_gone = True
        raise
    finally:
        if not tree_gone:
            tree.send(signal.SIGKILL)
        transport.close()
    returncode = transport.get_returncode()
    assert returncode is not None and pipes.exited_ns is not None  # the program was reaped above
    duration_ns = pipes.exited_ns - began
    _, data, _ = output.read(output.retained_start, max_output_bytes)
    return CommandOutcome(
        output=data,
        total_bytes=output.total_bytes,
        exit_code=returncode if returncode >= 0 else None,
        signal=_signal_name(-returncode) if returncode < 0 else None,
        timed_out=timed_out,
        duration_ns=duration_ns,
    )


class _Pipes(asyncio.SubprocessProtocol):
    """One child's pipes: feeds the combined output into its buffer, reports exit and output EOF, and
    tracks stdin flow control. With `wait_for_reader` (ProcessOutputFlow) it also stops reading the output
    pipe while one more pipe read could push an unread byte out of the retention, until a read takes some."""

    def __init__(self, output: OutputBuffer, *, wait_for_reader: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self._output = output
        self._wait_for_reader = wait_for_reader
        self._transport: ChildTransport | None = None
        self.exited: asyncio.Future[None] = loop.create_future()
        """Resolved when the child has been reaped."""
        self.drained: asyncio.Future[None] = loop.create_future()
        """Resolved when the output pipe has closed (every writer gone, or the worker closed it)."""
        self.exited_ns: int | None = None
        """When the child was reaped (time.monotonic_ns)."""
        self._writable: asyncio.Future[None] | None = None  # pending while stdin's buffer is full

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, ChildTransport)
        self._transport = transport

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._output.append(data)
        if self._wait_for_reader and self._transport is not None and self._output_full():
            self._transport.pause_output()

    def output_taken(self) -> None:
        """A read took output: read the pipe again if it was stopped for the reader and there is room now."""
        if self._wait_for_reader and self._transport is not None and not self._output_full():
            self._transport.resume_output()

    def _output_full(self) -> bool:
        # The next pipe read may bring READ_BYTES: stop before it could push an unread byte out.
        return self._output.unread_bytes > self._output.retain_bytes - READ_BYTES

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            _resolve(self.drained)
        else:
            self.resume_writing()  # stdin is gone: nothing left to wait for

    def process_exited(self) -> None:
        self.exited_ns = time.monotonic_ns()
        _resolve(self.exited)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            _resolve(self._writable)
            self._writable = None

    async def writable(self) -> None:
        """Wait until stdin's buffer has room again (or stdin is gone)."""
        if self._writable is not None:
            await asyncio.shield(self._writable)


@dataclass(eq=False, slots=True)
class _Process:
    """The mutable state behind one process record."""

    id: str
    session: str
    operation_id: str | None
    argv: list[str]
    cwd: str
    started_at: int  # wall clock, ns since the epoch
    started_ns: int  # monotonic clock
    output: OutputBuffer
    done: asyncio.Future[None]  # resolved once the terminal event is out
    transport: ChildTransport | None = None  # None when the start failed
    pipes: _Pipes | None = None
    pid: int | None = None
    status: ProcessStatus = ProcessStatus.RUNNING
    exit_code: int | None = None
    signal: str | None = None
    ended_at: int | None = None
    duration_ns: int | None = None
    stop_cause: ProcessEventCause | None = None  # set before the worker first signals the process
    tree_gone: bool = False  # no process of its tree is left
    supervisor: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None

    def record(self) -> ExecutionProcessV4:
        wire: dict[str, Any] = {
            "id": self.id,
            "root_thread_id": self.session,
            "argv": self.argv,
            "cwd": self.cwd,
            "status": self.status,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "started_at": _rfc3339(self.started_at),
            "ended_at": None if self.ended_at is None else _rfc3339(self.ended_at),
            "duration_ns": self.duration_ns,
            "output_bytes": self.output.total_bytes,
        }
        # Optional fields are absent, never null.
        if self.operation_id is not None:
            wire["operation_id"] = self.operation_id
        if self.pid is not None:
            wire["pid"] = self.pid
        return ExecutionProcessV4.model_validate(wire)


_TERMINAL_EVENTS = {
    ProcessStatus.EXITED: ProcessEventType.EXITED,
    ProcessStatus.STOPPED: ProcessEventType.STOPPED,
    ProcessStatus.FAILED: ProcessEventType.FAILED,
}


def _event(
    event_type: ProcessEventType, cause: ProcessEventCause, record: ExecutionProcessV4
) -> ProcessEvent:
    return ProcessEvent.model_validate({"Type": event_type, "Cause": cause, "Process": record})


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name.removeprefix("SIG")
    except ValueError:
        return str(signum)  # a real-time signal without a name


def _rfc3339(ns: int) -> str:
    """An RFC 3339 UTC timestamp with nanoseconds."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
