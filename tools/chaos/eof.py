"""EOF and output failure at seeded moments (row `eof.native`).

Each point starts the native worker on a fresh workspace (`remove_workspace_on_exit` alternating true and
false), starts process trees (children, a grandchild in a session of its own, a stubborn TERM-ignoring
shell, endless output), an `exec_command` left running and a `process/read` left waiting, then ends the
connection at a seeded moment: EOF on the worker's stdin (between frames or inside one), or its stdout
closed by the reader (its writes fail). The worker must exit 0 within EXIT_BUDGET_S without a traceback,
leave no process of the run behind, and leave the workspace iff it was not to be removed
(spec/schema/worker/initialize.schema.json).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from .campaign import Campaign, Context, Outcome, leftover_processes, reap_leftovers, traceback_in
from .frames import TOKEN
from .wire import MARKER

FULL_POINTS = 100
"""Connection ends at scale 1."""
EXIT_BUDGET_S = 15.0
"""How long the worker may take to exit once the connection has ended (it stops every tree first)."""
TREES = (
    ["sh", "-c", "sleep 1000 & sleep 1000 & echo $!; wait"],
    ["sh", "-c", "setsid sh -c 'sleep 1000 & wait' & echo $!; wait"],
    ["sh", "-c", "trap '' TERM; sleep 1000 & echo $!; wait"],
    ["sh", "-c", "while :; do echo chaos-output-line-chaos-output-line; done"],
    ["sh", "-c", "yes chaos | head -c 20000000; sleep 1000"],
)


def _request(frame_id: str, method: str, data: dict[str, Any]) -> bytes:
    return orjson.dumps({"id": frame_id, "method": method, "token": TOKEN, "data": data}) + b"\n"


class _Point:
    """One worker process, driven up to its seeded end."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.replies: dict[str, dict[str, Any]] = {}
        self.arrived = asyncio.Event()
        self.reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            while True:
                frame = orjson.loads(await self.process.stdout.readuntil(b"\n"))
                if isinstance(frame, dict) and "id" in frame and "method" not in frame:
                    self.replies[str(frame["id"])] = frame
                    self.arrived.set()

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)

    async def reply(self, frame_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while frame_id not in self.replies:
            if self.reading.done() or time.monotonic() > deadline:
                raise RuntimeError(f"no reply to {frame_id}")
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), deadline - time.monotonic())
        return self.replies[frame_id]

    def close_output(self) -> None:
        """Stop reading the worker's stdout and close our end: its writes now fail."""
        self.reading.cancel()
        assert self.process.stdout is not None
        transport = getattr(self.process, "_transport", None)
        pipe = transport.get_pipe_transport(1) if transport is not None else None
        if pipe is not None:
            pipe.close()


async def run_point(rng: random.Random, workdir: Path, remove: bool) -> list[str]:
    """One seeded end of one connection; the problems found."""
    root = workdir / "root"
    stderr = workdir / "stderr.txt"
    workdir.mkdir(parents=True)
    with stderr.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "wuu.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=sink,
            env={**os.environ, MARKER: str(workdir)},
            start_new_session=True,
        )
    point = _Point(process)
    problems: list[str] = []
    binding = {"version": 4, "root": str(root), "session": "eof", "capabilities": ["process.start.v1"]}
    point.send(_request("init", "initialize", {**binding, "remove_workspace_on_exit": remove}))
    try:
        await point.reply("init")
        trees = rng.sample(TREES, rng.randrange(1, len(TREES) + 1))
        for index, argv in enumerate(trees):
            start = {"argv": argv, "permission_mode": "standard"}
            point.send(_request(f"start{index}", "process/start", start))
        if rng.random() < 0.5:  # a read that waits for output which may never come
            record = (await point.reply(f"start{rng.randrange(len(trees))}")).get("data") or {}
            wait = {"Process": str(record.get("id", "none")), "OffsetBytes": 2**62, "Wait": 60 * 10**9}
            point.send(_request("read", "process/read", wait))
        command = {"argv": ["sh", "-c", "sleep 1000 & sleep 1000"], "timeout_ms": 600_000}
        call = {"id": "c1", "arguments": orjson.dumps(command).decode()}
        actor = {"kind": "agent", "id": "a"}
        execute = {"tool": "exec_command", "call": call, "actor": actor, "permission_mode": "standard"}
        if rng.random() < 0.7:
            point.send(_request("exec", "execute", execute))
        for index in range(rng.randrange(0, 4)):
            point.send(_request(f"list{index}", "process/list", {}))
        # The seeded moment: wherever the worker then is. Half of them fall while the trees are starting.
        await asyncio.sleep(rng.uniform(0.0, rng.choice((0.05, 1.0))))
    except RuntimeError as error:
        problems.append(str(error))
    how = rng.choice(("stdin EOF", "EOF inside a frame", "output closed"))
    assert process.stdin is not None
    if how == "EOF inside a frame":  # a malformed last frame: the connection ends all the same
        point.send(_request("cut", "process/list", {})[: rng.randrange(1, 30)])
    if how != "output closed":
        process.stdin.close()
    else:
        point.close_output()
    try:
        await asyncio.wait_for(process.wait(), EXIT_BUDGET_S)
    except TimeoutError:
        problems.append(f"{how}: the worker did not exit within {EXIT_BUDGET_S:g} s")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.close()
    point.reading.cancel()
    if process.returncode != 0:
        problems.append(f"{how}: the worker exited with {process.returncode}")
    traceback = traceback_in(stderr.read_text(errors="replace"))
    if traceback is not None:
        problems.append(f"{how}: the worker's stderr has a traceback: {traceback}")
    deadline = time.monotonic() + 2.0
    while leftover_processes(workdir) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # a killed tree's last members may still be on their way out
    leaked = reap_leftovers(workdir)
    if leaked:
        problems.append(f"{how}: processes left behind: {leaked}")
    if root.exists() == remove:
        problems.append(
            f"{how}: remove_workspace_on_exit={remove} but the workspace {'remains' if remove else 'is gone'}"
        )
    return [f"{problem}" for problem in problems]


async def _run(context: Context) -> Outcome:
    outcome = Outcome()
    seeds = random.Random(f"eof.native:{context.seed}")
    for index in range(context.size(FULL_POINTS)):
        seed = seeds.randrange(2**32)
        problems = await run_point(
            random.Random(seed), context.workdir / f"point-{index}", remove=index % 2 == 0
        )
        outcome.runs += 1
        outcome.failures += [
            f"point {index} (seed {seed}): {problem}; rerun: {context.rerun('eof.native')}"
            for problem in problems
        ]
    return outcome


CAMPAIGNS = [Campaign("eof.native", _run)]
