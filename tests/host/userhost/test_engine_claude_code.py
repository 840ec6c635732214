"""The Claude Code adapter against the real Claude Code CLI (its npm package, `make engines`), whose model is a
fake Messages API on 127.0.0.1 (tests/host/userhost/fixtures/fake_models.py). The model asks to write a file;
what Claude Code does with that call in each mode is its own permission system at work."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import engine_cli
from tests.host.userhost.fixtures.fake_models import FakeAnthropic, ToolUse
from wuu.generated.models import PermissionMode
from wuu.host.userhost.engines.claude_code import ClaudeCodeEngine
from wuu.host.userhost.engines.table import EngineFailed, EngineRefused

NOBODY = 65534
AS_ROOT = os.geteuid() == 0


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory with the project (`work`) and Claude Code's home (`home`), usable by `nobody` too: Claude
    Code refuses to skip permissions as root, so the unconfined run switches to that user."""
    top = Path(tempfile.mkdtemp(prefix="claude-"))
    top.chmod(0o755)
    for name in ("work", "home"):
        (top / name).mkdir()
        if AS_ROOT:
            os.chown(top / name, NOBODY, NOBODY)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def engine(place: Path, model: FakeAnthropic, *, as_nobody: bool = False) -> ClaudeCodeEngine:
    prefix = (
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"] if as_nobody else []
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(place / "home"),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-fake",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    return ClaudeCodeEngine([*prefix, str(engine_cli("claude"))], env=env)


def write_notes(place: Path) -> FakeAnthropic:
    notes = place / "work" / "notes.txt"
    return FakeAnthropic([ToolUse("Write", {"file_path": str(notes), "content": "hello\n"}), "done"])


@pytest.mark.parametrize("mode", [PermissionMode.STANDARD, PermissionMode.READ_ONLY])
async def test_a_confined_mode_keeps_claude_code_from_writing(place: Path, mode: PermissionMode) -> None:
    async with write_notes(place).serving() as model:
        turn = await engine(place, model).run(mode, place / "work", "write hello to notes.txt")
    assert (turn.text, turn.stop_reason) == ("done", "success")
    assert not (place / "work" / "notes.txt").exists()
    [result] = model.tool_results()
    assert result["is_error"] is True


async def test_unconfined_bypasses_permissions(place: Path) -> None:
    async with write_notes(place).serving() as model:
        turn = await engine(place, model, as_nobody=AS_ROOT).run(
            PermissionMode.UNCONFINED, place / "work", "write hello to notes.txt"
        )
    assert (turn.text, turn.stop_reason) == ("done", "success")
    assert (place / "work" / "notes.txt").read_text() == "hello\n"


@pytest.mark.skipif(not AS_ROOT, reason="Claude Code refuses bypassPermissions only to root")
async def test_claude_code_refusing_to_bypass_as_root_is_a_failure_naming_it(place: Path) -> None:
    async with write_notes(place).serving() as model:
        with pytest.raises(EngineFailed, match="root"):
            await engine(place, model).run(PermissionMode.UNCONFINED, place / "work", "write hello")
    assert model.requests == []


async def test_a_configuration_that_disables_the_mode_stops_the_run(place: Path) -> None:
    settings = place / "home" / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"permissions": {"disableBypassPermissionsMode": "disable"}}))
    if AS_ROOT:
        os.chown(settings.parent, NOBODY, NOBODY)
    async with write_notes(place).serving() as model:
        with pytest.raises(EngineRefused, match="not 'bypassPermissions'"):
            await engine(place, model, as_nobody=AS_ROOT).run(PermissionMode.UNCONFINED, place / "work", "go")
    assert not (place / "work" / "notes.txt").exists()


async def test_a_prompt_that_looks_like_an_option_is_the_prompt(place: Path) -> None:
    async with FakeAnthropic(["done"]).serving() as model:
        turn = await engine(place, model).run(PermissionMode.READ_ONLY, place / "work", "--help")
    assert turn.text == "done"
    [asked] = [m for m in model.requests[0]["messages"] if m["role"] == "user"]
    assert "--help" in json.dumps(asked["content"])


def test_the_argv_passes_the_table_mode() -> None:
    claude = ClaudeCodeEngine(["claude"])
    assert claude.argv(PermissionMode.STANDARD, "fix it") == [
        "claude", "-p", "--permission-mode", "dontAsk", "--output-format", "stream-json", "--verbose", "--", "fix it"
    ]  # fmt: skip
