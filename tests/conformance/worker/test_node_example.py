"""The Node.js example adapter keeps copies of the spec's sensitive-path and redaction rules; they must equal
the spec's data."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

RULES = ROOT / "conformance" / "examples" / "node" / "sensitive_rules.mjs"
PRINT_RULES = f"import {{ SENSITIVE_PATH_RULES }} from {json.dumps(RULES.as_uri())};\n" + (
    "process.stdout.write(JSON.stringify(SENSITIVE_PATH_RULES));"
)


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_node_copy_of_the_sensitive_path_rules_equals_the_spec() -> None:
    spec = json.loads((ROOT / "spec" / "data" / "sensitive_paths.json").read_text("utf-8"))
    expected = [{key: value for key, value in rule.items() if key != "reason"} for rule in spec["rules"]]
    printed = subprocess.run(
        ["node", "--input-type=module", "-e", PRINT_RULES],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(printed.stdout) == expected


REDACTION = ROOT / "conformance" / "examples" / "node" / "redaction_rules.mjs"
PRINT_REDACTION = f"import {{ REDACTION_RULES }} from {json.dumps(REDACTION.as_uri())};\n" + (
    "process.stdout.write(JSON.stringify(REDACTION_RULES));"
)


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_node_copy_of_the_redaction_rules_equals_the_spec() -> None:
    spec = json.loads((ROOT / "spec" / "data" / "redaction_rules.json").read_text("utf-8"))
    expected = [{key: value for key, value in rule.items() if key != "description"} for rule in spec["rules"]]
    printed = subprocess.run(
        ["node", "--input-type=module", "-e", PRINT_REDACTION],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(printed.stdout) == expected
