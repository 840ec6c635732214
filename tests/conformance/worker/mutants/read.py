"""Mutants of process/read and process/write: Go casing, offsets, retention, long-polling, MinDwell and
stdin."""

from __future__ import annotations

from typing import Any

from wuu.generated.catalog import WORKER_DEFAULT_OUTPUT_RETENTION_BYTES, WORKER_MIN_RETAINED_OUTPUT_BYTES
from wuu.generated.models import ProcessOutputFlow
from wuu.worker import ExecutionBackendV4
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import Frame, ReplyRewriter, encode, frame_of, rewrite_params, rewrite_results

# The Go-cased fields of process/read (params and result), by their snake_case names.
GO_CASED = {
    "process": "Process",
    "output": "Output",
    "start_offset": "StartOffset",
    "end_offset": "EndOffset",
    "total_bytes": "TotalBytes",
    "truncated": "Truncated",
    "timed_out": "TimedOut",
    "duration": "Duration",
    "max_bytes": "MaxBytes",
    "offset_bytes": "OffsetBytes",
    "wait": "Wait",
    "min_dwell": "MinDwell",
}
SNAKE_CASED = {go: snake for snake, go in GO_CASED.items()}


@mutant(
    "snake-case-process-read",
    "takes and answers process/read fields in snake_case, not Go casing",
    "read.go-casing",
)
class SnakeCaseProcessRead(ReplyRewriter):
    """process/read takes snake_case keys (as well as Go-cased ones): they reach the worker Go-cased; its
    results go out with snake_case keys."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        data = frame.get("data") if frame is not None else None
        if frame is not None and frame.get("method") == "process/read" and isinstance(data, dict):
            line = encode({**frame, "data": {GO_CASED.get(key, key): value for key, value in data.items()}})
        self.to_worker(line)

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method == "process/read" and isinstance(reply.get("data"), dict):
            reply = {
                **reply,
                "data": {SNAKE_CASED.get(key, key): value for key, value in reply["data"].items()},
            }
        return [reply]


@mutant(
    "ignores-offset-bytes",
    "reads from the retained start whatever OffsetBytes asks",
    "read.offsets",
)
def ignores_offset_bytes(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/read runs as if OffsetBytes were always 0."""
    return rewrite_params("process/read", lambda params: {"offset_bytes": 0})(worker, backend)


def _never_truncated(result: Frame, request: Frame) -> None:
    result["Truncated"] = False


mutant(
    "never-truncated",
    "answers Truncated: false even when the read starts above the offset asked",
    "read.truncated",
)(
    rewrite_results(
        "process/read", _never_truncated, doc="process/read results always say `Truncated: false`."
    )
)


@mutant(
    "ignores-output-retention",
    "keeps the default retention whatever output_retention_bytes asks",
    "read.retention",
)
def ignores_output_retention(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/start runs as if output_retention_bytes were always omitted."""
    return rewrite_params(
        "process/start", lambda params: {"output_retention_bytes": WORKER_DEFAULT_OUTPUT_RETENTION_BYTES}
    )(worker, backend)


@mutant(
    "never-waits-for-the-reader",
    "drops the oldest output whatever output_flow asks",
    "read.wait-for-reader",
)
def never_waits_for_the_reader(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/start runs as if output_flow were always `drop_oldest`."""
    return rewrite_params("process/start", lambda params: {"output_flow": ProcessOutputFlow.DROP_OLDEST})(
        worker, backend
    )


@mutant(
    "retains-1-mib-by-default",
    "keeps the smallest retention (1 MiB) when output_retention_bytes is omitted, not the default",
    "read.truncated",
)
def retains_1_mib_by_default(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/start without output_retention_bytes runs as if it asked for 1 MiB."""

    def smallest_unless_asked(params: Any) -> dict[str, Any]:
        asked = "output_retention_bytes" in params.model_fields_set
        return {} if asked else {"output_retention_bytes": WORKER_MIN_RETAINED_OUTPUT_BYTES}

    return rewrite_params("process/start", smallest_unless_asked)(worker, backend)


@mutant(
    "wait-as-milliseconds",
    "takes process/read's Wait as milliseconds instead of nanoseconds",
    "read.long-poll",
)
def wait_as_milliseconds(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/read waits a million times longer than Wait says (its milliseconds read as nanoseconds)."""
    return rewrite_params("process/read", lambda params: {"wait": params.wait * 1_000_000})(worker, backend)


@mutant(
    "ignores-wait",
    "answers a read with no new bytes at once instead of waiting up to Wait",
    "read.long-poll",
)
def ignores_wait(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/read runs as if Wait were always 0 (no long-polling)."""
    return rewrite_params("process/read", lambda params: {"wait": 0})(worker, backend)


def _never_timed_out(result: Frame, request: Frame) -> None:
    result["TimedOut"] = False


mutant(
    "timed-out-always-false",
    "answers TimedOut: false even when the wait ended with no new bytes",
    "read.timed-out",
)(rewrite_results("process/read", _never_timed_out, doc="process/read results always say `TimedOut: false`."))


@mutant(
    "ignores-min-dwell",
    "answers a read at the first new byte, ignoring MinDwell",
    "read.min-dwell",
)
def ignores_min_dwell(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/read runs as if MinDwell were always 0."""
    return rewrite_params("process/read", lambda params: {"min_dwell": 0})(worker, backend)


@mutant(
    "write-ignores-close",
    "never closes a process's stdin on process/write close: true",
    "write.stdin",
)
def write_ignores_close(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """process/write runs as if `close` were always false."""
    return rewrite_params("process/write", lambda params: {"close": False})(worker, backend)
