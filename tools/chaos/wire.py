"""One fuzzed connection to a real worker process, checked against the oracle.

The harness initializes the worker on a fresh workspace, writes the frames in pipelined batches (a batch
ends after any frame that may end the connection), answers the worker's `tool/invoke` callbacks with an
error, and checks: every frame the oracle says is answered gets exactly one well-formed reply within the
deadline, nothing else is answered, the worker ends the connection exactly when the oracle says (closing
its output and exiting 0), its stderr has no traceback, and no reply is an `internal` error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES

from .campaign import traceback_in
from .frames import TOKEN
from .oracle import Expect, Verdict, judge

ANSWER_DEADLINE_S = 5.0
"""How long a frame may wait for its reply, or for the end of the connection it causes."""
EXIT_DEADLINE_S = 10.0
"""How long the worker may take to exit once its input has ended (it stops its processes first)."""
NO_INITIALIZE = "initialize got no reply"
MARKER = "WUU_CHAOS_RUN"
"""The variable that marks a run's worker processes (its value is the run's work directory)."""


@dataclass
class Report:
    """What one connection showed: the frames written and the problems found."""

    sent: int = 0
    problems: list[str] = field(default_factory=list)


def initialize_frame(root: Path) -> bytes:
    """The harness's `initialize` (token TOKEN, process.start.v1), first on every connection."""
    data = {"version": 4, "root": str(root), "session": "chaos", "capabilities": ["process.start.v1"]}
    return orjson.dumps({"id": "init", "method": "initialize", "token": TOKEN, "data": data}) + b"\n"


def batches(frames: Sequence[bytes]) -> list[list[tuple[bytes, Verdict]]]:
    """The frames judged and cut into pipelined batches: each batch ends after a frame that may end the
    connection (so nothing is written after it)."""
    out: list[list[tuple[bytes, Verdict]]] = [[]]
    for data in frames:
        verdict = judge(data)
        out[-1].append((data, verdict))
        if verdict.expect in (Expect.ENDS, Expect.EITHER):
            out.append([])
    return [batch for batch in out if batch]


