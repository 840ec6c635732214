"""The README's example worker is complete and works as a real worker process."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from wuu.worker.client import WorkerClient

README = Path(__file__).resolve().parent.parent / "README.md"


def example(name: str) -> str:
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert match, f"README has no example {name}"
    return match.group(1)


def call(tool: str, mode: str = "standard", **arguments: str) -> dict[str, object]:
    return {
        "tool": tool,
        "call": {"id": "c1", "arguments": json.dumps(arguments)},
        "actor": {"kind": "agent", "id": "a1"},
        "permission_mode": mode,
    }


def test_the_example_worker_is_short() -> None:
    lines = [line for line in example("memory-worker").splitlines() if line.strip()]
    assert len(lines) <= 30


async def test_the_example_worker_serves_the_protocol(tmp_path: Path) -> None:
    script = tmp_path / "memory_worker.py"
    script.write_text(example("memory-worker"))
    client = await WorkerClient.spawn([sys.executable, str(script)])
    try:
        init = await client.request("initialize", {"version": 4, "root": str(tmp_path), "session": "s"})
        assert init["data"]["methods"] == ["cancel", "execute", "initialize"]
        assert "data" in await client.request("execute", call("write_file", path="a", content="hello"))
        assert (await client.request("execute", call("read_file", path="a")))["data"]["output"] == "hello"
        denied = await client.request("execute", call("write_file", "read_only", path="a", content="x"))
        assert denied["error"].startswith("permission_denied")
        assert (await client.request("execute", call("list_dir", path=".")))["error"].startswith(
            "unsupported_tool"
        )
        assert (await client.request("process/list", {}))["error"].startswith("unsupported_method")
    finally:
        outcome = await client.close()
    assert outcome.clean
