"""The spec's tools catch what they exist to catch, on a scratch copy of the repository.

Each tool runs as `python -m tools.<name>` from the scratch root, as `make` runs it from the repository's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A copy of spec/, tools/, generated/ and the project's ruff settings."""
    for folder in ("spec", "tools", "generated"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def run_tool(root: Path, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m tools.<tool> args...` with `root` as the repository root."""
    return subprocess.run(
        [sys.executable, "-m", f"tools.{tool}", *args], cwd=root, capture_output=True, text=True, timeout=300
    )


def edit_json(path: Path, edit: object) -> None:
    document = json.loads(path.read_text())
    edit(document)  # type: ignore[operator]
    path.write_text(json.dumps(document, indent=2))


def test_speclint_names_a_missing_description(scratch: Path) -> None:
    path = scratch / "spec/schema/worker/process.schema.json"
    edit_json(path, lambda d: d["$defs"]["ProcessGetParams"]["properties"]["id"].pop("description"))
    result = run_tool(scratch, "speclint")
    assert result.returncode == 1
    assert (
        "worker/process.schema.json#/$defs/ProcessGetParams/properties/id: needs a description"
        in result.stdout
    )


def test_speclint_catches_an_invalid_example_that_is_accepted(scratch: Path) -> None:
    path = scratch / "spec/examples/worker/ProcessReadParams.json"
    edit_json(
        path,
        lambda d: d["invalid"].append({"description": "fine", "instance": {"Process": "p"}, "field": ""}),
    )
    result = run_tool(scratch, "speclint")
    assert result.returncode == 1
    assert "(fine) is accepted" in result.stdout


def test_speclint_refuses_a_keyword_of_the_generator_in_the_spec(scratch: Path) -> None:
    path = scratch / "spec/schema/worker/process.schema.json"
    edit_json(path, lambda d: d["$defs"]["ProcessGetParams"]["properties"]["id"].update({"x-not-null": True}))
    result = run_tool(scratch, "speclint")
    assert result.returncode == 1
    assert (
        "worker/process.schema.json#/$defs/ProcessGetParams/properties/id: "
        "x-not-null is added by the generator, never written in spec/" in result.stdout
    )


def test_parity_names_a_field_missing_from_the_twin(scratch: Path) -> None:
    path = scratch / "spec/proto/wuu/worker/v4/worker.proto"
    text = path.read_text()
    line = next(line for line in text.splitlines() if 'json_name = "MinDwell"' in line)
    path.write_text(text.replace(line + "\n", ""))
    result = run_tool(scratch, "parity")
    assert result.returncode == 1
    assert "wuu.worker.v4.ProcessReadParams: no field has json_name 'MinDwell'" in result.stdout


def test_check_generated_prints_the_diff_of_a_hand_edit(scratch: Path) -> None:
    path = scratch / "generated/catalog.py"
    path.write_text(
        path.read_text().replace(
            "WORKER_MAX_FRAME_BYTES: Final = 16777216", "WORKER_MAX_FRAME_BYTES: Final = 1"
        )
    )
    result = run_tool(scratch, "generate", "--check")
    assert result.returncode == 1
    assert "-WORKER_MAX_FRAME_BYTES: Final = 1\n+WORKER_MAX_FRAME_BYTES: Final = 16777216" in result.stdout


def test_generation_is_deterministic(scratch: Path) -> None:
    result = run_tool(scratch, "generate")
    assert result.returncode == 0, result.stderr
    result = run_tool(scratch, "generate", "--check")
    assert result.returncode == 0, result.stdout
    fresh = {
        p.relative_to(scratch / "generated"): p.read_bytes()
        for p in (scratch / "generated").rglob("*")
        if p.is_file()
    }
    committed = {
        p.relative_to(ROOT / "generated"): p.read_bytes()
        for p in (ROOT / "generated").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert fresh == committed


def test_speclint_refuses_a_plugin_method_without_its_service(scratch: Path) -> None:
    def drop_service(catalog: dict[str, Any]) -> None:
        entry = next(e for e in catalog["methods"] if e["method"] == "agents.send")
        del entry["service"]

    edit_json(scratch / "spec/methods/userhost.json", drop_service)
    result = run_tool(scratch, "speclint")
    assert result.returncode == 1
    assert "agents.send: a plugin_request method names its plugin's service" in result.stdout
