"""The Claude Code adapter: one headless run (`claude -p`, stream JSON output) in a Wuu permission mode.

The mode goes to Claude Code's `--permission-mode` (ClaudeCodePermissionSettings). The headless transport has
no permission-prompt bridge, which is why `standard` is `dontAsk`: a call that needs permission is denied, not
left waiting. The first message of the stream (`system`/`init`) says the mode Claude Code runs in; a run
whose mode is not the one passed is stopped at once (`EngineRefused`). The prompt follows `--`, so no prompt
can be read as an option.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wuu.generated.models import PermissionMode

from . import programs
from .table import EngineFailed, EngineRefused, EngineTurn, settings_for


class ClaudeCodeEngine:
    """Runs Claude Code (`command`: the argv that starts it, by default `claude`) in a permission mode."""

    def __init__(self, command: Sequence[str] = ("claude",), *, env: Mapping[str, str] | None = None) -> None:
        if not command:
            raise ValueError("command: Claude Code's argv is empty")
        self.command = list(command)
        self.env = dict(os.environ if env is None else env)

    def argv(self, mode: PermissionMode, prompt: str) -> list[str]:
        """The command line of one headless run of `prompt` in `mode`."""
        native = settings_for(mode).claude_code.permission_mode.value
        return [
            *self.command,
            "-p",
            "--permission-mode",
            native,
            "--output-format",
            "stream-json",
            "--verbose",
            "--",
            prompt,
        ]

    async def run(self, mode: PermissionMode, cwd: Path, prompt: str) -> EngineTurn:
        """Run `prompt` once in `cwd`: the result's text and subtype. EngineRefused when Claude Code runs in
        another mode than `mode` gives; EngineFailed when it ends without a result."""
        expected = settings_for(mode).claude_code.permission_mode.value
        with tempfile.TemporaryFile() as stderr:
            process = await programs.start(self.argv(mode, prompt), cwd, self.env, stderr, stdin=False)
            try:
                result = await _read(process, expected)
            finally:
                await programs.stop(process)
            if result is None:
                raise EngineFailed(f"Claude Code ended without a result: {programs.said(stderr)}")
        return EngineTurn(str(result.get("result", "")), str(result.get("subtype", "")))


async def _read(process: asyncio.subprocess.Process, expected: str) -> dict[str, Any] | None:
    """The stream's `result` message, after checking its `init`; None if the stream ends first."""
    assert process.stdout is not None
    started = False
    async for message in programs.json_lines(process.stdout):
        if message.get("type") == "system" and message.get("subtype") == "init":
            if message.get("permissionMode") != expected:
                raise EngineRefused(
                    f"Claude Code runs in permission mode {message.get('permissionMode')!r}, not {expected!r}"
                )
            started = True
        elif message.get("type") == "result":
            if not started:
                raise EngineFailed("Claude Code gave a result without saying its permission mode first")
            return message
    return None
