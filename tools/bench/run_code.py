"""`run_code` through the native worker with one tool call back to the host, beside the bare interpreter it
wraps (`node --permission -e` of the same program shape, answered by nothing), both in the same round: the
figure is what the worker adds to starting Node.js."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict
from pathlib import Path

from wuu.generated.models import ToolInvokeParams, ToolResult
from wuu.worker.client import WorkerClient
from wuu.worker.errors import WorkerError
from wuu.worker.native.run_code import find_node

from .samples import Samples, alternate
from .workers import NATIVE_COMMAND, SESSION, close, data_of

CALLS = 10
PROGRAM = "const r = await tools.echo({n: 1}); console.log(r.output); return 1;"
BARE = "(async () => { const r = await Promise.resolve({output: '{\"n\":1}'}); console.log(r.output); })()"


async def _echo(params: ToolInvokeParams, parent: str) -> ToolResult:
    return ToolResult(output=params.arguments, is_error=False, metadata={})


async def run_code_native(client: WorkerClient) -> float:
    """Milliseconds of one run_code (one tool call) through the native worker."""
    data = {"language": "javascript", "source": PROGRAM, "result_view": "both"}
    began = time.perf_counter()
    result = await data_of(client, "run_code", data)
    elapsed = time.perf_counter() - began
    if result != {"output": '{"n":1}\n1', "is_error": False, "metadata": {}}:
        raise RuntimeError(f"run_code answered {result}")
    return elapsed * 1000


async def run_code_bare(node: str) -> float:
    """Milliseconds of Node.js alone running a program of the same shape."""
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        node, "--permission", "-e", BARE, stdout=asyncio.subprocess.PIPE
    )
    await process.communicate()
    return (time.perf_counter() - began) * 1000


async def run_code_round(root: Path, samples: Samples, index: int) -> None:
    """Round `index` of run_code beside bare node (absent without Node.js 22.19+)."""
    try:
        node = find_node()
    except WorkerError as error:
        samples.mark_absent("run_code/", str(error))
        return
    client = await WorkerClient.spawn(NATIVE_COMMAND, tool_invoker=_echo, record=False)
    await client.connect(str(root), SESSION)
    await run_code_native(client)
    await run_code_bare(node)
    timings: dict[str, list[float]] = defaultdict(list)
    for turn in range(CALLS):
        for side in alternate(("node", "native"), index + turn):
            timings[side].append(await (run_code_bare(node) if side == "node" else run_code_native(client)))
    await close(client)
    for side, values in timings.items():
        samples.add(f"run_code/{side}", statistics.median(values))
