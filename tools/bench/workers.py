"""The workers under test (the native worker and the echo baseline) and the client calls both share."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from wuu.worker.client import WorkerClient

# The echo worker runs as a plain script: the baseline imports asyncio and orjson, nothing of tools or wuu.
ECHO_COMMAND = [sys.executable, str(Path(__file__).resolve().with_name("echo.py"))]
NATIVE_COMMAND = [sys.executable, "-m", "wuu.worker"]
SESSION = "thr_bench"


async def data_of(client: WorkerClient, method: str, data: dict[str, Any]) -> dict[str, Any]:
    """One request through the framing layer only; the reply's data (an error reply raises)."""
    reply = await client.request(method, data)
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    result: dict[str, Any] = reply["data"]
    return result


async def spawn_native(root: Path) -> WorkerClient:
    """A native worker, initialized on the workspace `root`."""
    client = await WorkerClient.spawn(NATIVE_COMMAND)
    await client.connect(str(root), SESSION)
    return client


async def close(client: WorkerClient) -> None:
    """Close a worker; one that ends badly fails the run, with the tail of its stderr."""
    outcome = await client.close()
    if not outcome.clean:
        raise RuntimeError(f"a worker ended badly ({outcome.returncode}): {outcome.stderr.decode()[-2000:]}")


def forget_transcript(*clients: WorkerClient) -> None:
    """Drop the frames the clients recorded so far (the transcript keeps every frame, 64 MiB exports too)."""
    for client in clients:
        client.transcript.entries.clear()
