"""The runner's first step: start the command under test once and see it answer, so that a command that
cannot start is reported once, plainly, instead of as a failure of every case."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Mapping, Sequence

from .outcomes import StartFailure

STDERR_KEPT = 8192


async def first_answer(
    argv: Sequence[str], line: bytes, *, env: Mapping[str, str] | None, timeout: float
) -> None:
    """Run `argv`, write `line` to its stdin and wait for one line on its stdout; StartFailure, saying what
    was run, what happened and the end of its stderr, when it cannot be run or ends without answering."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            limit=1 << 26,
        )
    except FileNotFoundError:
        raise StartFailure(argv, f"{argv[0]}: no such command", "") from None
    except PermissionError:
        raise StartFailure(argv, f"{argv[0]}: not executable", "") from None
    except OSError as error:
        raise StartFailure(argv, f"{argv[0]}: cannot be run: {error.strerror}", "") from None
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    stderr = asyncio.create_task(process.stderr.read())
    what = None
    try:
        with contextlib.suppress(ConnectionError):
            process.stdin.write(line)
            await process.stdin.drain()
        try:
            answer = await asyncio.wait_for(process.stdout.readline(), timeout)
        except TimeoutError:
            what = f"it did not answer its first request within {timeout:g} s"
        else:
            if not answer:
                status = await process.wait()
                what = f"it exited with status {status} before answering its first request"
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
    text = (await stderr).decode("utf-8", "replace")
    if what is not None:
        raise StartFailure(argv, what, text[-STDERR_KEPT:])


def describe(failure: StartFailure) -> str:
    """The failure as the runner prints it: what was run, what happened, and its stderr."""
    lines = [
        "wuu-conformance: the command under test cannot start; no case was run.",
        f"  ran:      {shlex.join(failure.command)}",
        f"  happened: {failure.what}",
    ]
    if failure.stderr.strip():
        lines.append("  stderr:")
        lines.extend("    " + line for line in failure.stderr.rstrip().splitlines())
    else:
        lines.append("  stderr:   (empty)")
    return "\n".join(lines)
