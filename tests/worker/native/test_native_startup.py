"""The native worker runs on the generated plain classes: neither pydantic nor jsonschema is imported to start it,
to answer `initialize`, or to serve requests (their import alone takes longer than a whole echo worker)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers import initialize, ok, run_tool, start, wait_ended
from wuu.worker.client import WorkerClient

HEAVY = ("pydantic", "pydantic_core", "jsonschema", "jsonschema_specifications", "referencing")


async def test_the_worker_serves_without_importing_pydantic_or_jsonschema(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    worker = await WorkerClient.spawn([sys.executable, "-X", "importtime", "-m", "wuu.worker"])
    await initialize(worker, tmp_path)
    record = await start(worker, ["true"], permission_mode="standard")
    await wait_ended(worker, record["id"])
    assert ok(await run_tool(worker, "read_file", path="notes.txt"))["output"] == "hello\n"
    assert "error" in await worker.request("process/get", {"id": 7})
    outcome = await worker.close()
    assert outcome.clean, outcome.stderr.decode()[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in outcome.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "wuu.generated.plain" in imported
    assert sorted(name for name in imported if name.split(".")[0] in HEAVY) == []
