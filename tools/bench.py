"""`make bench`: the native worker's speed beside a raw NDJSON echo baseline, measured in the same run.

Usage: python tools/bench.py [--quick] [--json PATH] [--rounds N]

Every figure is measured on both sides in each round (5 rounds; round trips also alternate in blocks
within a round), the order of the sides alternating from one round to the next (ABAB). A figure is the
median over the rounds and its ratio the median of the rounds' ratios, since the machine is noisy:

- native: the native reference worker (`python -m wuu.worker`) driven through the typed host client
  (`WorkerClient.process_list(...)` etc.), which is what a user of the stack sees;
- wire: the same native worker driven through `WorkerClient.request` (frames only, no host-side models),
  shown for diagnosis: it isolates the worker's own cost;
- echo: the baseline, tools/bench_echo.py (asyncio + orjson, no protocol rules) driven through
  `WorkerClient.request`, so both sides pay the same framing cost and the ratio compares worker sides.

The figures: small-request round trip p50/p99 (`process/list` on an empty registry: a method with no
I/O), pipelined throughput with 64 requests in flight, export of a file in 8 MiB chunks (the maximum),
output streaming through `process/read` (8 MiB reads, 1 s waits) against a bare asyncio pipe read of
the same command, cold start (spawn to the initialize reply), `process/start` of `true` to its terminal
`process/event` (permission modes unconfined and standard) against a bare spawn and wait, and the
worker's peak RSS above its idle size while it exports the file (VmRSS sampled, and VmHWM reset at idle).
Rows marked (diag.) have no target; they say where time goes (e.g. the worker's CPU time per pipelined
request, from /proc/<pid>/task/*/schedstat).

It prints a table (figure, baseline, ratio, target, PASS/MISS) and writes JSON (`bench.json` by default)
with the machine, the configuration and every figure's per-round medians. No figure fails the command:
a missed target is reported, not raised. `--quick` is a smoke run with small sizes, for tests.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_EXPORT_READ_MAX_BYTES, WORKER_PROCESS_READ_MAX_BYTES
from wuu.generated.models import (
    ExportCloseParams,
    ExportOpenParams,
    ExportReadParams,
    PermissionMode,
    ProcessEvent,
    ProcessEventType,
    ProcessListParams,
    ProcessReadParams,
    ProcessStartParams,
    ProcessStatus,
)
from wuu.worker.client import WorkerClient

ECHO_COMMAND = [sys.executable, str(Path(__file__).resolve().parent / "bench_echo.py")]
NATIVE_COMMAND = [sys.executable, "-m", "wuu.worker"]
SESSION = "thr_bench"

MB = 1_000_000  # throughputs are in MB/s (10^6 bytes)
MIB = 1 << 20  # memory and sizes are in MiB
SECOND_NS = 1_000_000_000
IN_FLIGHT = 64
EXPORT_CHUNK = WORKER_EXPORT_READ_MAX_BYTES
STREAM_READ = WORKER_PROCESS_READ_MAX_BYTES
STREAM_WAIT_NS = SECOND_NS
MEMORY_LIMIT_MIB = 64.0
RSS_SAMPLE_S = 0.002
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
EMPTY_LIST_REPLY: dict[str, Any] = {"processes": []}  # what process/list answers on an empty registry


@dataclass(frozen=True)
class Config:
    rounds: int
    rtt_requests: int  # sequential requests per side and round
    rtt_blocks: int  # the round's requests alternate between the sides in this many blocks
    pipelined_requests: int  # per side and round
    export_bytes: int
    stream_bytes: int
    cold_starts: int  # per side, over all rounds
    spawns: int  # per side and mode, over all rounds
    warmup: int  # requests before the timed ones, per side and round


FULL = Config(
    rounds=5,
    rtt_requests=2000,
    rtt_blocks=4,
    pipelined_requests=15_000,
    export_bytes=64 * MIB,
    stream_bytes=64 * MIB,
    cold_starts=15,
    spawns=45,
    warmup=300,
)
QUICK = Config(
    rounds=1,
    rtt_requests=50,
    rtt_blocks=1,
    pipelined_requests=4 * IN_FLIGHT,
    export_bytes=2 * EXPORT_CHUNK,
    stream_bytes=8 * MIB,
    cold_starts=2,
    spawns=3,
    warmup=20,
)


# --- figures -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A figure's goal: its ratio to the baseline at most or at least `bound`, or its value below `bound`."""

    kind: str  # "ratio_max" | "ratio_min" | "value_max"
    bound: float

    def text(self, unit: str) -> str:
        if self.kind == "ratio_max":
            return f"<= {self.bound:g}x"
        if self.kind == "ratio_min":
            return f">= {self.bound:g}x"
        return f"< {self.bound:g} {unit}"

    def met(self, value: float, ratio: float | None) -> bool:
        if self.kind == "value_max":
            return value < self.bound
        assert ratio is not None
        return ratio <= self.bound if self.kind == "ratio_max" else ratio >= self.bound


