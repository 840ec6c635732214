"""The spawners of the native worker: a confinement that fails refuses the spawn, and no child outlives a cancelled
spawn."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, carrying
from wuu.worker.native.children import spawn
from wuu.worker.native.spawner import ConfinedSpawner, Spawner


async def gone(marker: str) -> bool:
    """Poll until no process carries `marker`; False if one is still there at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while carrying(marker):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def refuse() -> None:
    raise OSError(1, "Operation not permitted")


async def test_a_spawner_whose_confinement_failed_refuses_every_spawn(tmp_path: Path) -> None:
    spawner = ConfinedSpawner(refuse)
    try:
        for _ in range(2):
            with pytest.raises(subprocess.SubprocessError, match="the sandbox could not be applied"):
                await spawner.popen(["touch", str(tmp_path / "ran")])
    finally:
        spawner.close()
    assert not (tmp_path / "ran").exists()


async def test_a_closed_spawner_refuses_at_once(tmp_path: Path) -> None:
    spawner = ConfinedSpawner(lambda: None)
    spawner.close()
    with pytest.raises(subprocess.SubprocessError, match="closed"):
        await spawner.popen(["touch", str(tmp_path / "ran")])
    assert not (tmp_path / "ran").exists()


async def test_a_cancelled_spawn_leaves_no_process() -> None:
    spawner = ConfinedSpawner(lambda: None)
    marker = f"wuu-spawn-{uuid.uuid4().hex}"
    try:
        for _ in range(20):
            task = asyncio.create_task(
                spawner.popen(["sh", "-c", "sleep 30; :", marker], start_new_session=True)
            )
            await asyncio.sleep(0)  # the spawn is under way: its thread may be forking right now
            if not task.cancel():
                child = task.result()  # spawned before the cancel came: end it as its owner would
                child.kill()
                await asyncio.to_thread(child.wait)
            with pytest.raises(asyncio.CancelledError):
                await task
        # A cancelled spawn ends only once what it started is gone.
        assert await gone(marker)
    finally:
        spawner.close()


async def test_the_output_pipe_ends_with_the_child_and_the_child_is_reaped(tmp_path: Path) -> None:
    class Protocol(asyncio.SubprocessProtocol):
        def __init__(self) -> None:
            self.output = bytearray()
            self.exited = asyncio.get_running_loop().create_future()
            self.drained = asyncio.get_running_loop().create_future()

        def pipe_data_received(self, fd: int, data: bytes) -> None:
            self.output += data

        def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
            self.drained.set_result(fd)

        def process_exited(self) -> None:
            self.exited.set_result(None)

    transport, protocol = await spawn(
        Spawner(),
        Protocol,
        ["sh", "-c", "echo out; echo err >&2; exit 3"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        stdin=False,
    )
    await asyncio.wait_for(asyncio.gather(protocol.exited, protocol.drained), DEADLINE)
    assert transport.get_returncode() == 3
    assert bytes(protocol.output) == b"out\nerr\n"  # one combined stream, in write order
    assert protocol.drained.result() == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(transport.get_pid(), os.WNOHANG)  # already reaped: no zombie left


FREED_THEN_SPAWNED = """
import asyncio, sys
from wuu.worker.native.spawner import ConfinedSpawner

def resident_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / (1 << 20)

# 64 MiB in the sizes a command's output arrives in, each followed by something that stays (as objects made
# meanwhile do), so that what is freed lies below the heap's top, which glibc would otherwise give back itself.
chunks, kept = [], []
for _ in range(1024):
    chunks.append(bytes(64 * 1024))
    kept.append(bytes(1024))
del chunks
before = resident_mib()

async def main():
    child = await ConfinedSpawner(lambda: None).popen(["true"])
    child.wait()

asyncio.run(main())
print(before, resident_mib())
"""


def test_a_confined_spawn_gives_the_freed_heap_back_before_it_forks() -> None:
    # In a process of its own: what this one's heap holds is not the test's to know.
    found = subprocess.run(
        [sys.executable, "-c", FREED_THEN_SPAWNED], capture_output=True, text=True, check=True, timeout=60
    )
    before, after = map(float, found.stdout.split())
    # More than half of the 64 MiB freed (here about 51 MiB goes back; without the trim, none does).
    assert before - after > 32, f"resident {before:.0f} MiB before the spawn, {after:.0f} MiB after"
