"""Mutants of methods: unknown methods, params that violate the schema, requests generated from it, and
overlapping requests."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from pydantic import ValidationError

from wuu.generated.catalog import WORKER_METHODS
from wuu.generated.methods import MethodSpec
from wuu.generated.models import ErrorCode
from wuu.generated.wire import WireModel
from wuu.worker import ExecutionBackendV4, Handler, RequestContext, WorkerError
from wuu.worker.connection import request_params
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import Frame, Relay, ReplyRewriter, code_of, encode, exit_now, frame_of, override


@mutant(
    "unknown-method-invalid-request",
    "answers a method the catalog does not know with invalid_request, not unsupported_method",
    "methods.unsupported",
)
class UnknownMethodInvalidRequest(ReplyRewriter):
    """A method outside the catalog, which the worker answers `unsupported_method` once initialized, gets
    `invalid_request` instead."""

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method not in WORKER_METHODS and code_of(reply) == ErrorCode.UNSUPPORTED_METHOD.value:
            refusal = WorkerError(ErrorCode.INVALID_REQUEST, f"no method {method}")
            return [{"id": reply["id"], "error": refusal.wire}]
        return [reply]


@mutant(
    "invalid-params-internal",
    "answers method params that violate the schema with internal, not invalid_request",
    "methods.invalid-params",
)
class InvalidParamsInternal(ReplyRewriter):
    """The worker's `invalid_request` for params that violate the schema (every method but initialize and
    cancel) goes out as `internal`, with the same message."""

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        spec = WORKER_METHODS.get(method)
        if spec is None or method in ("initialize", "cancel") or code_of(reply) is None:
            return [reply]
        try:
            request_params(spec, data)
        except WorkerError as error:
            # The very error of the params check, not one the handler raised about valid params.
            if reply["error"] == error.wire:
                return [{"id": reply["id"], "error": WorkerError(ErrorCode.INTERNAL, error.message).wire}]
        return [reply]


def _coerced(spec: MethodSpec, data: Frame) -> Frame | None:
    """`data` as pydantic's lax mode reads it, when the strict check refuses it and the lax one does not."""
    try:
        request_params(spec, data)
    except WorkerError:
        try:
            return spec.params.model_validate(data).to_wire()
        except ValidationError:
            return None
    return None


@mutant(
    "coerces-param-types",
    'accepts "1" for an integer (and the like) in method params instead of answering invalid_request',
    "fuzz.invalid-requests",
    "methods.invalid-params",
)
class CoercesParamTypes(Relay):
    """Method params are validated in pydantic's lax mode, so a string of digits passes for an integer: params
    that only the lax mode accepts reach the worker as it reads them."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        method = frame.get("method") if frame is not None else None
        spec = WORKER_METHODS.get(method) if isinstance(method, str) else None
        if frame is not None and spec is not None and isinstance(frame.get("data"), dict):
            coerced = _coerced(spec, frame["data"])
            if coerced is not None:
                line = encode({**frame, "data": coerced})
        self.to_worker(line)


@mutant(
    "crashes-on-unknown-process-write",
    "exits (without a reply) on a process/write of a process it does not know",
    "fuzz.valid-requests",
)
def crashes_on_unknown_process_write(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/write of an unknown process id (the worker's `not_found`) ends the worker process on the spot,
    with exit status 3."""

    def make(original: Handler) -> Handler:
        async def handler(params: Any, context: RequestContext) -> WireModel:
            try:
                return await original(params, context)
            except WorkerError as error:
                if error.code is ErrorCode.NOT_FOUND:
                    exit_now(3)
                raise

        return handler

    return override(backend, "process/write", make)


@mutant(
    "serial-handlers",
    "runs one request at a time: a fast request waits for a slow one",
    "methods.overlap",
)
def serial_handlers(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """Every method handler (all but initialize and cancel, which the SDK answers itself) runs under one lock.

    A request that waits for the lock is in flight all the same: a cancel ends it at once.
    """
    lock = asyncio.Lock()

    def serial(original: Handler) -> Handler:
        async def handler(params: Any, context: RequestContext) -> WireModel:
            async with lock:
                return await original(params, context)

        return handler

    return dataclasses.replace(backend, methods={name: serial(h) for name, h in backend.methods.items()})
