"""Mutants of initialize: the state before it, its reply, the pinned token and binding, the protocol
version, a failed initialize, its params and the workspace flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from wuu.generated.catalog import WORKER_METHODS, WORKER_PROTOCOL_VERSION
from wuu.generated.models import ErrorCode, InitializeParams
from wuu.worker import ExecutionBackendV4, RequestContext, WorkerError
from wuu.worker.connection import request_params
from wuu.worker.native.worker import CAPABILITIES, NativeWorker

from . import mutant
from .harness import (
    Frame,
    Relay,
    ReplyRewriter,
    code_of,
    encode,
    frame_of,
    rewrite_initialize,
    rewrite_results,
)

# The wire names of initialize's fields; any other field of its data is unknown.
INITIALIZE_FIELDS = frozenset(field.alias or name for name, field in InitializeParams.model_fields.items())


def _initialize_of(line: bytes) -> Frame | None:
    """The line's frame when it is an initialize request with object data, else None."""
    frame = frame_of(line)
    if frame is None or frame.get("method") != "initialize" or not isinstance(frame.get("data"), dict):
        return None
    return frame


def _valid_initialize(data: Frame) -> bool:
    """Whether initialize data passes the params check (the worker compares bindings only then)."""
    try:
        request_params(WORKER_METHODS["initialize"], data)
    except WorkerError:
        return False
    return True


@mutant(
    "answers-cancel-before-initialize",
    "answers cancel before initialize with cancelled: false instead of not_initialized",
    "init.not-initialized",
)
class AnswersCancelBeforeInitialize(ReplyRewriter):
    """A cancel that the worker refuses as `not_initialized` (it came before initialize) is answered
    `{cancelled: false}` instead."""

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method == "cancel" and code_of(reply) == ErrorCode.NOT_INITIALIZED.value:
            return [{"id": reply["id"], "data": {"cancelled": False}}]
        return [reply]


def _grant_everything(result: Frame, request: Frame) -> None:
    result["capabilities"] = sorted(CAPABILITIES)


mutant(
    "grants-unrequested-capabilities",
    "grants every capability it has, requested or not",
    "init.reply",
)(
    rewrite_results(
        "initialize",
        _grant_everything,
        doc="The initialize reply grants every capability the native worker has, whatever the host requested.",
    )
)


@mutant(
    "advertises-unserved-method",
    "lists run_code among its methods, yet answers it unsupported_method",
    "init.methods-honest",
)
class AdvertisesUnservedMethod(ReplyRewriter):
    """The initialize reply lists `run_code` whether or not the worker could run a program, and every
    `run_code` request is answered `unsupported_method`."""

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method == "initialize" and isinstance(reply.get("data"), dict):
            reply["data"]["methods"] = sorted({*reply["data"]["methods"], "run_code"})
        elif method == "run_code":
            return [{"id": reply["id"], "error": f"{ErrorCode.UNSUPPORTED_METHOD.value}: run_code"}]
        return [reply]


@mutant(
    "ignores-token",
    "serves requests whatever token they carry",
    "init.token-pinned",
)
class IgnoresToken(Relay):
    """Every request's token is rewritten to the pinned one before the worker checks it.

    The pinned token is that of the first initialize, as the worker pins it; it is let go again if that
    initialize is refused, and the next initialize pins its own.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pinned: str | None = None
        self._pinning: str | None = None
        """The id of the initialize whose token is pinned, until the worker answers it."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is not None and isinstance(frame.get("method"), str) and isinstance(frame.get("token"), str):
            if self._pinned is None:
                if frame["method"] == "initialize" and isinstance(frame.get("id"), str):
                    self._pinned, self._pinning = frame["token"], frame["id"]
            elif frame["token"] != self._pinned:
                line = encode({**frame, "token": self._pinned})
        self.to_worker(line)

    def from_worker(self, line: bytes) -> None:
        frame = frame_of(line)
        if self.answered is not None and frame is not None and frame["id"] == self._pinning:
            if "error" in frame:
                self._pinned = None
            self._pinning = None
        self.to_host(line)


@mutant(
    "mutable-binding",
    "accepts a repeated initialize with a different binding",
    "init.binding-immutable",
)
class MutableBinding(Relay):
    """Once the worker has accepted an initialize, every later initialize with valid data reaches it with the
    pinned binding in place of its own, so a changed root or session is answered like the first."""

    def from_host(self, line: bytes) -> None:
        frame = _initialize_of(line)
        if frame is not None and self.initialized is not None and _valid_initialize(frame["data"]):
            line = encode({**frame, "data": self.initialized[1]})
        self.to_worker(line)


