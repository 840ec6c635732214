"""Mutants of export: snapshots and their hashes, immutability, unknown tokens and the size limit."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from pathlib import Path

from wuu.generated.models import (
    EmptyResult,
    ErrorCode,
    ExportCloseParams,
    ExportOpenParams,
    ExportOpenResult,
    ExportReadParams,
    ExportReadResult,
)
from wuu.generated.wire import WireModel
from wuu.worker import ExecutionBackendV4, Handler, RequestContext, WorkerError
from wuu.worker.native.exports import COPY_CHUNK
from wuu.worker.native.paths import resolve
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import Frame, answer_error, override, rewrite_results

LiveFiles = dict[str, tuple[Path, int]]
"""Export tokens whose reads the mutant serves from the file as it is now: token -> (the file, the size
that export/open answered)."""


def _source(context: RequestContext, path: str) -> Path:
    """The file an export/open of `path` snapshots (the worker has checked the path already)."""
    return resolve(Path(context.binding.root), path, confined=True)


def _read_live(path: Path, size: int, params: ExportReadParams) -> ExportReadResult:
    """export/read as the native worker answers it, with the bytes taken from the live file."""
    data = b""
    if params.offset < size:
        with path.open("rb") as handle:
            handle.seek(params.offset)
            data = handle.read(params.max_bytes)
    eof = params.offset + len(data) >= size
    return ExportReadResult(data=base64.b64encode(data).decode("ascii"), eof=eof)


def _serving_reads(backend: ExecutionBackendV4, files: LiveFiles) -> ExecutionBackendV4:
    """The backend with export/read of the tokens in `files` served from the live files."""

    def make(original: Handler) -> Handler:
        async def handler(params: ExportReadParams, context: RequestContext) -> WireModel:
            live = files.get(params.token)
            if live is None:
                return await original(params, context)
            return await asyncio.to_thread(_read_live, *live, params)

        return handler

    return override(backend, "export/read", make)


def _wrong_sha256(result: Frame, request: Frame) -> None:
    result["sha256"] = hashlib.sha256(str(request.get("path")).encode()).hexdigest()


mutant(
    "export-wrong-sha256",
    "answers export/open with the SHA-256 of the path instead of the content",
    "export.snapshot",
)(
    rewrite_results(
        "export/open", _wrong_sha256, doc="export/open's sha256 is the hash of the requested path string."
    )
)


@mutant(
    "export-reads-live-file",
    "reads an export from the live file rather than an immutable snapshot",
    "export.immutable",
)
def export_reads_live_file(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """export/open takes its snapshot and remembers the file it came from; export/read of the token then
    reads that file as it is now, so later changes show through. export/close forgets it."""
    files: LiveFiles = {}

    def opening(original: Handler) -> Handler:
        async def handler(params: ExportOpenParams, context: RequestContext) -> WireModel:
            result = await original(params, context)
            assert isinstance(result, ExportOpenResult)
            files[result.token] = (_source(context, params.path), result.size)
            return result

        return handler

    def closing(original: Handler) -> Handler:
        async def handler(params: ExportCloseParams, context: RequestContext) -> WireModel:
            result = await original(params, context)
            files.pop(params.token, None)
            return result

        return handler

    backend = override(override(backend, "export/open", opening), "export/close", closing)
    return _serving_reads(backend, files)


@mutant(
    "export-unknown-token-empty",
    "answers export/read of an unknown token with empty data instead of not_found",
    "export.unknown-token",
)
def export_unknown_token_empty(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """An export/read that fails with not_found answers `{data: "", eof: true}`."""
    return answer_error(
        "export/read", ErrorCode.NOT_FOUND, lambda params: ExportReadResult(data="", eof=True)
    )(worker, backend)


def _size_and_sha256(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(COPY_CHUNK):
            size += len(chunk)
            digest.update(chunk)
    return size, digest.hexdigest()


@mutant(
    "export-no-size-limit",
    "exports a file over 256 MiB instead of answering artifact_too_large",
    "export.too-large",
)
def export_no_size_limit(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """An export/open that fails with artifact_too_large opens the file all the same: it answers a token,
    the file's size and its SHA-256, and serves export/read and export/close of that token itself.

    Its reads come from the file where it lies, rather than from a private copy of over 256 MiB.
    """
    files: LiveFiles = {}

    def opening(original: Handler) -> Handler:
        async def handler(params: ExportOpenParams, context: RequestContext) -> WireModel:
            try:
                return await original(params, context)
            except WorkerError as error:
                if error.code is not ErrorCode.ARTIFACT_TOO_LARGE:
                    raise
            source = _source(context, params.path)
            size, sha256 = await asyncio.to_thread(_size_and_sha256, source)
            token = secrets.token_hex(16)
            files[token] = (source, size)
            # Built without validation: the schema itself caps size at the limit this mutant ignores.
            return ExportOpenResult.model_construct(token=token, size=size, sha256=sha256)

        return handler

    def closing(original: Handler) -> Handler:
        async def handler(params: ExportCloseParams, context: RequestContext) -> WireModel:
            if files.pop(params.token, None) is None:
                return await original(params, context)
            return EmptyResult()

        return handler

    backend = override(override(backend, "export/open", opening), "export/close", closing)
    return _serving_reads(backend, files)