@dataclass(frozen=True)
class FigureSpec:
    key: str
    label: str
    unit: str
    side: str  # the key of the measured side's samples
    baseline: str  # the key of the baseline's samples
    baseline_label: str
    target: Target | None


FIGURES = (
    FigureSpec(
        "rtt_p50",
        "round trip p50, process/list",
        "us",
        "rtt_p50/native",
        "rtt_p50/echo",
        "echo",
        Target("ratio_max", 1.5),
    ),
    FigureSpec(
        "rtt_p99",
        "round trip p99, process/list",
        "us",
        "rtt_p99/native",
        "rtt_p99/echo",
        "echo",
        Target("ratio_max", 1.5),
    ),
    FigureSpec(
        "rtt_p50_wire", "  same, untyped client (diag.)", "us", "rtt_p50/wire", "rtt_p50/echo", "echo", None
    ),
    FigureSpec(
        "rtt_p99_wire", "  p99, untyped client (diag.)", "us", "rtt_p99/wire", "rtt_p99/echo", "echo", None
    ),
    FigureSpec(
        "pipelined",
        "pipelined, 64 in flight",
        "req/s",
        "pipelined/native",
        "pipelined/echo",
        "echo",
        Target("ratio_min", 0.5),
    ),
    FigureSpec(
        "pipelined_cpu",
        "  worker CPU per request (diag.)",
        "us",
        "pipelined_cpu/native",
        "pipelined_cpu/echo",
        "echo",
        None,
    ),
    FigureSpec(
        "pipelined_wire",
        "  same, untyped client (diag.)",
        "req/s",
        "pipelined/wire",
        "pipelined/echo",
        "echo",
        None,
    ),
    FigureSpec(
        "export",
        "export, 8 MiB chunks, open..close",
        "MB/s",
        "export/native",
        "export/echo",
        "echo",
        Target("ratio_min", 0.7),
    ),
    FigureSpec(
        "export_reads",
        "  export/read phase only (diag.)",
        "MB/s",
        "export_reads/native",
        "export/echo",
        "echo",
        None,
    ),
    FigureSpec(
        "export_wire",
        "  open..close, untyped client (diag.)",
        "MB/s",
        "export/wire",
        "export/echo",
        "echo",
        None,
    ),
    FigureSpec(
        "stream",
        "process/read stream, to exit seen",
        "MB/s",
        "stream/native",
        "stream/bare",
        "pipe read",
        None,
    ),
    FigureSpec(
        "stream_delivered",
        "  bytes delivered by process/read",
        "MB/s",
        "stream_delivered/native",
        "stream/bare",
        "pipe read",
        None,
    ),
    FigureSpec(
        "cold_start",
        "cold start, spawn..initialize reply",
        "ms",
        "cold/native",
        "cold/echo",
        "echo",
        Target("ratio_max", 2.0),
    ),
    FigureSpec(
        "start_exit_unconfined",
        "process/start true..exit, unconfined",
        "ms",
        "start_exit/unconfined",
        "start_exit/bare",
        "bare spawn",
        Target("ratio_max", 1.5),
    ),
    FigureSpec(
        "start_exit_standard",
        "process/start true..exit, standard",
        "ms",
        "start_exit/standard",
        "start_exit/bare",
        "bare spawn",
        Target("ratio_max", 1.5),
    ),
    FigureSpec(
        "export_peak_rss",
        "peak RSS above idle while exporting",
        "MiB",
        "memory/native",
        "memory/echo",
        "echo",
        Target("value_max", MEMORY_LIMIT_MIB),
    ),
)


