"""The command line of `make bench`: run every measurement, write the JSON report, print the table."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from .config import EXPORT_CHUNK, FULL, IN_FLIGHT, QUICK, STREAM_READ, Config
from .figures import figures
from .report import machine, notes, table
from .rounds import Bench


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options: --quick, --json PATH, --rounds N."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description="The native worker's and the user host's speed beside raw baselines measured in the same run.",
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run with small sizes")
    parser.add_argument("--json", default="bench.json", type=Path, help="where to write the JSON report")
    parser.add_argument("--rounds", type=int, help="rounds of every measurement (default 5, quick 1)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench; 0 whatever the figures (a missed target is reported, not raised)."""
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
    print(notes(report, bench.samples.median("stream_delivered_share/native"), args.json), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
