"""`execute` with arguments a tool does not accept, or with a tool the native worker does not have.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import code, tool_request
from wuu.worker.client import WorkerClient

BAD_ARGUMENTS = {
    "not-json": ("read_file", "{nope"),
    "not-an-object": ("read_file", "[1, 2]"),
    "a-string": ("read_file", '"a.txt"'),
    "wrong-type": ("read_file", json.dumps({"path": 5})),
    "wrong-type-int-as-string": ("read_file", json.dumps({"path": "a.txt", "max_bytes": "5"})),
    "unknown-field": ("read_file", json.dumps({"path": "a.txt", "bogus": 1})),
    "missing-field": ("write_file", json.dumps({"path": "a.txt"})),
    "argv-not-a-list": ("exec_command", json.dumps({"argv": "echo hi"})),
    "empty-argv": ("exec_command", json.dumps({"argv": []})),
    "depth-out-of-range": ("list_dir", json.dumps({"path": ".", "depth": 0})),
}


@pytest.mark.parametrize(("tool", "arguments"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
async def test_bad_tool_arguments_get_invalid_request(
    worker: WorkerClient, root: Path, tool: str, arguments: str
) -> None:
    (root / "a.txt").write_text("a")
    reply = await worker.request("execute", tool_request(tool, raw=arguments))
    assert code(reply) == "invalid_request"


async def test_an_unknown_tool_gets_unsupported_tool(worker: WorkerClient) -> None:
    reply = await worker.request("execute", tool_request("teleport", path="a"))
    assert code(reply) == "unsupported_tool"
