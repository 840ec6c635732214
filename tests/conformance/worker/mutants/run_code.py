"""Mutants of run_code: a result view ignored, a callback sent after its parent was answered, a failed
program's state kept, a timeout ignored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wuu.generated.models import ResultView, ToolResult
from wuu.worker import ExecutionBackendV4, Handler
from wuu.worker.native.run_code import CodeRunner
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import Frame, Relay, frame_of, override, rewrite_params


@mutant(
    "run-code-ignores-result-view",
    "answers every program with the both view, whatever view it asked for",
    "run_code.result-view",
)
def run_code_ignores_result_view(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """run_code runs every program as if it had asked for `both`."""
    return rewrite_params("run_code", lambda params: {"result_view": ResultView.BOTH})(worker, backend)


@mutant(
    "run-code-ignores-timeout",
    "lets a program run past its timeout_ms",
    "run_code.timeout",
)
def run_code_ignores_timeout(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """run_code runs every program as if no timeout_ms had been given."""
    return rewrite_params("run_code", lambda params: {"timeout_ms": None})(worker, backend)


class _KeepsFailedState(CodeRunner):
    def _result(self, view: ResultView, done: Mapping[str, Any], program: Any) -> ToolResult:
        if isinstance(done.get("state"), dict):
            self.state = done["state"]
        return super()._result(view, done, program)


@mutant(
    "run-code-keeps-failed-state",
    "keeps the state a failed program left",
    "run_code.state",
)
def run_code_keeps_failed_state(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """The state a program leaves is kept whether or not the program succeeded."""

    def make(original: Handler) -> Handler:
        assert isinstance(original, CodeRunner)
        return _KeepsFailedState(original.confinement, original.max_output_bytes)

    return override(backend, "run_code", make)


@mutant(
    "calls-back-after-parent-ended",
    "sends a program's last tool/invoke once more after its run_code request was answered",
    "run_code.callbacks-while-live",
)
class CallsBackAfterParentEnded(Relay):
    """Once a run_code request is answered, its last tool/invoke goes to the host again under a fresh id, as
    from a program left running; the host's answer to it is dropped."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, Frame] = {}
        self._late: set[str] = set()

    def from_worker(self, line: bytes) -> None:
        self.to_host(line)
        frame = frame_of(line)
        if frame is None:
            return
        if frame.get("method") == "tool/invoke" and isinstance(frame.get("parent"), str):
            self._last[frame["parent"]] = frame
        elif self.answered is not None and self.answered[0] == "run_code" and frame.get("id") in self._last:
            late = {**self._last.pop(frame["id"]), "id": f"late-{frame['id']}"}
            self._late.add(late["id"])
            self.answer(late)

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is not None and "method" not in frame and frame.get("id") in self._late:
            return
        self.to_worker(line)
