"""The Node.js example adapter keeps copies of the spec's sensitive-path and redaction rules; they must equal
the spec's data."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

NODE = ROOT / "conformance" / "examples" / "node"


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
@pytest.mark.parametrize(
    ("module", "export", "data", "prose"),
    [
        ("sensitive_rules.mjs", "SENSITIVE_PATH_RULES", "sensitive_paths.json", "reason"),
        ("redaction_rules.mjs", "REDACTION_RULES", "redaction_rules.json", "description"),
    ],
)
def test_the_node_copy_of_the_rules_equals_the_spec(module: str, export: str, data: str, prose: str) -> None:
    # The copy leaves out the rules' prose (`prose`), which the adapter never shows.
    spec = json.loads((ROOT / "spec" / "data" / data).read_text("utf-8"))
    expected = [{key: value for key, value in rule.items() if key != prose} for rule in spec["rules"]]
    source = f"import {{ {export} }} from {json.dumps((NODE / module).as_uri())};\n"
    printed = subprocess.run(
        ["node", "--input-type=module", "-e", f"{source}process.stdout.write(JSON.stringify({export}));"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(printed.stdout) == expected
