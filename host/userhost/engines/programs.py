"""Starting and stopping an engine program: in a process group of its own, so that stopping it also ends
what it started (its commands, its sandbox helpers), which would otherwise outlive it and hold its pipes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

LINE_LIMIT = 16 * 1024 * 1024
"""The longest line of an engine's output the adapters read (a Claude Code `init` lists every tool)."""
STDERR_TAIL = 2000
"""The most characters of an engine's standard error that a failure quotes."""


async def start(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], stderr: IO[bytes], *, stdin: bool
) -> asyncio.subprocess.Process:
    """Start `argv` in `cwd` leading a new process group, its stdout a pipe, its stderr `stderr`."""
    return await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr.fileno(),
        limit=LINE_LIMIT,
        start_new_session=True,
    )


async def stop(process: asyncio.subprocess.Process) -> None:
    """Kill the program's whole process group, and reap the program."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


def said(stderr: IO[bytes]) -> str:
    """The end of what the program wrote to `stderr` (only the end is read: a long session's file can be
    large)."""
    size = stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, size - 4 * STDERR_TAIL))  # a character is at most 4 bytes of UTF-8
    return stderr.read().decode(errors="replace")[-STDERR_TAIL:].strip()


async def json_lines(stream: asyncio.StreamReader) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a program's output, one a line; a line that is not one is skipped (a program may
    print other things)."""
    async for line in stream:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            yield message
