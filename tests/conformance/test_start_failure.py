"""A command under test that cannot start is reported once, plainly, and the run exits 2 without a case."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wuu.conformance import cli


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("suite", ["worker", "userhost"])
def test_a_command_that_does_not_exist(
    suite: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "no-such-adapter")
    code, out, err = run(["run", "--suite", suite, "--", missing, "--flag"], capsys)
    assert code == 2 and out == ""
    assert err.count("cannot start") == 1, err
    assert f"ran:      {missing} --flag" in err and "no such command" in err


def test_a_file_that_is_not_executable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "adapter.sh"
    script.write_text("#!/bin/sh\n")
    code, out, err = run(["run", "--", str(script)], capsys)
    assert (code, out) == (2, "")
    assert "not executable" in err


def test_an_adapter_that_exits_before_answering_shows_its_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    crash = [sys.executable, "-c", "import sys; sys.stderr.write('boom: no config\\n'); sys.exit(3)"]
    code, out, err = run(["run", "--", *crash], capsys)
    assert (code, out) == (2, "")
    assert "it exited with status 3 before answering its first request" in err
    assert "    boom: no config" in err


def test_a_host_refusing_its_flags_is_reported_with_its_message(capsys: pytest.CaptureFixture[str]) -> None:
    # No --user-space: `wuu-userhost serve` refuses to start and says which flag is missing.
    command = [
        sys.executable,
        "-m",
        "wuu.host.userhost",
        "serve",
        "--home",
        "{home}",
        "--product-domain",
        "p",
    ]
    code, out, err = run(["run", "--suite", "userhost", "--", *command, "--stdio"], capsys)
    assert (code, out) == (2, "")
    assert "before answering its first request" in err and "--user-space" in err


def test_an_adapter_that_never_answers_is_reported_after_the_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]
    code, out, err = run(["run", "--timeout", "1", "--", *silent], capsys)
    assert (code, out) == (2, "")
    assert "did not answer its first request within 1 s" in err
