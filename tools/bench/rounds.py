"""The run: a file to export, then every figure's sides measured round by round, then memory."""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from wuu.generated.models import PermissionMode, ProcessListParams, ProcessListResult
from wuu.worker.client import WorkerClient
from wuu.worker.native import confine

from .backends import backend_round
from .cold_start import cold_echo, cold_native
from .config import MB, MIB, Config
from .exports import export_echo, export_typed, export_wire
from .memory import export_memory
from .personal import personal_round, search_figures
from .processes import spawn_bare, spawn_echo, start_exit
from .round_trips import EMPTY_LIST_REPLY, cpu_seconds, pipelined, placed, round_trips
from .run_code import run_code_round
from .samples import Samples, alternate, percentile, share
from .streaming import stream_round
from .tool_search import make_tree, search_round
from .userhost import userhost_round
from .workers import ECHO_COMMAND, NATIVE_COMMAND, SESSION, close, data_of, forget_transcript, spawn_native


class Bench:
    """One run of every measurement; its samples, the memory figures and the initialize reply."""

    def __init__(self, config: Config, workdir: Path, log: Callable[[str], None]) -> None:
        self.config = config
        self.workdir = workdir
        self.root = workdir / "root"
        self.root.mkdir()
        self.export_file = self.root / "export.bin"
        self.search_tree = make_tree(self.root)
        self.samples = Samples()
        self.memory: dict[str, dict[str, float]] = {}
        self.init_reply: dict[str, Any] = {}
        self.log = log

    async def run(self) -> None:
        """Write the file to export, measure every round, then the memory figures."""
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
        self.log("search")
        await search_figures(self.config, self.samples, self.workdir / "search", self.log)
        self.log("memory")
        self.memory = await export_memory(self.root, self.export_file)
        for side, found in self.memory.items():
            self.samples.add(f"memory/{side}", found["delta_mib"])

    async def sequential_round_trips(
        self, calls: dict[str, Callable[[], Awaitable[object]]], pids: list[int], index: int
    ) -> None:
        """Sequential round trips of every side, with both ends on one CPU, then untyped on two CPUs."""
        config, samples = self.config, self.samples
        for apart, sides, suffix in ((False, tuple(calls), ""), (True, ("echo", "wire"), "_two_cpus")):
            with placed(pids, apart=apart) as pinned:
                if not pinned:
                    samples.mark_absent(f"rtt_p50{suffix}/", "one CPU only")
                    continue
                latencies: dict[str, list[float]] = defaultdict(list)
                for side in sides:
                    await round_trips(calls[side], config.warmup)
                for block in range(config.rtt_blocks):
                    for side in alternate(sides, index + block):
                        latencies[side] += await round_trips(
                            calls[side], config.rtt_requests // config.rtt_blocks
                        )
                for side in sides:
                    samples.add(f"rtt_p50{suffix}/{side}", percentile(latencies[side], 0.50))
                    samples.add(f"rtt_p99{suffix}/{side}", percentile(latencies[side], 0.99))

    async def round(self, index: int) -> None:
        """Round `index` of every timed figure, each side in turn."""
        config, samples = self.config, self.samples
        echo = await WorkerClient.spawn(ECHO_COMMAND)
        native = await spawn_native(self.root)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "echo": lambda: data_of(echo, "echo", EMPTY_LIST_REPLY),
            # The echo answers the data it is sent: sent a process/list result, it answers one, which the
            # typed client decodes exactly as it decodes the native worker's.
            "echo_typed": lambda: echo.call("echo", ProcessListResult(processes=[]), ProcessListResult),
            "native": lambda: native.process_list(ProcessListParams()),
            "wire": lambda: data_of(native, "process/list", {}),
        }
        clients = {"echo": echo, "native": native, "wire": native}
        await self.sequential_round_trips(
            calls, [client.process.pid for client in (echo, native) if client.process], index
        )
        forget_transcript(echo, native)
        sides = ("echo", "native", "wire")
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
        await stream_round(native, config.stream_bytes, index, samples)
        await self.spawns(native, echo, index)
        await search_round(native, self.root, self.search_tree, samples, index)
        await run_code_round(self.root, samples, index)
        await close(echo)
        await close(native)
        await self.cold_starts(index)
        await backend_round(config, samples, self.workdir / f"be{index}", index)
        await userhost_round(config, samples, self.workdir / f"uh{index}", index)
        await personal_round(config, samples, self.workdir / f"pe{index}", index)

    async def spawns(self, native: WorkerClient, echo: WorkerClient, index: int) -> None:
        """Round `index`'s share of process/start..exit in each mode, beside bare spawns and spawns
        through the echo worker (directly and through wuu-confine)."""
        native.pending_events()
        events = aiter(native.events())
        modes = {"unconfined": PermissionMode.UNCONFINED, "standard": PermissionMode.STANDARD}
        for mode in modes.values():  # the first confined start builds the sandbox's ruleset
            await start_exit(native, events, mode)
        await spawn_bare()
        await spawn_echo(echo)
        helper = confine.helper()
        if helper is None:
            self.samples.mark_absent(
                "start_exit/echo_confine", "wuu-confine is not built: confined starts fork"
            )
        sides = ["bare", "echo", *(["echo_confine"] if helper else []), "unconfined", "standard"]
        timings: dict[str, list[float]] = defaultdict(list)
        for turn in range(share(self.config.spawns, self.config.rounds, index)):
            for side in alternate(sides, index + turn):
                if side == "bare":
                    timings[side].append(await spawn_bare())
                elif side.startswith("echo"):
                    timings[side].append(await spawn_echo(echo, helper if side == "echo_confine" else None))
                else:
                    timings[side].append(await start_exit(native, events, modes[side]))
        for side, values in timings.items():
            self.samples.add(f"start_exit/{side}", statistics.median(values))
            self.samples.rounds[f"start_exit_all/{side}"].extend(values)

    async def cold_starts(self, index: int) -> None:
        """Round `index`'s share of cold starts of each worker."""
        timings: dict[str, list[float]] = defaultdict(list)
        for turn in range(share(self.config.cold_starts, self.config.rounds, index)):
            for side in alternate(("echo", "native"), index + turn):
                if side == "native":
                    timings[side].append(await cold_native(self.root))
                else:
                    timings[side].append(await cold_echo(self.init_reply))
        for side, values in timings.items():
            self.samples.add(f"cold/{side}", statistics.median(values))
            self.samples.rounds[f"cold_all/{side}"].extend(values)