class Samples:
    """Per-round values of every side of every figure; a figure's value is the median over the rounds."""

    def __init__(self) -> None:
        self.rounds: dict[str, list[float]] = defaultdict(list)

    def add(self, key: str, value: float) -> None:
        self.rounds[key].append(value)

    def median(self, key: str) -> float:
        return statistics.median(self.rounds[key])


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def alternate(sides: Sequence[str], round_index: int) -> list[str]:
    """The order of the sides in a round: as given in even rounds, reversed in odd ones (ABAB)."""
    return list(sides) if round_index % 2 == 0 else list(reversed(sides))


# --- clients -----------------------------------------------------------------------------------------


async def data_of(client: WorkerClient, method: str, data: dict[str, Any]) -> dict[str, Any]:
    """One request through the framing layer only; the reply's data (an error reply raises)."""
    reply = await client.request(method, data)
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    result: dict[str, Any] = reply["data"]
    return result


async def spawn_native(root: Path) -> WorkerClient:
    client = await WorkerClient.spawn(NATIVE_COMMAND)
    await client.connect(str(root), SESSION)
    return client


async def close(client: WorkerClient) -> None:
    outcome = await client.close()
    if not outcome.clean:
        raise RuntimeError(f"a worker ended badly ({outcome.returncode}): {outcome.stderr.decode()[-2000:]}")


def forget_transcript(*clients: WorkerClient) -> None:
    """Drop the frames the clients recorded so far (the transcript keeps every frame, 64 MiB exports too)."""
    for client in clients:
        client.transcript.entries.clear()


# --- measurements ------------------------------------------------------------------------------------


async def round_trips(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    """The latency in microseconds of `count` sequential calls."""
    latencies = []
    for _ in range(count):
        began = time.perf_counter_ns()
        await call()
        latencies.append((time.perf_counter_ns() - began) / 1000)
    return latencies


async def pipelined(call: Callable[[], Awaitable[object]], count: int) -> float:
    """Requests per second with IN_FLIGHT calls outstanding at all times, `count` in all."""
    remaining = count

    async def lane() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    began = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(IN_FLIGHT)))
    return count / (time.perf_counter() - began)


@dataclass(frozen=True)
class ExportTiming:
    total_s: float  # export/open to export/close replied
    reads_s: float  # the export/read requests only
    size: int


async def export_typed(client: WorkerClient, path: Path) -> ExportTiming:
    """The whole export of `path` through the typed client, decoding every chunk."""
    began = time.perf_counter()
    opened = await client.export_open(ExportOpenParams(path=str(path)))
    reading = time.perf_counter()
    offset, eof = 0, False
    while not eof:
        chunk = await client.export_read(
            ExportReadParams(token=opened.token, offset=offset, max_bytes=EXPORT_CHUNK)
        )
        offset += len(base64.b64decode(chunk.data))
        eof = chunk.eof
    read = time.perf_counter()
    await client.export_close(ExportCloseParams(token=opened.token))
    ended = time.perf_counter()
    if offset != opened.size:
        raise RuntimeError(f"exported {offset} bytes of {opened.size}")
    return ExportTiming(ended - began, read - reading, offset)


