"""Exporting a file: open, 8 MiB reads, close, through the typed client, untyped requests, and the echo."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path

from wuu.generated.models import ExportCloseParams, ExportOpenParams, ExportReadParams
from wuu.worker.client import WorkerClient

from .config import EXPORT_CHUNK
from .workers import data_of


@dataclass(frozen=True)
class ExportTiming:
    """How long one export took."""

    total_s: float  # export/open to export/close replied
    reads_s: float  # the export/read requests only
    size: int


async def export_typed(client: WorkerClient, path: Path) -> ExportTiming:
    """The whole export of `path` through the typed client, decoding every chunk."""
    began = time.perf_counter()
    opened = await client.export_open(ExportOpenParams(path=str(path)))
    reading = time.perf_counter()
    offset, eof = 0, False
    while not eof:
        chunk = await client.export_read(
            ExportReadParams(token=opened.token, offset=offset, max_bytes=EXPORT_CHUNK)
        )
        offset += len(base64.b64decode(chunk.data))
        eof = chunk.eof
    read = time.perf_counter()
    await client.export_close(ExportCloseParams(token=opened.token))
    ended = time.perf_counter()
    if offset != opened.size:
        raise RuntimeError(f"exported {offset} bytes of {opened.size}")
    return ExportTiming(ended - began, read - reading, offset)


async def export_wire(client: WorkerClient, path: Path) -> ExportTiming:
    """The whole export of `path` through untyped requests, decoding every chunk."""
    began = time.perf_counter()
    opened = await data_of(client, "export/open", {"path": str(path)})
    reading = time.perf_counter()
    offset, eof = 0, False
    while not eof:
        chunk = await data_of(
            client, "export/read", {"token": opened["token"], "offset": offset, "max_bytes": EXPORT_CHUNK}
        )
        offset += len(base64.b64decode(chunk["data"]))
        eof = chunk["eof"]
    read = time.perf_counter()
    await data_of(client, "export/close", {"token": opened["token"]})
    ended = time.perf_counter()
    if offset != opened["size"]:
        raise RuntimeError(f"exported {offset} bytes of {opened['size']}")
    return ExportTiming(ended - began, read - reading, offset)


async def export_echo(client: WorkerClient, path: Path) -> ExportTiming:
    """The baseline: the echo worker reads and encodes the same chunks of the same file."""
    began = time.perf_counter()
    offset, eof = 0, False
    while not eof:
        chunk = await data_of(
            client, "export/read", {"path": str(path), "offset": offset, "max_bytes": EXPORT_CHUNK}
        )
        offset += len(base64.b64decode(chunk["data"]))
        eof = chunk["eof"]
    elapsed = time.perf_counter() - began
    return ExportTiming(elapsed, elapsed, offset)
