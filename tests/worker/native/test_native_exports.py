"""Exports on the native worker: export/open, export/read and export/close, a snapshot read in chunks.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, MIB, code, ok, release_fifo
from wuu.worker.client import WorkerClient


async def read_export(client: WorkerClient, token: str, chunk: int) -> tuple[bytes, list[bool]]:
    """An export's bytes, read from offset 0 in chunks of `chunk` bytes, and the `eof` of every read."""
    data, eofs = b"", list[bool]()
    while not eofs or not eofs[-1]:
        assert len(eofs) < 10_000
        reply = ok(
            await client.request("export/read", {"token": token, "offset": len(data), "max_bytes": chunk})
        )
        data += base64.b64decode(reply["data"], validate=True)
        eofs.append(reply["eof"])
    return data, eofs


async def test_export_gives_size_sha256_and_chunks_that_reassemble(worker: WorkerClient, root: Path) -> None:
    content = os.urandom(200_000)
    (root / "artifact.bin").write_bytes(content)
    opened = ok(await worker.request("export/open", {"path": "artifact.bin"}))
    assert opened["size"] == len(content)
    assert opened["sha256"] == hashlib.sha256(content).hexdigest()
    data, eofs = await read_export(worker, opened["token"], 65_536)
    assert data == content
    assert eofs == [False, False, False, True]
    past = ok(await worker.request("export/read", {"token": opened["token"], "offset": len(content)}))
    assert past == {"data": "", "eof": True}
    assert ok(await worker.request("export/close", {"token": opened["token"]})) == {}
    reply = await worker.request("export/read", {"token": opened["token"], "offset": 0})
    assert code(reply) == "not_found"


async def test_an_export_snapshot_does_not_change_with_the_file(worker: WorkerClient, root: Path) -> None:
    original = b"version one\n" * 1000
    (root / "report.txt").write_bytes(original)
    opened = ok(await worker.request("export/open", {"path": "report.txt"}))
    (root / "report.txt").write_bytes(b"version two, longer than the first\n" * 2000)
    data, _ = await read_export(worker, opened["token"], 4096)
    assert data == original
    (root / "report.txt").unlink()
    data, _ = await read_export(worker, opened["token"], 1 * MIB)
    assert data == original
    assert hashlib.sha256(data).hexdigest() == opened["sha256"]


async def test_export_read_returns_at_most_one_mib_by_default(worker: WorkerClient, root: Path) -> None:
    content = os.urandom(MIB + 10)
    (root / "big.bin").write_bytes(content)
    opened = ok(await worker.request("export/open", {"path": "big.bin"}))
    first = ok(await worker.request("export/read", {"token": opened["token"], "offset": 0}))
    assert base64.b64decode(first["data"]) == content[:MIB] and first["eof"] is False
    reply = await worker.request(
        "export/read", {"token": opened["token"], "offset": 0, "max_bytes": 8 * MIB + 1}
    )
    assert code(reply) == "invalid_request"


async def test_exporting_a_file_over_256_mib_gets_artifact_too_large(
    worker: WorkerClient, root: Path
) -> None:
    with (root / "huge.bin").open("wb") as handle:
        handle.truncate(256 * MIB + 1)  # sparse: no disk space used
    assert code(await worker.request("export/open", {"path": "huge.bin"})) == "artifact_too_large"


async def test_an_unknown_export_token_gets_not_found(worker: WorkerClient) -> None:
    assert code(await worker.request("export/read", {"token": "nope", "offset": 0})) == "not_found"
    assert code(await worker.request("export/close", {"token": "nope"})) == "not_found"


async def test_exporting_a_missing_file_gets_not_found(worker: WorkerClient) -> None:
    assert code(await worker.request("export/open", {"path": "missing.bin"})) == "not_found"


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink-file", "symlink-dir"])
async def test_exporting_a_path_outside_the_root_gets_path_outside_root(
    worker: WorkerClient, escapes: dict[str, str], kind: str
) -> None:
    assert code(await worker.request("export/open", {"path": escapes[kind]})) == "path_outside_root"


# --- a FIFO and the largest offset (bugs found by these tests, now fixed) ---------------------------------


async def test_exporting_a_fifo_does_not_keep_the_worker_from_exiting(
    worker: WorkerClient, root: Path
) -> None:
    fifo = root / "fifo"
    os.mkfifo(fifo)
    pending = asyncio.create_task(worker.request("export/open", {"path": "fifo"}, request_id="export-fifo"))
    try:
        ok(await asyncio.wait_for(worker.request("process/list", {}), 5))
        await worker.request("cancel", {"id": "export-fifo"})
        assert code(await asyncio.wait_for(pending, DEADLINE)) in {"cancelled", "invalid_request"}
        outcome = await worker.close(budget=5)
    finally:
        release_fifo(fifo)
        pending.cancel()
    assert outcome.clean, outcome


async def test_export_read_at_the_largest_offset_reads_nothing_with_eof(
    worker: WorkerClient, root: Path
) -> None:
    (root / "a.txt").write_text("hello")
    opened = ok(await worker.request("export/open", {"path": "a.txt"}))
    reply = await worker.request("export/read", {"token": opened["token"], "offset": 2**63 - 1})
    assert ok(reply) == {"data": "", "eof": True}