async def export_wire(client: WorkerClient, path: Path) -> ExportTiming:
    """The whole export of `path` through untyped requests, decoding every chunk."""
    began = time.perf_counter()
    opened = await data_of(client, "export/open", {"path": str(path)})
    reading = time.perf_counter()
    offset, eof = 0, False
    while not eof:
        chunk = await data_of(
            client, "export/read", {"token": opened["token"], "offset": offset, "max_bytes": EXPORT_CHUNK}
        )
        offset += len(base64.b64decode(chunk["data"]))
        eof = chunk["eof"]
    read = time.perf_counter()
    await data_of(client, "export/close", {"token": opened["token"]})
    ended = time.perf_counter()
    if offset != opened["size"]:
        raise RuntimeError(f"exported {offset} bytes of {opened['size']}")
    return ExportTiming(ended - began, read - reading, offset)


async def export_echo(client: WorkerClient, path: Path) -> ExportTiming:
    """The baseline: the echo worker reads and encodes the same chunks of the same file."""
    began = time.perf_counter()
    offset, eof = 0, False
    while not eof:
        chunk = await data_of(
            client, "export/read", {"path": str(path), "offset": offset, "max_bytes": EXPORT_CHUNK}
        )
        offset += len(base64.b64decode(chunk["data"]))
        eof = chunk["eof"]
    elapsed = time.perf_counter() - began
    return ExportTiming(elapsed, elapsed, offset)


def stream_argv(size: int) -> list[str]:
    return ["head", "-c", str(size), "/dev/zero"]


async def stream_native(client: WorkerClient, size: int) -> tuple[float, int]:
    """Seconds from process/start until a read sees the ended process at the end of its output, and the
    bytes that the reads delivered (the worker keeps only a tail of the output: a fast writer outruns
    the reads)."""
    began = time.perf_counter()
    process = await client.process_start(
        ProcessStartParams(argv=stream_argv(size), permission_mode=PermissionMode.UNCONFINED)
    )
    offset = delivered = 0
    while True:
        read = await client.process_read(
            ProcessReadParams.model_validate(
                {
                    "Process": process.id,
                    "MaxBytes": STREAM_READ,
                    "OffsetBytes": offset,
                    "Wait": STREAM_WAIT_NS,
                }
            )
        )
        delivered += len(base64.b64decode(read.output))
        offset = read.end_offset
        if read.process.status is not ProcessStatus.RUNNING and offset >= read.total_bytes:
            break
    elapsed = time.perf_counter() - began
    if read.total_bytes != size:
        raise RuntimeError(f"the process wrote {read.total_bytes} bytes, not {size}")
    client.pending_events()  # its started and exited events
    return elapsed, delivered


