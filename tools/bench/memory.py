"""The worker's peak memory above its idle size while it exports a file, from /proc/<pid>/status."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

from wuu.worker.client import WorkerClient

from .exports import export_echo, export_typed
from .workers import ECHO_COMMAND, close, data_of, spawn_native

RSS_SAMPLE_S = 0.002


def status_kib(pid: int, field: str) -> int:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (clear_refs 5); False where the kernel refuses."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


class RssSampler:
    """Samples a process's VmRSS every RSS_SAMPLE_S seconds on a thread, keeping the largest."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._stop = threading.Event()
        self.peak_kib = status_kib(pid, "VmRSS")
        self.count = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_S):
            with contextlib.suppress(OSError, RuntimeError):
                self.peak_kib = max(self.peak_kib, status_kib(self._pid, "VmRSS"))
                self.count += 1


async def peak_above_idle(client: WorkerClient, export: Callable[[], Awaitable[object]]) -> dict[str, float]:
    """The worker's idle RSS, and its peak RSS above that while `export` runs, in MiB."""
    assert client.process is not None
    pid = client.process.pid
    await asyncio.sleep(0.2)  # let it settle after initialize
    idle = status_kib(pid, "VmRSS")
    exact = reset_peak(pid)
    with RssSampler(pid) as sampler:
        await export()
    peak = max(sampler.peak_kib, status_kib(pid, "VmHWM") if exact else 0)
    return {
        "idle_mib": idle / 1024,
        "peak_mib": peak / 1024,
        "delta_mib": (peak - idle) / 1024,
        "sampled_peak_mib": sampler.peak_kib / 1024,
        "samples": sampler.count,
        "vmhwm_reset": exact,
    }


async def export_memory(root: Path, export_file: Path) -> dict[str, dict[str, float]]:
    """One more export per side by fresh workers, untimed, with the worker's RSS watched; by side."""
    found = {}
    echo = await WorkerClient.spawn(ECHO_COMMAND)
    await data_of(echo, "echo", {})
    found["echo"] = await peak_above_idle(echo, lambda: export_echo(echo, export_file))
    await close(echo)
    native = await spawn_native(root)
    found["native"] = await peak_above_idle(native, lambda: export_typed(native, export_file))
    await close(native)
    return found