class _Worker:
    """A worker process on pipes and the replies read from it."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self.answers: Counter[str] = Counter()
        self.problems: list[str] = []
        self.changed = asyncio.Event()
        self.reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while True:
            try:
                line = await self.process.stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as error:
                if error.partial:
                    self.problems.append(f"the worker's output ended inside a frame: {error.partial[:200]!r}")
                return
            except asyncio.LimitOverrunError:
                self.problems.append("the worker wrote a frame over the limit")
                return
            finally:
                self.changed.set()
            self._take(line)

    def _take(self, line: bytes) -> None:
        try:
            frame: Any = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.problems.append(f"the worker wrote a line that is not JSON: {line[:200]!r}")
            return
        keys = set(frame) if isinstance(frame, dict) else set()
        if keys == {"method", "data"} and frame["method"] == "process/event":
            return
        if keys == {"id", "method", "parent", "data"} and frame["method"] == "tool/invoke":
            self.write(
                orjson.dumps({"id": frame["id"], "error": "internal: the fuzz host runs no tools"}) + b"\n"
            )
            return
        data_reply = keys == {"id", "data"} and isinstance(frame["data"], dict)
        error_reply = keys == {"id", "error"} and isinstance(frame["error"], str)
        if not (data_reply or error_reply) or not isinstance(frame["id"], str):
            self.problems.append(f"the worker wrote a frame of no kind: {line[:200]!r}")
            return
        if error_reply and frame["error"].split(":")[0] == "internal":
            self.problems.append(f"an internal error for {frame['id'][:50]!r}: {frame['error'][:300]}")
        self.answers[frame["id"]] += 1

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        if not self.process.stdin.is_closing():
            self.process.stdin.write(data)

    async def drain(self) -> bool:
        """Wait until the written bytes are in the pipe; False when the worker no longer reads them."""
        assert self.process.stdin is not None
        try:
            await asyncio.wait_for(self.process.stdin.drain(), ANSWER_DEADLINE_S)
        except (BrokenPipeError, ConnectionResetError):
            return False
        except TimeoutError:
            self.problems.append(f"the worker did not read its input for {ANSWER_DEADLINE_S:g} s")
            return False
        return True

    async def until(self, done: Any, deadline: float) -> bool:
        """Wait until `done()` or the end of the worker's output; whether `done()` held."""
        while not done():
            if self.reading.done():
                return bool(done())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return True

    async def finish(self) -> None:
        """End our side, wait for the worker to exit (killing its group after the deadline), and check it."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(asyncio.gather(self.reading, self.process.wait()), EXIT_DEADLINE_S)
        except TimeoutError:
            self.problems.append(f"the worker did not exit within {EXIT_DEADLINE_S:g} s of the end of input")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()
            self.reading.cancel()
        if self.process.returncode != 0:
            self.problems.append(f"the worker exited with {self.process.returncode}")
        traceback = traceback_in(self.stderr.read_text(errors="replace"))
        if traceback is not None:
            self.problems.append(f"the worker's stderr has a traceback: {traceback}")


async def run_connection(
    command: Sequence[str], frames: Sequence[bytes], workdir: Path, *, cwd: Path | None = None
) -> Report:
    """Run `frames` (after the harness's initialize) on one fresh worker process started by `command`."""
    root = workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    stderr = workdir / "stderr.txt"
    with stderr.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=sink,
            cwd=cwd,
            env={**os.environ, MARKER: str(workdir)},
            start_new_session=True,
            limit=WORKER_MAX_FRAME_BYTES + 1,
        )
    worker = _Worker(process, stderr)
    report = Report()
    worker.write(initialize_frame(root))
    if not await worker.until(lambda: worker.answers["init"], time.monotonic() + 3 * ANSWER_DEADLINE_S):
        worker.problems.append(NO_INITIALIZE)
    expected: Counter[str] = Counter(init=1)
    maybe: set[str] = set()
    for batch in batches(frames) if not worker.problems else []:
        for data, verdict in batch:
            worker.write(data)
            report.sent += 1
            if verdict.expect is Expect.ANSWER and verdict.id is not None:
                expected[verdict.id] += 1
        last = batch[-1][1]
        may_end = last.expect in (Expect.ENDS, Expect.EITHER)
        if last.expect is Expect.EITHER and last.id is None:
            break  # no reply tells whether it was read; the connection ends here either way
        if last.expect is Expect.EITHER and last.id is not None:
            maybe.add(last.id)
        written = await worker.drain()
        deadline = time.monotonic() + ANSWER_DEADLINE_S
        if last.expect is Expect.ENDS or not written:
            await worker.until(lambda: False, deadline)  # only the end of the output
        else:
            answered = await worker.until(
                lambda: (
                    all(worker.answers[key] >= count for key, count in expected.items())
                    and (not maybe or any(worker.answers[key] for key in maybe))
                ),
                deadline,
            )
            if not answered and not worker.reading.done():
                missing = sorted(key for key, count in expected.items() if worker.answers[key] < count)
                worker.problems.append(f"no reply within {ANSWER_DEADLINE_S:g} s to {missing[:5]}")
                break
        if worker.reading.done():
            if not may_end:
                worker.problems.append(f"the worker ended the connection after frame {report.sent}")
            elif last.expect is Expect.ENDS or not any(worker.answers[key] for key in maybe):
                # Requests before the ending frame may have been answered or cancelled, or never read.
                for key in expected:
                    expected[key] = min(expected[key], worker.answers[key])
                maybe.clear()
            break
        if last.expect is Expect.ENDS:
            worker.problems.append(f"the worker went on after frame {report.sent} ({last.why})")
            break
        expected.update({key: 1 for key in maybe if worker.answers[key]})
        maybe.clear()
    await worker.finish()
    extra = sorted(key for key, count in worker.answers.items() if count != expected[key])
    if extra:
        worker.problems.append(f"replies not as expected for {extra[:5]}")
    report.problems = worker.problems
    return report
