"""`wuu exec`: one non-interactive run of the built-in engine (the stand-in model) on a project, its calls run
by a real native worker in the flag's permission mode, with the exit statuses and the JSON result of
spec/schema/permissions/exec_run.schema.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from wuu.generated import validators

WUU = str(Path(sys.executable).with_name("wuu"))


def wuu_exec(project: Path, prompt: str, *flags: str) -> tuple[int, Any, str]:
    """Run `wuu exec --json FLAGS PROMPT` in `project`: its exit status, its JSON result (None without one)
    and its stderr."""
    home = project.parent / "home"
    ran = subprocess.run(
        [WUU, "exec", "--json", "--home", str(home), *flags, prompt],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    result = json.loads(ran.stdout) if ran.stdout else None
    if result is not None:
        assert validators.errors("ExecRun", result) == []
    return ran.returncode, result, ran.stderr


def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def test_standard_runs_the_call_and_reports_it(tmp_path: Path) -> None:
    root = project(tmp_path)
    status, result, _ = wuu_exec(root, "/write notes.txt\nhello\n")
    assert status == 0
    assert (root / "notes.txt").read_text() == "hello\n"
    assert result["status"] == "completed" and result["permission_mode"] == "standard"
    assert result["root"] == str(root)
    [call] = result["calls"]
    assert (call["tool"], call["outcome"], call["is_error"]) == ("write_file", "ran", False)


def test_read_only_refuses_a_write_without_asking_and_exits_3(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "notes.txt").write_text("kept\n")
    status, result, _ = wuu_exec(root, "/write notes.txt\nchanged\n", "--permission-mode", "read_only")
    assert status == 3
    assert (root / "notes.txt").read_text() == "kept\n"
    [call] = result["calls"]
    assert call["outcome"] == "refused" and call["error"].startswith("permission_denied: ")
    assert result["text"] == f"refused: {call['error']}", "the model is told of the refusal"


def test_read_only_commands_run_under_the_sandbox(tmp_path: Path) -> None:
    root = project(tmp_path)
    status, result, _ = wuu_exec(root, "/run sh -c 'echo x > made.txt'", "--permission-mode", "read_only")
    assert status == 0
    [call] = result["calls"]
    assert (call["outcome"], call["is_error"]) == ("ran", True)
    assert "Read-only" in call["output"] or "Permission denied" in call["output"]
    assert not (root / "made.txt").exists()


def test_no_project_file_replaces_the_mode(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / ".wuu").mkdir()
    for name in ("config.json", "settings.json"):
        (root / ".wuu" / name).write_text(json.dumps({"permission_mode": "unconfined"}))
    outside = tmp_path / "outside.txt"
    status, result, _ = wuu_exec(root, f"/write {outside}\nescaped\n")
    assert status == 3
    assert result["permission_mode"] == "standard" and result["calls"][0]["error"].startswith(
        "path_outside_root"
    )
    assert not outside.exists()


def test_a_model_that_cannot_answer_fails_the_run_with_status_1(tmp_path: Path) -> None:
    root = project(tmp_path)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"model": {"kind": "openai_chat", "base_url": "http://127.0.0.1:9", "model": "m"}})
    )
    status, result, _ = wuu_exec(root, "hello", "--config", str(config))
    assert status == 1
    assert result["status"] == "failed" and result["failure"].startswith("the model gave no usable reply")
    assert result["calls"] == []


def test_bad_flags_and_configuration_are_named_and_run_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    for flags, named in (
        (("--cd", str(tmp_path / "missing")), "--cd:"),
        (("--home", "relative/home"), "--home: 'relative/home' is not an absolute path"),
        (("--config", "config.json"), "--config: 'config.json' is not an absolute path"),
    ):
        status, result, stderr = wuu_exec(root, "/write x.txt\nx", *flags)
        assert (status, result) == (2, None)
        assert named in stderr
    assert not (root / "x.txt").exists()
