"""The reported figures: which samples each compares, its target, and its value, baseline and ratio."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .samples import Samples

MEMORY_LIMIT_MIB = 64.0


@dataclass(frozen=True)
class Target:
    """A figure's goal: its ratio to the baseline at most or at least `bound`, or its value below `bound`."""

    kind: str  # "ratio_max" | "ratio_min" | "value_max"
    bound: float

    def text(self, unit: str) -> str:
        """The target as the table shows it."""
        if self.kind == "ratio_max":
            return f"<= {self.bound:g}x"
        if self.kind == "ratio_min":
            return f">= {self.bound:g}x"
        return f"< {self.bound:g} {unit}"

    def met(self, value: float, ratio: float | None) -> bool:
        """Whether a figure's value and ratio meet the target."""
        if self.kind == "value_max":
            return value < self.bound
        assert ratio is not None
        return ratio <= self.bound if self.kind == "ratio_max" else ratio >= self.bound


@dataclass(frozen=True)
class FigureSpec:
    """One row of the report."""

    key: str
    label: str
    unit: str
    side: str  # the key of the measured side's samples
    baseline: str  # the key of the baseline's samples
    baseline_label: str
    target: Target | None
    floor: str | None = None
    """The key of the samples of this figure's floor, measured against the same baseline: what any
    implementation on this machine pays (another row shows it). A missed target that the floor misses too is
    out of reach here: the row says FLOOR instead of MISS."""


