"""Artifact export: immutable snapshots read by token and byte offset (spec: export.schema.json).

A snapshot is a private copy taken at `export/open`, so later changes to the file never show
through, hashed while it is copied.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from wuu.generated.catalog import WORKER_MAX_EXPORT_BYTES
from wuu.generated.plain import (
    EmptyResult,
    ErrorCode,
    ExportOpenResult,
    ExportReadParams,
    ExportReadResult,
)

from ..errors import WorkerError
from .files import os_errors
from .paths import Resolved

COPY_CHUNK = 1 << 20


@dataclass(frozen=True)
class _Snapshot:
    path: Path
    size: int


class Exports:
    """The open snapshots of one connection, kept in a private directory."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._snapshots: dict[str, _Snapshot] = {}

    async def open(self, source: Resolved) -> ExportOpenResult:
        token = os.urandom(16).hex()  # as secrets.token_hex, without importing its random and hashlib
        target = self._directory / token
        size, digest = await asyncio.to_thread(_copy, source, target)
        self._snapshots[token] = _Snapshot(target, size)
        return ExportOpenResult(token=token, size=size, sha256=digest)

    def read(self, params: ExportReadParams) -> ExportReadResult:
        snapshot = self._get(params.token)
        data = b""
        if params.offset < snapshot.size:
            with snapshot.path.open("rb") as handle:
                handle.seek(params.offset)
                data = handle.read(params.max_bytes)
        eof = params.offset + len(data) >= snapshot.size
        return ExportReadResult(data=base64.b64encode(data).decode("ascii"), eof=eof)

    def close(self, token: str) -> EmptyResult:
        self._get(token).path.unlink()
        del self._snapshots[token]
        return EmptyResult()

    def close_all(self) -> None:
        for token in list(self._snapshots):
            self.close(token)

    def _get(self, token: str) -> _Snapshot:
        snapshot = self._snapshots.get(token)
        if snapshot is None:
            raise WorkerError(ErrorCode.NOT_FOUND, f"export token {token}")
        return snapshot


def _copy(resolved: Resolved, target: Path) -> tuple[int, str]:
    """Copy `resolved` to `target` in chunks; its size and SHA-256. Refuses more than the export limit."""
    digest = hashlib.sha256()
    size = 0
    source = resolved.path
    with os_errors(source):
        # O_NONBLOCK: a FIFO must not block the open; it is refused below as no regular file.
        fd = resolved.open(os.O_RDONLY | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise WorkerError(ErrorCode.INVALID_REQUEST, f"{source} is not a regular file")
            if info.st_size > WORKER_MAX_EXPORT_BYTES:
                raise WorkerError(
                    ErrorCode.ARTIFACT_TOO_LARGE, f"{info.st_size} bytes is over {WORKER_MAX_EXPORT_BYTES}"
                )
            with target.open("xb") as out:
                while chunk := os.read(fd, COPY_CHUNK):
                    size += len(chunk)
                    if size > WORKER_MAX_EXPORT_BYTES:
                        # The file grew while it was copied.
                        out.close()
                        target.unlink()
                        raise WorkerError(
                            ErrorCode.ARTIFACT_TOO_LARGE, f"{source} grew past the export limit"
                        )
                    digest.update(chunk)
                    out.write(chunk)
        finally:
            os.close(fd)
    return size, digest.hexdigest()
