"""The Codex adapter against the real Codex CLI's app server (its npm package, `make engines`), whose model is a
fake Responses API on 127.0.0.1 (tests/host/userhost/fixtures/fake_models.py). The model asks Codex to run
commands; whether they run, and whether Codex asks first, is Codex's own sandbox and approval policy at work."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import engine_cli
from tests.host.userhost.fixtures.fake_models import FakeResponses, ToolUse
from wuu.generated.models import ExternalEngine, PermissionMode
from wuu.host.userhost.engines.codex import CodexEngine
from wuu.host.userhost.engines.table import EngineApproval, EngineRefused


class Bridge:
    """The host's approval bridge, answering `answer` and keeping what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[EngineApproval] = []

    async def __call__(self, approval: EngineApproval) -> bool:
        self.asked.append(approval)
        return self.answer


PINNED = Path(__file__).parent / "fixtures" / "codex_pinned.py"


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory outside /tmp for the project and CODEX_HOME: Codex's sandbox hides /tmp, and Codex keeps the
    helper its sandbox runs (`codex-linux-sandbox`) under CODEX_HOME."""
    path = Path(tempfile.mkdtemp(prefix="wuu-codex-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def codex(tmp_path: Path, model: FakeResponses, *config: str) -> CodexEngine:
    provider = [
        'model_provider="fake"',
        'model_providers.fake.name="fake"',
        f'model_providers.fake.base_url="{model.url}/v1"',
        'model_providers.fake.wire_api="responses"',
        'model="fake-model"',
    ]
    (tmp_path / "codex-home").mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / "codex-home")}
    return CodexEngine([str(engine_cli("codex"))], config=[*provider, *config], env=env)


def run(command: str, *, escalated: bool = False) -> ToolUse:
    """The model's call of Codex's `exec_command`, inside the sandbox or asking to leave it."""
    arguments: dict[str, object] = {"cmd": command}
    if escalated:
        arguments |= {"sandbox_permissions": "require_escalated", "justification": "write the marker"}
    return ToolUse("exec_command", arguments)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("mode", "written"),
    [(PermissionMode.STANDARD, True), (PermissionMode.READ_ONLY, False), (PermissionMode.UNCONFINED, True)],
)
async def test_each_mode_is_codexs_sandbox(
    tmp_path: Path, work: Path, mode: PermissionMode, written: bool
) -> None:
    bridge = Bridge(False)
    async with (
        FakeResponses([run("touch inside.txt"), "done"]).serving() as model,
        codex(tmp_path, model).open(mode, work, bridge) as thread,
    ):
        turn = await thread.prompt("make inside.txt")
    assert (turn.text, turn.stop_reason) == ("done", "completed")
    assert (work / "inside.txt").exists() is written
    assert len(model.tool_results()) == 1


@pytest.mark.parametrize("allowed", [True, False])
async def test_standard_asks_the_bridge_before_leaving_the_sandbox(
    tmp_path: Path, work: Path, allowed: bool
) -> None:
    outside = tmp_path / "outside.txt"
    bridge = Bridge(allowed)
    async with (
        FakeResponses([run(f"touch {outside}", escalated=True), "done"]).serving() as model,
        codex(tmp_path, model).open(PermissionMode.STANDARD, work, bridge) as thread,
    ):
        assert (await thread.prompt("mark it")).text == "done"
    assert outside.exists() is allowed
    [asked] = bridge.asked
    assert (asked.engine, asked.mode) == (ExternalEngine.CODEX, PermissionMode.STANDARD)
    assert str(outside) in asked.title


async def test_read_only_never_asks(tmp_path: Path, work: Path) -> None:
    outside = tmp_path / "outside.txt"
    bridge = Bridge(True)
    async with (
        FakeResponses([run(f"touch {outside}", escalated=True), "done"]).serving() as model,
        codex(tmp_path, model).open(PermissionMode.READ_ONLY, work, bridge) as thread,
    ):
        assert (await thread.prompt("mark it")).text == "done"
    assert not outside.exists()
    assert bridge.asked == []


async def test_a_thread_codex_starts_in_other_settings_is_refused(tmp_path: Path, work: Path) -> None:
    pinned = CodexEngine([sys.executable, str(PINNED)])
    with pytest.raises(
        EngineRefused,
        match="sandbox 'readOnly' and approval policy 'never', not 'dangerFullAccess' and 'never'",
    ):
        async with pinned.open(PermissionMode.UNCONFINED, work, Bridge(True)):
            pytest.fail("a thread in other settings was used")
