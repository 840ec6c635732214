"""Mutants of background processes: the start record, list and get, stopping a whole tree, timeouts, events
and operation ids."""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from wuu.generated.models import (
    ExecutionProcessV4,
    ProcessEventType,
    ProcessSignal,
    ProcessStatus,
    ProcessStopParams,
)
from wuu.worker import ExecutionBackendV4, Handler, RequestContext
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import Frame, Relay, encode, frame_of, override, rewrite_params, rewrite_results

# How long the leader may take to exit once it has been sent KILL.
KILL_WAIT_S = 5.0
# Once the leader is gone, how long its record may take to end: descendants that outlive it keep the
# output pipe open, and then it never ends by itself.
RECORD_END_S = 0.5
POLL_S = 0.01


def _set_foreign_session(result: Frame, request: Frame) -> None:
    result["root_thread_id"] = "worker-session"


mutant(
    "start-record-wrong-session",
    "answers process/start with a record bound to another root_thread_id",
    "process.start-record",
)(
    rewrite_results(
        "process/start",
        _set_foreign_session,
        doc="The process/start reply's root_thread_id is not the binding's session.",
    )
)


def _add_foreign_process(result: Frame, request: Frame) -> None:
    result["processes"].append(
        {
            "id": "other-session-p1",
            "root_thread_id": "another-thread",
            "argv": ["sleep", "30"],
            "cwd": "/",
            "status": "running",
            "exit_code": None,
            "signal": None,
            "started_at": "2025-01-01T00:00:00.000000000Z",
            "ended_at": None,
            "duration_ns": None,
            "output_bytes": 0,
        }
    )


mutant(
    "lists-other-sessions",
    "lists a process of another session in process/list",
    "process.list-get",
)(
    rewrite_results(
        "process/list",
        _add_foreign_process,
        doc="process/list results carry, after the session's own records, one of a process of another session.",
    )
)


def _alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, dead and waiting to be reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] not in (b"Z", b"X")


async def _until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `condition()` until it holds or `timeout_s` has passed; whether it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


def _rfc3339(ns: int) -> str:
    seconds, nanos = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def _epoch_ns(stamp: str) -> int:
    """The time of a record's UTC timestamp, as the native worker writes it (`...T12:34:56.123456789Z`)."""
    whole, _, fraction = stamp.rstrip("Zz").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0")[:9])


def _as_stopped(record: ExecutionProcessV4, sent: signal.Signals) -> ExecutionProcessV4:
    """The record as the worker answers a stop it believes done: status stopped, ended now if it still runs."""
    update: dict[str, Any] = {"status": ProcessStatus.STOPPED}
    if record.status is ProcessStatus.RUNNING:
        now = time.time_ns()
        update.update(
            ended_at=_rfc3339(now),
            duration_ns=now - _epoch_ns(record.started_at),
            signal=sent.name.removeprefix("SIG"),
        )
    return record.model_copy(update=update)


def _signal(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


@mutant(
    "stop-leader-only",
    "process/stop signals only the leader, not its whole tree",
    "process.stop-tree",
)
def stop_leader_only(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/stop sends TERM (KILL after the grace) to the pid of the process's record, never to its
    process group, and answers the record as stopped once that one process is gone.

    The record itself ends only when every descendant holding its output is gone too, so the reply waits
    for that a moment at most: it says stopped while the rest of the tree lives on, until the worker's
    cleanup at EOF, which still ends whole groups.
    """

    def make(original: Handler) -> Handler:
        async def handler(params: ProcessStopParams, context: RequestContext) -> ExecutionProcessV4:
            record = worker.processes.get(params.id)  # not_found for an unknown id, as the reference
            pid = record.pid
            if record.status is not ProcessStatus.RUNNING or pid is None:
                return record

            def ended() -> bool:
                nonlocal record
                record = worker.processes.get(params.id)
                return record.status is not ProcessStatus.RUNNING

            sent = signal.SIGKILL if params.signal is ProcessSignal.KILL else signal.SIGTERM
            _signal(pid, sent)
            if sent is signal.SIGTERM and not await _until(lambda: not _alive(pid), params.grace_ms / 1000):
                sent = signal.SIGKILL
                _signal(pid, sent)
            await _until(lambda: not _alive(pid), KILL_WAIT_S)
            await _until(ended, RECORD_END_S)
            return _as_stopped(record, sent)

        return handler

    return override(backend, "process/stop", make)


@mutant(
    "ignores-process-timeout",
    "lets a background process run past its timeout_ms",
    "process.timeout",
)
def ignores_process_timeout(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/start runs as if no timeout_ms had been given."""
    return rewrite_params("process/start", lambda params: {"timeout_ms": None})(worker, backend)


class EventRelay(Relay):
    """A relay that sends the frames `events(event)` returns in place of each `process/event` notification."""

    def events(self, event: Frame) -> list[Frame]:
        raise NotImplementedError

    def from_worker(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is None or frame.get("method") != "process/event" or not isinstance(frame.get("data"), dict):
            self.to_host(line)
            return
        for each in self.events(frame):
            self.to_host(encode(each))


@mutant(
    "no-started-event",
    "sends no started event for a new process",
    "process.events",
)
class NoStartedEvent(EventRelay):
    """`process/event` notifications of type started are dropped on their way to the host."""

    def events(self, event: Frame) -> list[Frame]:
        return [] if event["data"].get("Type") == ProcessEventType.STARTED.value else [event]


@mutant(
    "two-terminal-events",
    "sends every terminal process event twice",
    "process.events",
)
class TwoTerminalEvents(EventRelay):
    """Each exited, stopped or failed event goes to the host twice."""

    def events(self, event: Frame) -> list[Frame]:
        return [event] if event["data"].get("Type") == ProcessEventType.STARTED.value else [event, event]


def _drop_operation_ids(result: Frame, request: Frame) -> None:
    for record in result.get("processes", []):
        record.pop("operation_id", None)


mutant(
    "list-loses-operation-id",
    "drops operation_id from process/list records (start replies keep it)",
    "process.operation-id",
)(
    rewrite_results(
        "process/list",
        _drop_operation_ids,
        doc="process/list records go out without their operation_id.",
    )
)