FIGURES = (
    FigureSpec(
        "rtt_p50",
        "round trip p50, process/list, one CPU",
        "us",
        "rtt_p50/native",
        "rtt_p50/echo_typed",
        "echo, typed client",
        Target("ratio_max", 1.2),
    ),
    FigureSpec(
        "rtt_p99",
        "  p99",
        "us",
        "rtt_p99/native",
        "rtt_p99/echo_typed",
        "echo, typed client",
        Target("ratio_max", 1.5),
    ),
    FigureSpec(
        "rtt_p50_wire",
        "  p50, untyped client on both",
        "us",
        "rtt_p50/wire",
        "rtt_p50/echo",
        "echo",
        Target("ratio_max", 1.2),
    ),
    FigureSpec(
        "rtt_p99_wire",
        "  p99, untyped client on both (diag.)",
        "us",
        "rtt_p99/wire",
        "rtt_p99/echo",
        "echo",
        None,
    ),
    FigureSpec(
        "rtt_p50_typed_echo",
        "  the typed client's decoding, on the echo (diag.)",
        "us",
        "rtt_p50/echo_typed",
        "rtt_p50/echo",
        "echo",
        None,
    ),
    FigureSpec(
        "rtt_p50_two_cpus",
        "  p50, untyped, worker on another CPU (diag.)",
        "us",
        "rtt_p50_two_cpus/wire",
        "rtt_p50_two_cpus/echo",
        "echo",
        None,
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
        "stream_share",
        "process/read delivered at default retention",
        "%",
        "stream_share/native",
        "stream_share/bare",
        "pipe read",
        None,
    ),
    FigureSpec(
        "stream_wait",
        "process/read stream, wait_for_reader, to exit",
        "MB/s",
        "stream/native_wait",
        "stream/bare",
        "pipe read",
        None,
    ),
    FigureSpec(
        "stream_share_wait",
        "  delivered with output_flow wait_for_reader",
        "%",
        "stream_share/native_wait",
        "stream_share/bare",
        "pipe read",
        Target("ratio_min", 0.5),
    ),
    FigureSpec(
        "cold_start",
        "cold start, spawn..initialize reply",
        "ms",
        "cold/native",
        "cold/echo",
        "echo",
        Target("ratio_max", 1.5),
    ),
    FigureSpec(
        "start_exit_unconfined",
        "process/start true..exit, unconfined",
        "ms",
        "start_exit/unconfined",
        "start_exit/bare",
        "bare spawn",
        Target("ratio_max", 1.2),
        floor="start_exit/echo",
    ),
    FigureSpec(
        "start_exit_floor",
        "  through the echo worker (floor, diag.)",
        "ms",
        "start_exit/echo",
        "start_exit/bare",
        "bare spawn",
        None,
    ),
    FigureSpec(
        "start_exit_over_floor",
        "  unconfined over that floor (diag.)",
        "ms",
        "start_exit/unconfined",
        "start_exit/echo",
        "through the echo",
        None,
    ),
    FigureSpec(
        "start_exit_standard",
        "process/start true..exit, standard",
        "ms",
        "start_exit/standard",
        "start_exit/bare",
        "bare spawn",
        Target("ratio_max", 1.3),
        floor="start_exit/echo_confine",
    ),
    FigureSpec(
        "start_exit_standard_floor",
        "  through the echo worker and wuu-confine (floor, diag.)",
        "ms",
        "start_exit/echo_confine",
        "start_exit/bare",
        "bare spawn",
        None,
    ),
    FigureSpec(
        "start_exit_standard_over_floor",
        "  standard over that floor (diag.)",
        "ms",
        "start_exit/standard",
        "start_exit/echo_confine",
        "through the echo, confined",
        None,
    ),
    FigureSpec(
        "search_content",
        "search_content of 200 files (diag.)",
        "ms",
        "search_content/native",
        "search_content/rg",
        "bare rg --json",
        None,
    ),
    FigureSpec(
        "run_code",
        "run_code with one tool call (diag.)",
        "ms",
        "run_code/native",
        "run_code/node",
        "bare node --permission -e",
        None,
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
    FigureSpec(
        "userhost_rtt_p50",
        "user host round trip p50, Unix socket, one CPU",
        "us",
        "userhost_rtt_p50/unix",
        "userhost_rtt_p50/unix_echo",
        "NDJSON echo, typed client",
        Target("ratio_max", 2.0),
    ),
    FigureSpec(
        "userhost_rtt_p99",
        "  p99 (diag.)",
        "us",
        "userhost_rtt_p99/unix",
        "userhost_rtt_p99/unix_echo",
        "NDJSON echo, typed client",
        None,
    ),
    FigureSpec(
        "userhost_grpc_p50",
        "user host round trip p50, gRPC",
        "us",
        "userhost_rtt_p50/grpc",
        "userhost_rtt_p50/grpc_echo",
        "gRPC echo",
        Target("ratio_max", 1.5),
    ),
    FigureSpec(
        "userhost_grpc_p99",
        "  p99 (diag.)",
        "us",
        "userhost_rtt_p99/grpc",
        "userhost_rtt_p99/grpc_echo",
        "gRPC echo",
        None,
    ),
    FigureSpec(
        "userhost_clients",
        "user host, 16 clients pipelining",
        "req/s",
        "userhost_clients/unix",
        "userhost_clients/unix_echo",
        "NDJSON echo",
        None,
    ),
    FigureSpec(
        "personal_send_1",
        "durable agents.send, 1 client",
        "sends/s",
        "personal_send_1/idle",
        "personal_send/raw_sqlite",
        "SQLite commit",
        Target("ratio_min", 0.5),
        floor="personal_send_1/floor_row",
    ),
    FigureSpec(
        "personal_send_1_agent",
        "  with the stand-in agent (diag.)",
        "sends/s",
        "personal_send_1/stand_in",
        "personal_send/raw_sqlite",
        "SQLite commit",
        None,
    ),
    FigureSpec(
        "personal_send_1_floor_row",
        "  floor: one-row commit, bare server (diag.)",
        "sends/s",
        "personal_send_1/floor_row",
        "personal_send/raw_sqlite",
        "SQLite commit",
        None,
    ),
    FigureSpec(
        "personal_send_1_floor_admission",
        "  floor: the store's admission, bare server (diag.)",
        "sends/s",
        "personal_send_1/floor_admission",
        "personal_send/raw_sqlite",
        "SQLite commit",
        None,
    ),
    FigureSpec(
        "personal_send_1_of_floor",
        "  the host against its admission floor (diag.)",
        "sends/s",
        "personal_send_1/idle",
        "personal_send_1/floor_admission",
        "admission floor",
        None,
    ),
    *(
        FigureSpec(
            f"personal_cpu_1_{side}",
            f"  CPU per send, {label} (diag.)",
            "us",
            f"personal_cpu_1_{side}/idle",
            f"personal_cpu_1_{side}/floor_admission",
            "admission floor",
            None,
        )
        for side, label in (("loop", "the event loop's thread"), ("threads", "the store's reader and writer"))
    ),
    FigureSpec(
        "personal_send_16",
        "durable agents.send, 16 clients",
        "sends/s",
        "personal_send_16/idle",
        "personal_send/raw_sqlite",
        "SQLite commit",
        Target("ratio_min", 1.0),
    ),
    FigureSpec(
        "personal_send_16_agent",
        "  with the stand-in agent (diag.)",
        "sends/s",
        "personal_send_16/stand_in",
        "personal_send/raw_sqlite",
        "SQLite commit",
        None,
    ),
    FigureSpec(
        "personal_send_16_floor_row",
        "  floor: one-row commit, bare server (diag.)",
        "sends/s",
        "personal_send_16/floor_row",
        "personal_send/raw_sqlite",
        "SQLite commit",
        None,
    ),
    FigureSpec(
        "personal_send_16_floor_admission",
        "  floor: the store's admission, bare server (diag.)",
        "sends/s",
        "personal_send_16/floor_admission",
        "personal_send/raw_sqlite",
        "SQLite commit",
        None,
    ),
    FigureSpec(
        "personal_send_16_of_floor",
        "  the host against its admission floor (diag.)",
        "sends/s",
        "personal_send_16/idle",
        "personal_send_16/floor_admission",
        "admission floor",
        None,
    ),
    *(
        FigureSpec(
            f"personal_cpu_16_{side}",
            f"  CPU per send, {label} (diag.)",
            "us",
            f"personal_cpu_16_{side}/idle",
            f"personal_cpu_16_{side}/floor_admission",
            "admission floor",
            None,
        )
        for side, label in (("loop", "the event loop's thread"), ("threads", "the store's reader and writer"))
    ),
    *(
        row
        for backend, label, bound, floor in (
            ("local", "local", "worker alone + 50 ms", "  the adapter alone: start, validate, exit (diag.)"),
            ("command", "command", "worker alone + 50 ms", None),
            ("docker", "docker", "1.5 x floor + worker", "  docker floor: create..exec true..rm (diag.)"),
            ("ssh", "ssh", "1.5 x floor + worker", "  ssh floor: connect, auth, true (diag.)"),
        )
        for row in (
            FigureSpec(
                f"connection_{backend}",
                f"one connection, {label} adapter",
                "ms",
                f"conn/{backend}",
                f"conn_bound/{backend}",
                bound,
                Target("ratio_max", 1.0),
                floor="conn/ssh_fresh_bound" if backend == "ssh" else None,
            ),
            *(
                ()
                if floor is None
                else (
                    FigureSpec(
                        f"connection_{backend}_floor",
                        floor,
                        "ms",
                        f"conn/{backend}_floor",
                        "conn/worker",
                        "worker alone",
                        None,
                    ),
                )
            ),
        )
    ),
    FigureSpec(
        "connection_ssh_fresh_floor",
        "  ssh floor, fresh process: import asyncssh, connect, true (diag.)",
        "ms",
        "conn/ssh_fresh_floor",
        "conn/worker",
        "worker alone",
        None,
    ),
    FigureSpec(
        "connection_ssh_client_floor",
        "  ssh floor, OpenSSH client: ssh HOST true (diag.)",
        "ms",
        "conn/ssh_client_floor",
        "conn/worker",
        "worker alone",
        None,
    ),
    FigureSpec(
        "connection_ssh_added",
        "  ssh adapter minus the worker alone (diag.)",
        "ms",
        "conn/ssh_added",
        "conn/ssh_fresh_floor",
        "fresh-process floor",
        None,
    ),
    FigureSpec(
        "connection_ssh_fresh_bound",
        "  the faster fresh-process floor + the worker alone (floor, diag.)",
        "ms",
        "conn/ssh_fresh_bound",
        "conn_bound/ssh",
        "1.5 x floor + worker",
        None,
    ),
    *(
        FigureSpec(
            f"search_{quantile}_{kind}",
            f"search, {label} {quantile}" if quantile == "p50" else f"  {quantile}",
            "ms",
            f"search_{quantile}_{kind}/host",
            f"search_{quantile}_{kind}/raw",
            "FTS5 query",
            Target("value_max", 5.0 if quantile == "p50" else 50.0),
        )
        for kind, label in (
            ("rare_all", "rare term"),
            ("rare_bounded", "rare term, time bounds"),
            ("common_all", "common term"),
            ("common_bounded", "common term, time bounds"),
        )
        for quantile in ("p50", "p99")
    ),
)


def figures(samples: Samples) -> dict[str, dict[str, Any]]:
    """Every figure of FIGURES, by key, as the JSON report holds it."""
    return {spec.key: figure(spec, samples) for spec in FIGURES}


def figure(spec: FigureSpec, samples: Samples) -> dict[str, Any]:
    """One figure as the JSON report holds it: absent (and why), or its value, baseline, ratio and verdict."""
    if not samples.rounds.get(spec.side) and (why := samples.why_absent(spec.side)) is not None:
        return {"label": spec.label.strip(), "unit": spec.unit, "absent": why, "pass": None}
    value = samples.median(spec.side)
    baseline = samples.median(spec.baseline)
    ratio = paired_ratio(samples.rounds[spec.side], samples.rounds[spec.baseline])
    passed = None if spec.target is None else spec.target.met(value, ratio)
    floor_bound = None
    if passed is False and spec.floor is not None and samples.rounds.get(spec.floor):
        assert spec.target is not None
        floor_ratio = paired_ratio(samples.rounds[spec.floor], samples.rounds[spec.baseline])
        floor_bound = not spec.target.met(samples.median(spec.floor), floor_ratio)
    return {
        "label": spec.label.strip(),
        "unit": spec.unit,
        "value": value,
        "baseline": baseline,
        "baseline_side": spec.baseline_label,
        "ratio": ratio,
        "ratio_of_medians": value / baseline if baseline else None,
        "target": None if spec.target is None else spec.target.text(spec.unit),
        "pass": passed,
        "floor_bound": floor_bound,
        "rounds": {"value": samples.rounds[spec.side], "baseline": samples.rounds[spec.baseline]},
    }


def paired_ratio(values: Sequence[float], baselines: Sequence[float]) -> float | None:
    """The median of the rounds' ratios: each round measures both sides back to back, so a slow
    stretch of a noisy machine weighs on both sides of one ratio instead of on one side of the median."""
    if len(values) != len(baselines):
        return statistics.median(values) / statistics.median(baselines)
    ratios = [value / baseline for value, baseline in zip(values, baselines, strict=True) if baseline]
    return statistics.median(ratios) if ratios else None