async def stream_bare(size: int) -> float:
    """The baseline: the same command's stdout read through a bare asyncio pipe, in reads as large."""
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(*stream_argv(size), stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    total = 0
    while chunk := await process.stdout.read(STREAM_READ):
        total += len(chunk)
    await process.wait()
    elapsed = time.perf_counter() - began
    if total != size:
        raise RuntimeError(f"read {total} bytes, not {size}")
    return elapsed


async def start_exit(
    client: WorkerClient, events: AsyncIterator[ProcessEvent], mode: PermissionMode
) -> float:
    """Milliseconds from sending process/start of `true` until its terminal process/event arrives."""
    began = time.perf_counter()
    process = await client.process_start(ProcessStartParams(argv=["true"], permission_mode=mode))
    while True:
        event = await anext(events)
        if event.process.id == process.id and event.type is not ProcessEventType.STARTED:
            break
    elapsed = time.perf_counter() - began
    if event.type is not ProcessEventType.EXITED or event.process.exit_code != 0:
        raise RuntimeError(f"`true` in {mode.value} ended {event.type.value}: {event.process}")
    return elapsed * 1000


async def spawn_bare() -> float:
    """The baseline: milliseconds to spawn `true` and reap it."""
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec("true")
    await process.wait()
    return (time.perf_counter() - began) * 1000


async def cold_native(root: Path) -> float:
    """Milliseconds from spawning the native worker to its initialize reply."""
    began = time.perf_counter()
    client = await spawn_native(root)
    elapsed = time.perf_counter() - began
    await close(client)
    return elapsed * 1000


async def cold_echo(reply: dict[str, Any]) -> float:
    """Milliseconds from spawning the echo worker to its first reply, as large as the initialize reply."""
    began = time.perf_counter()
    client = await WorkerClient.spawn(ECHO_COMMAND)
    await data_of(client, "initialize", reply)
    elapsed = time.perf_counter() - began
    await close(client)
    return elapsed * 1000


def cpu_seconds(client: WorkerClient) -> float:
    """The CPU time the client's worker process has used so far: the run time of its threads in
    nanoseconds (schedstat) where the kernel keeps it, else user + system time in clock ticks."""
    assert client.process is not None
    pid = client.process.pid
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        return total / SECOND_NS
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


# --- memory ------------------------------------------------------------------------------------------


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


# --- the run -----------------------------------------------------------------------------------------


class Bench:
    def __init__(self, config: Config, workdir: Path, log: Callable[[str], None]) -> None:
        self.config = config
        self.root = workdir / "root"
        self.root.mkdir()
        self.export_file = self.root / "export.bin"
        self.samples = Samples()
        self.memory: dict[str, dict[str, float]] = {}
        self.extra: dict[str, Any] = {}
        self.init_reply: dict[str, Any] = {}
        self.log = log

    async def run(self) -> None:
        with open(self.export_file, "wb") as out:
            remaining = self.config.export_bytes
            while remaining:
                block = min(remaining, 8 * MIB)
                out.write(os.urandom(block))
                remaining -= block
        probe = await WorkerClient.spawn(NATIVE_COMMAND)
        self.init_reply = (await probe.connect(str(self.root), SESSION)).to_wire()
        await close(probe)
        for index in range(self.config.rounds):
            self.log(f"round {index + 1} of {self.config.rounds}")
            await self.round(index)
        self.log("memory")
        await self.measure_memory()

    async def round(self, index: int) -> None:
        config, samples = self.config, self.samples
        echo = await WorkerClient.spawn(ECHO_COMMAND)
        native = await spawn_native(self.root)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "echo": lambda: data_of(echo, "echo", EMPTY_LIST_REPLY),
            "native": lambda: native.process_list(ProcessListParams()),
            "wire": lambda: data_of(native, "process/list", {}),
        }
        clients = {"echo": echo, "native": native, "wire": native}
        sides = ("echo", "native", "wire")
        latencies: dict[str, list[float]] = defaultdict(list)
        for side in sides:
            await round_trips(calls[side], config.warmup)
        for block in range(config.rtt_blocks):
            for side in alternate(sides, index + block):
                latencies[side] += await round_trips(calls[side], config.rtt_requests // config.rtt_blocks)
        for side in sides:
            samples.add(f"rtt_p50/{side}", percentile(latencies[side], 0.50))
            samples.add(f"rtt_p99/{side}", percentile(latencies[side], 0.99))
        forget_transcript(echo, native)
        for side in alternate(sides, index):
            await pipelined(calls[side], config.warmup)
            busy = cpu_seconds(clients[side])
            samples.add(f"pipelined/{side}", await pipelined(calls[side], config.pipelined_requests))
            busy = cpu_seconds(clients[side]) - busy
            samples.add(f"pipelined_cpu/{side}", busy / config.pipelined_requests * 1e6)
            forget_transcript(echo, native)
        exports = {
            "echo": lambda: export_echo(echo, self.export_file),
            "native": lambda: export_typed(native, self.export_file),
            "wire": lambda: export_wire(native, self.export_file),
        }
        for side in alternate(sides, index):
            timing = await exports[side]()
            samples.add(f"export/{side}", timing.size / timing.total_s / MB)
            if side == "native":
                samples.add("export_reads/native", timing.size / timing.reads_s / MB)
            forget_transcript(echo, native)
        size = config.stream_bytes
        for side in alternate(("bare", "native"), index):
            if side == "bare":
                samples.add("stream/bare", size / await stream_bare(size) / MB)
            else:
                elapsed, delivered = await stream_native(native, size)
                samples.add("stream/native", size / elapsed / MB)
                samples.add("stream_delivered/native", delivered / elapsed / MB)
                samples.add("stream_delivered_share/native", delivered / size)
            forget_transcript(native)
        await close(echo)
        await self.spawns(native, index)
        await close(native)
        await self.cold_starts(index)

    async def spawns(self, native: WorkerClient, index: int) -> None:
        native.pending_events()
        events = aiter(native.events())
        modes = {"unconfined": PermissionMode.UNCONFINED, "standard": PermissionMode.STANDARD}
        for mode in modes.values():  # the first confined start builds the sandbox's ruleset
            await start_exit(native, events, mode)
        await spawn_bare()
        timings: dict[str, list[float]] = defaultdict(list)
        for turn in range(share(self.config.spawns, self.config.rounds, index)):
            for side in alternate(("bare", "unconfined", "standard"), index + turn):
                if side == "bare":
                    timings[side].append(await spawn_bare())
                else:
                    timings[side].append(await start_exit(native, events, modes[side]))
        for side, values in timings.items():
            self.samples.add(f"start_exit/{side}", statistics.median(values))
            self.samples.rounds[f"start_exit_all/{side}"].extend(values)

    async def cold_starts(self, index: int) -> None:
        timings: dict[str, list[float]] = defaultdict(list)
        for turn in range(share(self.config.cold_starts, self.config.rounds, index)):
            for side in alternate(("echo", "native"), index + turn):
                if side == "echo":
                    timings[side].append(await cold_echo(self.init_reply))
                else:
                    timings[side].append(await cold_native(self.root))
        for side, values in timings.items():
            self.samples.add(f"cold/{side}", statistics.median(values))
            self.samples.rounds[f"cold_all/{side}"].extend(values)

    async def measure_memory(self) -> None:
        """One more export per side by fresh workers, untimed, with the worker's RSS watched."""
        echo = await WorkerClient.spawn(ECHO_COMMAND)
        await data_of(echo, "echo", {})
        self.memory["echo"] = await peak_above_idle(echo, lambda: export_echo(echo, self.export_file))
        await close(echo)
        native = await spawn_native(self.root)
        self.memory["native"] = await peak_above_idle(native, lambda: export_typed(native, self.export_file))
        await close(native)
        for side, found in self.memory.items():
            self.samples.add(f"memory/{side}", found["delta_mib"])


def share(total: int, rounds: int, index: int) -> int:
    """Round `index`'s part of `total` samples spread over `rounds` rounds."""
    return total // rounds + (1 if index < total % rounds else 0)


# --- the report --------------------------------------------------------------------------------------


def figures(samples: Samples) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for spec in FIGURES:
        value = samples.median(spec.side)
        baseline = samples.median(spec.baseline)
        ratio = paired_ratio(samples.rounds[spec.side], samples.rounds[spec.baseline])
        passed = None if spec.target is None else spec.target.met(value, ratio)
        found[spec.key] = {
            "label": spec.label.strip(),
            "unit": spec.unit,
            "value": value,
            "baseline": baseline,
            "baseline_side": spec.baseline_label,
            "ratio": ratio,
            "ratio_of_medians": value / baseline if baseline else None,
            "target": None if spec.target is None else spec.target.text(spec.unit),
            "pass": passed,
            "rounds": {"value": samples.rounds[spec.side], "baseline": samples.rounds[spec.baseline]},
        }
    return found


def paired_ratio(values: Sequence[float], baselines: Sequence[float]) -> float | None:
    """The median of the rounds' ratios: each round measures both sides back to back, so a slow
    stretch of a noisy machine weighs on both sides of one ratio instead of on one side of the median."""
    if len(values) != len(baselines):
        return statistics.median(values) / statistics.median(baselines)
    ratios = [value / baseline for value, baseline in zip(values, baselines, strict=True) if baseline]
    return statistics.median(ratios) if ratios else None


def number(value: float, unit: str) -> str:
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"


def table(found: dict[str, dict[str, Any]]) -> str:
    header = ("figure", "native", "baseline", "ratio", "target", "result")
    rows = [header]
    for spec in FIGURES:
        figure = found[spec.key]
        verdict = "" if figure["pass"] is None else ("PASS" if figure["pass"] else "MISS")
        rows.append(
            (
                spec.label,
                number(figure["value"], spec.unit),
                f"{number(figure['baseline'], spec.unit)} ({spec.baseline_label})",
                f"{figure['ratio']:.2f}x" if figure["ratio"] is not None else "",
                figure["target"] or "",
                verdict,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = []
    for number_of_row, row in enumerate(rows):
        cells = [
            cell.ljust(width) if column in (0, 4, 5) else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if number_of_row == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "orjson": orjson.__version__,
        "loadavg_at_start": list(os.getloadavg()),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run with small sizes")
    parser.add_argument("--json", default="bench.json", type=Path, help="where to write the JSON report")
    parser.add_argument("--rounds", type=int, help="rounds of every measurement (default 3, quick 1)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    config = QUICK if args.quick else FULL
    if args.rounds:
        config = Config(**{**asdict(config), "rounds": args.rounds})
    info = machine()

    def log(message: str) -> None:
        print(f"bench: {message}", file=sys.stderr, flush=True)

    log(f"{'quick' if args.quick else 'full'} run, {config.rounds} round(s), {info['nproc']} CPUs")
    workdir = Path(tempfile.mkdtemp(prefix="wuu-bench-"))
    began = time.perf_counter()
    try:
        bench = Bench(config, workdir, log)
        asyncio.run(bench.run())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    info["loadavg_at_end"] = list(os.getloadavg())
    found = figures(bench.samples)
    report = {
        "machine": info,
        "config": {
            **asdict(config),
            "in_flight": IN_FLIGHT,
            "export_chunk": EXPORT_CHUNK,
            "stream_read": STREAM_READ,
            "quick": args.quick,
        },
        "seconds": time.perf_counter() - began,
        "figures": found,
        "memory": bench.memory,
        "samples": {
            key: {"median": statistics.median(values), "rounds": values}
            for key, values in sorted(bench.samples.rounds.items())
        },
    }
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(table(found))
    print(
        f"\nnative: `python {' '.join(NATIVE_COMMAND[1:])}` through the typed WorkerClient; (diag.) rows: the "
        "same worker through\nWorkerClient.request (no host-side models); echo: tools/bench_echo.py through "
        "WorkerClient.request.\nValues are medians over the rounds; ratio is the median of the rounds' "
        "native/baseline ratios."
    )
    delivered = bench.samples.median("stream_delivered_share/native")
    print(
        f"process/read delivered {delivered:.1%} of the output"
        + (
            ": the worker keeps only a tail of it, and a fast writer outruns the reads."
            if delivered < 0.99
            else "."
        )
    )
    start, end = info["loadavg_at_start"][0], info["loadavg_at_end"][0]
    print(
        f"{info['nproc']} CPUs, Python {info['python']}, load average {start:.2f} at start, {end:.2f} at end"
        f"{' (other work was running: figures are noisier)' if start > 0.5 else ''}; "
        f"{report['seconds']:.0f} s; JSON: {args.json}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