@mutant(
    "new-reply-on-reinitialize",
    "answers a repeated equal initialize with a different reply (another worker version)",
    "init.equal-reinitialize",
)
class NewReplyOnReinitialize(ReplyRewriter):
    """Each repeated initialize that succeeds is answered with the worker version bumped once more than the
    last (`0.1.0+1`, then `0.1.0+1+1`, ...)."""

    def __init__(self) -> None:
        super().__init__()
        self._answered = 0

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method == "initialize" and "data" in reply:
            reply["data"]["worker"]["version"] += "+1" * self._answered
            self._answered += 1
        return [reply]


@mutant(
    "ignores-protocol-version",
    "accepts any integer version at initialize and answers version 4",
    "init.protocol-mismatch",
)
class IgnoresProtocolVersion(Relay):
    """An initialize whose `version` is an integer other than 4 reaches the worker as version 4, so it never
    gets protocol_mismatch."""

    def from_host(self, line: bytes) -> None:
        frame = _initialize_of(line)
        version = frame["data"].get("version") if frame is not None else None
        if (
            frame is not None
            and isinstance(version, int)
            and not isinstance(version, bool)
            and version != WORKER_PROTOCOL_VERSION
        ):
            line = encode({**frame, "data": {**frame["data"], "version": WORKER_PROTOCOL_VERSION}})
        self.to_worker(line)


@mutant(
    "initialize-failure-not-final",
    "after a failed initialize, goes back to uninitialized instead of refusing everything",
    "init.failure-is-final",
)
class InitializeFailureNotFinal(Relay):
    """When an initialize fails (none has succeeded, and no other is in flight), the relay ends the dead
    worker connection and serves a fresh reference worker behind it: the connection is new again.

    An initialize refused without dying (protocol_mismatch, invalid params) leaves the worker new, so the
    fresh one it gets in its place is all the same.
    """

    def from_worker(self, line: bytes) -> None:
        frame = frame_of(line)
        if (
            self.answered is not None
            and self.answered[0] == "initialize"
            and frame is not None
            and code_of(frame) is not None
            and self.initialized is None
            and all(method != "initialize" for method, _ in self.requests.values())
        ):
            # Reconnect before the host learns of the failure: its next request goes to the fresh worker.
            self.reconnect(NativeWorker().backend())
        self.to_host(line)


@mutant(
    "ignores-require-existing",
    "creates a missing root even with require_existing_workspace",
    "init.workspace-missing",
)
def ignores_require_existing(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """The provider initializes as if require_existing_workspace were false."""
    return rewrite_initialize(lambda params: {"require_existing_workspace": False})(worker, backend)


@mutant(
    "does-not-create-root",
    "leaves a missing root missing (without require_existing_workspace) yet initializes",
    "init.workspace-created",
)
def does_not_create_root(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """initialize succeeds, but a root it had to create is removed again at once."""

    async def initialize(params: InitializeParams, context: RequestContext) -> None:
        root = Path(params.root)
        missing = not root.exists()
        await backend.initialize(params, context)
        if missing:
            root.rmdir()

    return dataclasses.replace(backend, initialize=initialize)


@mutant(
    "keeps-workspace-on-exit",
    "ignores remove_workspace_on_exit",
    "init.remove-workspace-on-exit",
)
def keeps_workspace_on_exit(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """The provider initializes as if remove_workspace_on_exit were false, so its cleanup keeps the root."""
    return rewrite_initialize(lambda params: {"remove_workspace_on_exit": False})(worker, backend)


@mutant(
    "accepts-unknown-initialize-fields",
    "drops unknown fields of initialize data instead of answering invalid_request",
    "init.invalid-params",
)
class AcceptsUnknownInitializeFields(Relay):
    """Fields that InitializeParams does not define are removed from initialize data before the worker
    checks it."""

    def from_host(self, line: bytes) -> None:
        frame = _initialize_of(line)
        if frame is not None and set(frame["data"]) - INITIALIZE_FIELDS:
            known = {key: value for key, value in frame["data"].items() if key in INITIALIZE_FIELDS}
            line = encode({**frame, "data": known})
        self.to_worker(line)
