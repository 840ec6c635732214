"""`make bench` works end to end: a quick run of `python -m tools.bench` reports every figure (no speed
assertions: the machine is noisy, and speed is what `make bench` itself measures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tools.bench import figures as bench_figures
from tools.bench import report
from tools.bench.samples import Samples

ROOT = Path(__file__).resolve().parents[2]

FIGURES = (
    "rtt_p50",
    "rtt_p99",
    "rtt_p50_wire",
    "rtt_p99_wire",
    "rtt_p50_typed_echo",
    "rtt_p50_two_cpus",
    "pipelined",
    "pipelined_cpu",
    "pipelined_wire",
    "export",
    "export_reads",
    "export_wire",
    "stream",
    "stream_delivered",
    "stream_share",
    "stream_wait",
    "stream_share_wait",
    "cold_start",
    "start_exit_unconfined",
    "start_exit_floor",
    "start_exit_over_floor",
    "start_exit_standard",
    "start_exit_standard_floor",
    "start_exit_standard_over_floor",
    "search_content",
    "run_code",
    "export_peak_rss",
    "connection_local",
    "connection_local_floor",
    "connection_command",
    "connection_docker",
    "connection_docker_floor",
    "connection_ssh",
    "connection_ssh_floor",
    "connection_ssh_fresh_floor",
    "connection_ssh_client_floor",
    "connection_ssh_added",
    "connection_ssh_fresh_bound",
    "userhost_rtt_p50",
    "userhost_rtt_p99",
    "userhost_grpc_p50",
    "userhost_grpc_p99",
    "userhost_clients",
    "personal_send_1",
    "personal_send_16",
    "personal_send_1_agent",
    "personal_send_16_agent",
    *(
        f"personal_send_{clients}_{row}"
        for clients in (1, 16)
        for row in ("floor_row", "floor_admission", "of_floor")
    ),
    *(f"personal_cpu_{clients}_{side}" for clients in (1, 16) for side in ("loop", "threads")),
    "search_p50_rare_all",
    "search_p99_rare_all",
    "search_p50_rare_bounded",
    "search_p99_rare_bounded",
    "search_p50_common_all",
    "search_p99_common_all",
    "search_p50_common_bounded",
    "search_p99_common_bounded",
)
TARGETED = (
    "rtt_p50",
    "rtt_p99",
    "rtt_p50_wire",
    "pipelined",
    "export",
    "stream_share_wait",
    "cold_start",
    "start_exit_unconfined",
    "start_exit_standard",
    "export_peak_rss",
    "connection_local",
    "connection_command",
    "connection_docker",
    "connection_ssh",
    "userhost_rtt_p50",
    "userhost_grpc_p50",
    "personal_send_1",
    "personal_send_16",
    "search_p50_rare_all",
    "search_p99_rare_all",
    "search_p50_rare_bounded",
    "search_p99_rare_bounded",
    "search_p50_common_all",
    "search_p99_common_all",
    "search_p50_common_bounded",
    "search_p99_common_bounded",
)


def test_quick_bench_reports_every_figure(tmp_path: Path) -> None:
    report_path = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--quick", "--json", str(report_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(report_path.read_text())
    assert report["machine"]["nproc"] >= 1
    assert report["machine"]["python"] == sys.version.split()[0]
    figures = report["figures"]
    assert set(figures) == set(FIGURES)
    for key, figure in figures.items():
        if (
            "absent" in figure
        ):  # docker, ssh, a second CPU, ripgrep or Node.js is not available here: the row says why
            assert key.startswith(
                ("connection_docker", "connection_ssh", "rtt_p50_two_cpus", "search_content", "run_code")
            ), key
            assert figure["absent"], key
            continue
        assert figure["value"] > 0, key
        assert figure["baseline"] > 0, key
        assert figure["ratio"] > 0, key
        assert figure["rounds"]["value"] and figure["rounds"]["baseline"], key
        assert (figure["target"] is not None) == (key in TARGETED), key
        assert isinstance(figure["pass"], bool) == (key in TARGETED), key
    for key, sample in report["samples"].items():
        assert sample["rounds"] and sample["median"] > 0, key
    # The table names every figure's verdict.
    assert "figure" in run.stdout and ("PASS" in run.stdout or "MISS" in run.stdout)


def test_a_missed_target_that_its_floor_misses_too_is_floor_bound() -> None:
    spec = next(spec for spec in bench_figures.FIGURES if spec.key == "start_exit_standard")
    assert spec.floor is not None and spec.target == bench_figures.Target("ratio_max", 1.3)
    verdicts = {}
    for floor in (1.9, 1.2):  # the floor's ratio to the bare spawn: over the target, then within it
        samples = Samples()
        for key, value in ((spec.side, 2.0), (spec.baseline, 1.0), (spec.floor, floor)):
            samples.add(key, value)
        verdicts[floor] = report.verdict(bench_figures.figure(spec, samples))
    assert verdicts == {1.9: "FLOOR", 1.2: "MISS"}
