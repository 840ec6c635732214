"""What a run prints: the table of figures, the notes under it, and the machine it ran on."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_DEFAULT_OUTPUT_RETENTION_BYTES

from .config import MIB
from .figures import FIGURES
from .workers import NATIVE_COMMAND


def number(value: float, unit: str) -> str:
    """A value with its unit, to three significant digits or as a whole number."""
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"


def verdict(figure: dict[str, Any]) -> str:
    """A figure's result: PASS, MISS, FLOOR (missed, as its floor misses it too), or nothing (no target)."""
    if figure["pass"] is None:
        return ""
    return "PASS" if figure["pass"] else "FLOOR" if figure["floor_bound"] else "MISS"


def table(found: dict[str, dict[str, Any]]) -> str:
    """The figures as a text table: figure, measured value, baseline, ratio, target, result."""
    header = ("figure", "measured", "baseline", "ratio", "target", "result")
    rows = [header]
    for spec in FIGURES:
        figure = found[spec.key]
        if "absent" in figure:  # a backend this machine cannot run: the last column says why
            rows.append((spec.label, "absent", "", "", "", f"({figure['absent']})"))
            continue
        rows.append(
            (
                spec.label,
                number(figure["value"], spec.unit),
                f"{number(figure['baseline'], spec.unit)} ({spec.baseline_label})",
                f"{figure['ratio']:.2f}x" if figure["ratio"] is not None else "",
                figure["target"] or "",
                verdict(figure),
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


def notes(report: dict[str, Any], delivered: float, json_path: Path) -> str:
    """The text under the table: what the sides are, how much process/read delivered, and the run."""
    info, config = report["machine"], report["config"]
    start, end = info["loadavg_at_start"][0], info["loadavg_at_end"][0]
    return (
        f"\nworker rows: `python {' '.join(NATIVE_COMMAND[1:])}` through the typed WorkerClient; (diag.) rows: "
        "the same worker through\nWorkerClient.request (no host-side models); echo: tools/bench/echo.py through "
        "WorkerClient.request, or through\nthe same typed call where the row says so. Round trips marked one CPU: "
        "the bench and both servers pinned to one CPU.\nuser host rows: `python -m wuu.host.userhost serve` with "
        "no plugin, `plugin/client/cancel` of an unused id through\nthe typed clients; NDJSON echo: "
        "tools/bench/jsonrpc_echo.py through the same typed call; gRPC echo: grpc_echo.py, raw requests.\n"
        "connection rows: spawn..initialize..EOF..exit through `wuu-host adapter` (tools/bench/backends.py); "
        "bound: the worker alone\n(spawned directly) + 50 ms for local and command, 1.5 x the transport floor "
        "+ the worker alone for docker and ssh (floors in this process: the SDKs' imports are not in them).\n"
        "An adapter is a fresh process per connection: the ssh rows' fresh-process floor imports asyncssh "
        "first, and the OpenSSH\nclient is the other transport it could use.\n"
        "Values are medians over the rounds; ratio is the median of the rounds' measured/baseline ratios.\n"
        "FLOOR: the target is missed, and the row's floor (a row beneath it: the same work with nothing of this "
        "project's in it)\nmisses it too, so it is out of reach on this machine; the row over the floor says how "
        "close the project comes.\n"
        f"process/read delivered {delivered:.1%} of a {config['stream_bytes'] / MIB:g} MiB burst at the default "
        f"retention ({WORKER_DEFAULT_OUTPUT_RETENTION_BYTES / MIB:g} MiB), in back-to-back reads of up to "
        f"{config['stream_read'] / MIB:g} MiB that wait for new bytes"
        + (
            ":\nthe worker keeps only a tail of the output, and a fast writer outruns the reads "
            "(output_flow wait_for_reader makes it wait for them instead)."
            if delivered < 0.99
            else "."
        )
        + f"\n{info['nproc']} CPUs, Python {info['python']}, load average {start:.2f} at start, {end:.2f} at end"
        f"{' (other work was running: figures are noisier)' if start > 0.5 else ''}; "
        f"{report['seconds']:.0f} s; JSON: {json_path}"
    )


def machine() -> dict[str, Any]:
    """The machine and interpreter the run measures, and the load average at its start."""
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
