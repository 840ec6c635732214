"""Mutants: the native reference worker with exactly one rule of the spec broken, to test the suite itself.

`python -m wuu.conformance.mutants NAME` serves `wuu.worker.native.worker.NativeWorker` with
`wuu.worker.run_execution_backend_v4` on stdin/stdout, after applying the one patch of the mutant NAME.
`python -m wuu.conformance.mutants --list` prints every mutant with the requirements it breaks, and
`--check` applies every patch in one process (all of them must find what they patch).

Each mutant is named for the rule it breaks and lists the requirement ids (conformance/requirements.json)
that rule belongs to. Its patch changes as little as it can: it monkeypatches one function or method of
the SDK or of the native worker, or rewrites the replies of one method on their way out. Everything
else (every other rule) stays as the reference worker has it, so the conformance suite must fail the
mutant with a case aimed at the broken requirement (tests/test_mutants.py checks that it does).

The patches are applied in the mutant's own process only; importing this module changes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import WORKER_MAX_FRAME_BYTES, WORKER_METHODS
from wuu.generated.models import (
    ErrorCode,
    InitializeParams,
    PermissionMode,
    ProcessEventCause,
    ProcessEventType,
    ProcessSignal,
)
from wuu.worker import connection as sdk_connection
from wuu.worker import framing as sdk_framing
from wuu.worker import streams as sdk_streams
from wuu.worker.connection import Connection
from wuu.worker.errors import WorkerError
from wuu.worker.framing import FrameReader, MalformedFrame
from wuu.worker.native import exports as native_exports
from wuu.worker.native import files as native_files
from wuu.worker.native import processes as native_processes
from wuu.worker.native import worker as native_worker
from wuu.worker.native.exports import Exports
from wuu.worker.native.paths import resolve
from wuu.worker.native.processes import ProcessRegistry
from wuu.worker.native.sensitive import SensitivePaths
from wuu.worker.native.worker import NativeWorker

Patch = Callable[[], None]
Frame = dict[str, Any]


@dataclass(frozen=True)
class Mutant:
    """One deliberately broken variant of the reference worker."""

    name: str
    """Kebab-case, named for the rule it breaks."""
    description: str
    """One line: what the mutant does wrong."""
    requirements: tuple[str, ...]
    """The ids of the requirements it breaks (conformance/requirements.json)."""
    patch: Patch
    """Applies the breakage to this process (the SDK and the native worker), before serving."""

    @property
    def doc(self) -> str:
        """How the patch breaks the rule (its docstring)."""
        return (self.patch.__doc__ or "").strip()


MUTANTS: dict[str, Mutant] = {}


def mutant(name: str, description: str, *requirements: str) -> Callable[[Patch], Patch]:
    """Register the decorated patch as the mutant `name` that breaks `requirements`."""

    def register(patch: Patch) -> Patch:
        if name in MUTANTS:
            raise ValueError(f"mutant {name} is registered twice")
        if not requirements:
            raise ValueError(f"mutant {name} names no requirement")
        MUTANTS[name] = Mutant(name, description, tuple(requirements), patch)
        return patch

    return register


# --- patching tools ------------------------------------------------------------------------------------


def _replace(owner: object, attribute: str, value: Any) -> None:
    """Replace `owner.attribute` (a function, method or constant) with `value`.

    The attribute must exist: a patch whose target was renamed fails here, loudly, rather than breaking
    nothing (or everything) in silence.
    """
    if not hasattr(owner, attribute):
        raise AttributeError(f"{owner!r} has no attribute {attribute!r} to patch")
    setattr(owner, attribute, value)


def _wrap(owner: object, attribute: str, make: Callable[[Any], Any]) -> None:
    """Replace `owner.attribute` with `make(original)`."""
    _replace(owner, attribute, make(getattr(owner, attribute)))


# The requests seen on this connection that await a reply: id -> (method, data). One connection per process.
_REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {}

Rewrite = Callable[[Frame, str, dict[str, Any]], list[Frame]]
"""(reply frame, the request's method, the request's data) -> the frames to send instead."""


def _rewrite_replies(rewrite: Rewrite) -> None:
    """Pass every reply to a host request through `rewrite` just before it is encoded and queued."""
    on_request = Connection._on_request
    send_frame = Connection._send_frame

    def tracking_on_request(self: Connection, frame_id: str, method: str, frame: Frame) -> None:
        data = frame.get("data")
        _REQUESTS[frame_id] = (method, data if isinstance(data, dict) else {})
        on_request(self, frame_id, method, frame)

    def rewriting_send_frame(self: Connection, frame: Frame) -> None:
        frames = [frame]
        if "method" not in frame and isinstance(frame.get("id"), str):
            request = _REQUESTS.pop(frame["id"], None)
            if request is not None:
                frames = rewrite(frame, *request)
        for each in frames:
            send_frame(self, each)

    _replace(Connection, "_on_request", tracking_on_request)
    _replace(Connection, "_send_frame", rewriting_send_frame)


def _tool_of(data: dict[str, Any]) -> Any:
    return data.get("tool")


def _rewrite_results(
    method: str, change: Callable[[dict[str, Any], dict[str, Any]], None], tool: str = ""
) -> None:
    """Change, in place, the result data of every successful `method` request (of `tool`, for execute)."""

    def rewrite(frame: Frame, request_method: str, data: dict[str, Any]) -> list[Frame]:
        if request_method == method and "data" in frame and (not tool or _tool_of(data) == tool):
            change(frame["data"], data)
        return [frame]

    _rewrite_replies(rewrite)


def _code(frame: Frame) -> str | None:
    error = frame.get("error")
    return error.split(":", 1)[0] if isinstance(error, str) else None


def _rewrite_error(
    method: str, code: ErrorCode, answer: Callable[[dict[str, Any]], Frame], tool: str = ""
) -> None:
    """Answer `method` requests that fail with `code` with `answer(request data)` (a success) instead."""

    def rewrite(frame: Frame, request_method: str, data: dict[str, Any]) -> list[Frame]:
        if request_method == method and _code(frame) == code.value and (not tool or _tool_of(data) == tool):
            return [{"id": frame["id"], "data": answer(data)}]
        return [frame]

    _rewrite_replies(rewrite)


def _skip_lines(skip: Callable[[bytes], bool]) -> None:
    """Make the frame reader drop input lines for which `skip(line)` holds and go on reading."""

    async def read(self: FrameReader) -> Frame | None:
        reader: asyncio.StreamReader = self._reader
        while True:
            try:
                line = await reader.readuntil(sdk_framing.NEWLINE)
            except asyncio.IncompleteReadError as error:
                if error.partial:
                    raise MalformedFrame(f"input ended inside a frame ({len(error.partial)} bytes)") from None
                return None
            except asyncio.LimitOverrunError:
                raise MalformedFrame(f"frame over the limit of {self._limit} bytes") from None
            if len(line) > self._limit:
                raise MalformedFrame(f"frame of {len(line)} bytes is over the limit of {self._limit}")
            if not skip(line):
                return sdk_framing.decode(line)

    _replace(FrameReader, "read", read)


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json(line: bytes) -> Any:
    """The JSON value of a line, or a marker object when it is not JSON."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return _NOT_JSON


_NOT_JSON = object()

# Process groups the worker has spawned (pgid, which is the leader's pid), for the reaper of leaky mutants.
_GROUPS: set[int] = set()

_REAPER = """
import os, signal, sys, time
delay, cutoff, groups = float(sys.argv[1]), int(sys.argv[2]), {int(g) for g in sys.argv[3:]}
time.sleep(delay)
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    try:
        with open(f"/proc/{name}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        continue
    # fields[2] is the process group, fields[19] the start time (clock ticks after boot).
    if int(fields[2]) in groups and int(fields[19]) <= cutoff:
        try:
            os.kill(int(name), signal.SIGKILL)
        except OSError:
            pass
"""


def _record_groups() -> None:
    """Remember the process group of every command and process the worker spawns."""
    spawn = native_processes._spawn

    async def recording_spawn(*args: Any, **kwargs: Any) -> Any:
        transport, pipes = await spawn(*args, **kwargs)
        _GROUPS.add(transport.get_pid())
        return transport, pipes

    _replace(native_processes, "_spawn", recording_spawn)


def _reap_later(delay: float = 15.0) -> None:
    """Kill what is left of the spawned groups `delay` seconds from now, from a detached process.

    A mutant that leaks process trees on purpose still must not litter the machine that tests it. Only
    processes started before now are killed, so a reused process group id is never hit.
    """
    if not _GROUPS:
        return
    with open("/proc/uptime", encoding="ascii") as handle:
        uptime = float(handle.read().split()[0])
    cutoff = int((uptime + 1) * os.sysconf("SC_CLK_TCK"))
    subprocess.Popen(
        [sys.executable, "-c", _REAPER, str(delay), str(cutoff), *map(str, sorted(_GROUPS))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


# --- framing ---------------------------------------------------------------------------------------------


@mutant(
    "multi-line-frames",
    "writes every frame pretty-printed over several lines",
    "framing.newline-delimited",
)
def _multi_line_frames() -> None:
    """Outgoing frames are encoded with orjson's indentation, so one frame spans several lines."""

    def encode(frame: Frame, limit: int = WORKER_MAX_FRAME_BYTES) -> bytes:
        data = orjson.dumps(frame, option=orjson.OPT_INDENT_2) + sdk_framing.NEWLINE
        if len(data) > limit:
            raise sdk_framing.FrameTooLarge(f"{len(data)} bytes is over the frame limit of {limit}")
        return data

    _replace(sdk_connection, "encode", encode)


@mutant(
    "skips-non-json-lines",
    "ignores a UTF-8 line that is not JSON and keeps serving",
    "framing.malformed-not-json",
)
def _skips_non_json_lines() -> None:
    """The frame reader drops valid UTF-8 lines that do not parse as JSON instead of ending the connection."""
    _skip_lines(lambda line: _utf8(line) and _json(line) is _NOT_JSON)


@mutant(
    "skips-non-object-frames",
    "ignores a JSON value that is not an object and keeps serving",
    "framing.malformed-not-object",
)
def _skips_non_object_frames() -> None:
    """The frame reader drops lines holding JSON arrays, strings, numbers, ... instead of ending the connection."""

    def not_object(line: bytes) -> bool:
        value = _json(line)
        return value is not _NOT_JSON and not isinstance(value, dict)

    _skip_lines(not_object)


@mutant(
    "skips-invalid-utf8",
    "ignores a line that is not UTF-8 and keeps serving",
    "framing.malformed-invalid-utf8",
)
def _skips_invalid_utf8() -> None:
    """The frame reader drops lines that are not UTF-8 instead of ending the connection."""
    _skip_lines(lambda line: not _utf8(line))


@mutant(
    "ignores-frames-without-id",
    "ignores a request without a string id and keeps serving",
    "framing.malformed-no-id",
)
def _ignores_frames_without_id() -> None:
    """A frame whose `id` is missing or not a string is dropped instead of ending the connection."""

    def make(dispatch: Any) -> Any:
        def patched(self: Connection, frame: Frame) -> str | None:
            if not isinstance(frame.get("id"), str):
                return None
            result: str | None = dispatch(self, frame)
            return result

        return patched

    _wrap(Connection, "_dispatch", make)


@mutant(
    "answers-non-string-method",
    "answers a frame whose method is not a string with invalid_request and keeps serving",
    "framing.malformed-bad-method",
)
def _answers_non_string_method() -> None:
    """A request frame whose `method` is not a string gets an `invalid_request` reply; the connection goes on."""

    def make(dispatch: Any) -> Any:
        def patched(self: Connection, frame: Frame) -> str | None:
            frame_id = frame.get("id")
            if (
                isinstance(frame_id, str)
                and frame_id
                and "method" in frame
                and not isinstance(frame["method"], str)
            ):
                self._reply_error(frame_id, WorkerError(ErrorCode.INVALID_REQUEST, "method: not a string"))
                return None
            result: str | None = dispatch(self, frame)
            return result

        return patched

    _wrap(Connection, "_dispatch", make)


@mutant(
    "answers-bad-ids",
    "answers a request whose id is empty or over 256 bytes with invalid_request and keeps serving",
    "framing.malformed-bad-id",
)
def _answers_bad_ids() -> None:
    """A frame with an empty or overlong string id gets an `invalid_request` reply; the connection goes on."""

    def make(dispatch: Any) -> Any:
        def patched(self: Connection, frame: Frame) -> str | None:
            frame_id = frame.get("id")
            if isinstance(frame_id, str) and (not frame_id or len(frame_id.encode()) > 256):
                self._reply_error(frame_id, WorkerError(ErrorCode.INVALID_REQUEST, "id: empty or too long"))
                return None
            result: str | None = dispatch(self, frame)
            return result

        return patched

    _wrap(Connection, "_dispatch", make)


@mutant(
    "accepts-oversize-frames",
    "reads and answers a frame one byte over the 16 MiB limit",
    "framing.malformed-oversize",
)
def _accepts_oversize_frames() -> None:
    """The input limit is 16 MiB + 1 byte (stream buffer and frame reader), so such a frame is served."""
    _replace(sdk_streams, "reader_limit", lambda limit=WORKER_MAX_FRAME_BYTES: limit)

    def make(init: Any) -> Any:
        def patched(
            self: FrameReader, reader: asyncio.StreamReader, limit: int = WORKER_MAX_FRAME_BYTES
        ) -> None:
            init(self, reader, limit + 1)

        return patched

    _wrap(FrameReader, "__init__", make)


@mutant(
    "rejects-max-size-frames",
    "treats a frame of exactly 16 MiB (newline included) as oversize",
    "framing.max-frame-accepted",
)
def _rejects_max_size_frames() -> None:
    """The input buffer admits one byte less than the limit, so a frame of exactly 16 MiB ends the connection."""
    _replace(sdk_streams, "reader_limit", lambda limit=WORKER_MAX_FRAME_BYTES: limit - 2)


@mutant(
    "exits-without-draining",
    "on a malformed frame exits at once: no handler is cancelled or drained, no cleanup runs",
    "framing.malformed-drains-handlers",
)
def _exits_without_draining() -> None:
    """After a malformed frame the process exits on the spot (os._exit), leaving in-flight work as it is.

    What it leaks (commands of in-flight requests, background processes) is killed by a detached
    reaper 15 s later.
    """
    _record_groups()

    def make(read_loop: Any) -> Any:
        async def patched(self: Connection) -> None:
            await read_loop(self)
            if self.end_reason.startswith("malformed frame"):
                _reap_later()
                os._exit(0)

        return patched

    _wrap(Connection, "_read_loop", make)


@mutant(
    "accepts-unknown-frame-fields",
    "ignores unknown fields of a request frame instead of answering invalid_request",
    "framing.request-fields",
)
def _accepts_unknown_frame_fields() -> None:
    """Fields of a request frame other than id, method, token and data are dropped before it is checked."""

    def make(on_request: Any) -> Any:
        def patched(self: Connection, frame_id: str, method: str, frame: Frame) -> None:
            known = {key: value for key, value in frame.items() if key in sdk_connection.REQUEST_KEYS}
            on_request(self, frame_id, method, known)

        return patched

    _wrap(Connection, "_on_request", make)


@mutant(
    "accepts-duplicate-ids",
    "serves a request whose id is still in flight instead of answering invalid_request",
    "framing.duplicate-id",
)
def _accepts_duplicate_ids() -> None:
    """The in-flight check is skipped: the first request is forgotten and both get a reply with the same id."""

    def make(on_request: Any) -> Any:
        def patched(self: Connection, frame_id: str, method: str, frame: Frame) -> None:
            self._inflight.pop(frame_id, None)
            on_request(self, frame_id, method, frame)

        return patched

    _wrap(Connection, "_on_request", make)


@mutant(
    "sends-oversize-replies",
    "sends a reply over 16 MiB instead of replacing it with reply_too_large",
    "framing.reply-too-large",
)
def _sends_oversize_replies() -> None:
    """Outgoing frames are encoded without the size check, so an oversize reply goes out whole."""

    def encode(frame: Frame, limit: int = WORKER_MAX_FRAME_BYTES) -> bytes:
        return orjson.dumps(frame) + sdk_framing.NEWLINE

    _replace(sdk_connection, "encode", encode)


# --- errors ----------------------------------------------------------------------------------------------


@mutant(
    "unknown-error-code",
    "answers not_found with a code the spec does not define (no_such_entry)",
    "errors.format",
)
def _unknown_error_code() -> None:
    """Every `not_found` error reply goes out as `no_such_entry: ...`."""

    def rewrite(frame: Frame, method: str, data: dict[str, Any]) -> list[Frame]:
        if _code(frame) == ErrorCode.NOT_FOUND.value:
            frame = {"id": frame["id"], "error": "no_such_entry" + frame["error"][len("not_found") :]}
        return [frame]

    _rewrite_replies(rewrite)


@mutant(
    "list-result-extra-field",
    "adds a field that ProcessListResult does not define to process/list results",
    "errors.replies-follow-schema",
)
def _list_result_extra_field() -> None:
    """The process/list result carries an extra `count` beside `processes`."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["count"] = len(result.get("processes", []))

    _rewrite_results("process/list", change)


# --- initialize ------------------------------------------------------------------------------------------


@mutant(
    "answers-cancel-before-initialize",
    "answers cancel before initialize with cancelled: false instead of not_initialized",
    "init.not-initialized",
)
def _answers_cancel_before_initialize() -> None:
    """A cancel that arrives before initialize is answered `{cancelled: false}`."""

    def make(on_cancel: Any) -> Any:
        def patched(self: Connection, frame_id: str, token: str, data: dict[str, Any]) -> None:
            if self._state is sdk_connection._State.NEW:
                self._send_reply(frame_id, {"cancelled": False})
                return
            on_cancel(self, frame_id, token, data)

        return patched

    _wrap(Connection, "_on_cancel", make)


@mutant(
    "grants-unrequested-capabilities",
    "grants every capability it has, requested or not",
    "init.reply",
)
def _grants_unrequested_capabilities() -> None:
    """initialize grants (and lists) all of the backend's capabilities, whatever the host requested."""

    def make(run_initialize: Any) -> Any:
        async def patched(self: Connection, context: Any, params: InitializeParams) -> dict[str, Any]:
            reply: dict[str, Any] = await run_initialize(self, context, params)
            self.granted = frozenset(self._backend.capabilities)
            reply["capabilities"] = sorted(self.granted)
            return reply

        return patched

    _wrap(Connection, "_run_initialize", make)


@mutant(
    "advertises-unserved-method",
    "lists run_code among its methods, yet answers it unsupported_method",
    "init.methods-honest",
)
def _advertises_unserved_method() -> None:
    """The initialize reply's methods include `run_code`, which the native worker does not serve."""

    def make(run_initialize: Any) -> Any:
        async def patched(self: Connection, context: Any, params: InitializeParams) -> dict[str, Any]:
            reply: dict[str, Any] = await run_initialize(self, context, params)
            reply["methods"] = sorted({*reply["methods"], "run_code"})
            return reply

        return patched

    _wrap(Connection, "_run_initialize", make)


@mutant(
    "ignores-token",
    "serves requests whatever token they carry",
    "init.token-pinned",
)
def _ignores_token() -> None:
    """The pinned-token check accepts any token."""
    _replace(Connection, "_check_token", lambda self, token: None)


@mutant(
    "mutable-binding",
    "accepts a repeated initialize with a different binding",
    "init.binding-immutable",
)
def _mutable_binding() -> None:
    """Every binding compares equal to the pinned one, so a changed root or session is answered like the first."""
    _replace(sdk_connection, "same_binding", lambda first, second: True)


@mutant(
    "new-reply-on-reinitialize",
    "answers a repeated equal initialize with a different reply (another worker version)",
    "init.equal-reinitialize",
)
def _new_reply_on_reinitialize() -> None:
    """Each repeated initialize bumps the worker version in the stored reply before answering it."""

    def make(on_initialize: Any) -> Any:
        def patched(self: Connection, frame_id: str, token: str, data: dict[str, Any]) -> None:
            if self._state is sdk_connection._State.READY and self._init_reply is not None:
                worker = self._init_reply["worker"]
                self._init_reply = {
                    **self._init_reply,
                    "worker": {**worker, "version": worker["version"] + "+1"},
                }
            on_initialize(self, frame_id, token, data)

        return patched

    _wrap(Connection, "_on_initialize", make)


@mutant(
    "ignores-protocol-version",
    "accepts any integer version at initialize and answers version 4",
    "init.protocol-mismatch",
)
def _ignores_protocol_version() -> None:
    """An integer `version` other than 4 is read as 4, so it never gets protocol_mismatch."""

    def make(on_initialize: Any) -> Any:
        def patched(self: Connection, frame_id: str, token: str, data: dict[str, Any]) -> None:
            version = data.get("version")
            if isinstance(version, int) and not isinstance(version, bool):
                data = {**data, "version": 4}
            on_initialize(self, frame_id, token, data)

        return patched

    _wrap(Connection, "_on_initialize", make)


@mutant(
    "initialize-failure-not-final",
    "after a failed initialize, goes back to uninitialized instead of refusing everything",
    "init.failure-is-final",
)
def _initialize_failure_not_final() -> None:
    """A failed or cancelled initialize leaves the connection new rather than dead."""

    def make(outcome: Any) -> Any:
        def patched(self: Connection, context: Any, task: Any) -> Frame:
            reply: Frame = outcome(self, context, task)
            if self._state is sdk_connection._State.DEAD:
                self._state = sdk_connection._State.NEW
                self.pending_binding = None
            return reply

        return patched

    _wrap(Connection, "_outcome", make)


@mutant(
    "ignores-require-existing",
    "creates a missing root even with require_existing_workspace",
    "init.workspace-missing",
)
def _ignores_require_existing() -> None:
    """initialize treats require_existing_workspace as false."""

    def make(initialize: Any) -> Any:
        async def patched(self: NativeWorker, params: InitializeParams, context: Any) -> None:
            await initialize(self, params.model_copy(update={"require_existing_workspace": False}), context)

        return patched

    _wrap(NativeWorker, "initialize", make)


@mutant(
    "does-not-create-root",
    "leaves a missing root missing (without require_existing_workspace) yet initializes",
    "init.workspace-created",
)
def _does_not_create_root() -> None:
    """initialize succeeds, but a root it had to create is removed again at once."""

    def make(initialize: Any) -> Any:
        async def patched(self: NativeWorker, params: InitializeParams, context: Any) -> None:
            missing = not Path(params.root).exists()
            await initialize(self, params, context)
            if missing:
                Path(params.root).rmdir()

        return patched

    _wrap(NativeWorker, "initialize", make)


@mutant(
    "keeps-workspace-on-exit",
    "ignores remove_workspace_on_exit",
    "init.remove-workspace-on-exit",
)
def _keeps_workspace_on_exit() -> None:
    """The worker's cleanup runs as if remove_workspace_on_exit were false."""

    def make(close: Any) -> Any:
        async def patched(self: NativeWorker) -> None:
            if self._binding is not None:
                self._binding = self._binding.model_copy(update={"remove_workspace_on_exit": False})
            await close(self)

        return patched

    _wrap(NativeWorker, "close", make)


@mutant(
    "accepts-unknown-initialize-fields",
    "drops unknown fields of initialize data instead of answering invalid_request",
    "init.invalid-params",
)
def _accepts_unknown_initialize_fields() -> None:
    """Fields that InitializeParams does not define are removed from initialize data before validation."""
    known = {field.alias or name for name, field in InitializeParams.model_fields.items()}

    def make(on_initialize: Any) -> Any:
        def patched(self: Connection, frame_id: str, token: str, data: dict[str, Any]) -> None:
            on_initialize(self, frame_id, token, {key: value for key, value in data.items() if key in known})

        return patched

    _wrap(Connection, "_on_initialize", make)


# --- cancel ----------------------------------------------------------------------------------------------


@mutant(
    "answers-cancel-late",
    "answers cancel only once the request it names has ended (and lets that request run on)",
    "cancel.answered-at-once",
)
def _answers_cancel_late() -> None:
    """A cancel of a request in flight is answered `{cancelled: true}` after that request's terminal reply.

    The named request is not interrupted: it finishes on its own (its result is a legal outcome of a
    cancel), and only then is the cancel answered.
    """

    def make(on_cancel: Any) -> Any:
        def patched(self: Connection, frame_id: str, token: str, data: dict[str, Any]) -> None:
            target_id = data.get("id")
            target = self._inflight.get(target_id) if isinstance(target_id, str) else None
            if (
                self._state is sdk_connection._State.READY
                and token == self._token
                and set(data) == {"id"}
                and target is not None
                and target.task is not None
                and not target.task.done()
            ):
                target.task.add_done_callback(lambda _: self._send_reply(frame_id, {"cancelled": True}))
                return
            on_cancel(self, frame_id, token, data)

        return patched

    _wrap(Connection, "_on_cancel", make)


@mutant(
    "two-terminal-replies",
    "answers a cancelled request with `cancelled` at once and again when its handler ends",
    "cancel.one-terminal-reply",
)
def _two_terminal_replies() -> None:
    """Cancelling a request in flight also sends it an extra `cancelled` reply before its own terminal reply."""

    def make(on_cancel: Any) -> Any:
        def patched(self: Connection, frame_id: str, token: str, data: dict[str, Any]) -> None:
            target_id = data.get("id")
            target = self._inflight.get(target_id) if isinstance(target_id, str) else None
            live = target is not None and target.task is not None and not target.task.done()
            on_cancel(self, frame_id, token, data)
            if live and isinstance(target_id, str):
                self._send_frame({"id": target_id, "error": ErrorCode.CANCELLED.value})

        return patched

    _wrap(Connection, "_on_cancel", make)


@mutant(
    "cancels-unknown-ids",
    "answers cancelled: true for a cancel of an unknown or finished request",
    "cancel.unknown-id",
)
def _cancels_unknown_ids() -> None:
    """Every successful cancel reply says `cancelled: true`."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["cancelled"] = True

    _rewrite_results("cancel", change)


# --- methods ---------------------------------------------------------------------------------------------


@mutant(
    "unknown-method-invalid-request",
    "answers a method the catalog does not know with invalid_request, not unsupported_method",
    "methods.unsupported",
)
def _unknown_method_invalid_request() -> None:
    """After initialize, a request for a method outside the catalog gets `invalid_request`."""

    def make(on_request: Any) -> Any:
        def patched(self: Connection, frame_id: str, method: str, frame: Frame) -> None:
            if self._state is sdk_connection._State.READY and method not in WORKER_METHODS:
                raise WorkerError(ErrorCode.INVALID_REQUEST, f"no method {method}")
            on_request(self, frame_id, method, frame)

        return patched

    _wrap(Connection, "_on_request", make)


@mutant(
    "invalid-params-internal",
    "answers method params that violate the schema with internal, not invalid_request",
    "methods.invalid-params",
)
def _invalid_params_internal() -> None:
    """Params validation of every method but initialize and cancel fails with `internal`."""
    parse_params = sdk_connection.parse_params

    def patched(spec: Any, data: Any) -> Any:
        try:
            return parse_params(spec, data)
        except WorkerError as error:
            if spec.method in ("initialize", "cancel") or error.code is not ErrorCode.INVALID_REQUEST:
                raise
            raise WorkerError(ErrorCode.INTERNAL, error.message) from None

    _replace(sdk_connection, "parse_params", patched)


@mutant(
    "coerces-param-types",
    'accepts "1" for an integer (and the like) in method params instead of answering invalid_request',
    "fuzz.invalid-requests",
    "methods.invalid-params",
)
def _coerces_param_types() -> None:
    """Method params are validated in pydantic's lax mode, so a string of digits passes for an integer."""

    def patched(spec: Any, data: Any) -> Any:
        try:
            return spec.params.model_validate(data)
        except ValueError as error:
            raise WorkerError(ErrorCode.INVALID_REQUEST, str(error).splitlines()[0]) from None

    _replace(sdk_connection, "parse_params", patched)


@mutant(
    "crashes-on-unknown-process-write",
    "exits (without a reply) on a process/write of a process it does not know",
    "fuzz.valid-requests",
)
def _crashes_on_unknown_process_write() -> None:
    """process/write of an unknown process id ends the worker process on the spot."""

    def make(write: Any) -> Any:
        async def patched(self: ProcessRegistry, process_id: str, data: bytes, close: bool) -> Any:
            if process_id not in self._processes:
                os._exit(3)
            return await write(self, process_id, data, close)

        return patched

    _wrap(ProcessRegistry, "write", make)


@mutant(
    "serial-handlers",
    "runs one request at a time: a fast request waits for a slow one",
    "methods.overlap",
)
def _serial_handlers() -> None:
    """Every method handler (all but initialize and cancel) runs under one lock."""
    locks: list[asyncio.Lock] = []

    def make(run_handler: Any) -> Any:
        async def patched(self: Connection, context: Any, handler: Any, params: Any) -> dict[str, Any]:
            if not locks:
                locks.append(asyncio.Lock())
            async with locks[0]:
                result: dict[str, Any] = await run_handler(self, context, handler, params)
                return result

        return patched

    _wrap(Connection, "_run_handler", make)


# --- execute and the tools -------------------------------------------------------------------------------


@mutant(
    "unknown-tool-error-result",
    "answers an unknown tool with an error result instead of unsupported_tool",
    "execute.unsupported-tool",
)
def _unknown_tool_error_result() -> None:
    """`execute` of a tool the worker does not provide answers `{output, is_error: true}`."""
    _rewrite_error(
        "execute",
        ErrorCode.UNSUPPORTED_TOOL,
        lambda data: {"output": f"unknown tool {data.get('tool')}", "is_error": True},
    )


@mutant(
    "lenient-tool-arguments",
    "drops unknown tool arguments and coerces wrongly typed ones instead of answering invalid_request",
    "execute.invalid-arguments",
)
def _lenient_tool_arguments() -> None:
    """Tool arguments are validated laxly, after removing the fields the tool does not define."""
    tool_arguments = native_worker._tool_arguments

    def patched(model: Any, text: str) -> Any:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            return tool_arguments(model, text)
        known = {field.alias or name for name, field in model.model_fields.items()}
        try:
            return model.model_validate({key: item for key, item in value.items() if key in known})
        except ValueError:
            return tool_arguments(model, text)

    _replace(native_worker, "_tool_arguments", patched)


@mutant(
    "read-eof-always-false",
    "reports eof: false from read_file even at the end of the file",
    "tools.read-file",
)
def _read_eof_always_false() -> None:
    """read_file's metadata always says `eof: false`."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        metadata = result.get("metadata")
        if isinstance(metadata, dict):
            metadata["eof"] = False

    _rewrite_results("execute", change, tool="read_file")


@mutant(
    "write-creates-parents",
    "creates missing parent directories in write_file without create_dirs",
    "tools.write-file",
)
def _write_creates_parents() -> None:
    """write_file runs as if `create_dirs` were always true."""

    def make(write_file: Any) -> Any:
        def patched(path: Path, args: Any) -> Any:
            return write_file(path, args.model_copy(update={"create_dirs": True}))

        return patched

    _wrap(native_files, "write_file", make)


@mutant(
    "edit-replaces-ambiguous",
    "replaces every occurrence of an ambiguous old_string instead of refusing",
    "tools.edit-file",
)
def _edit_replaces_ambiguous() -> None:
    """edit_file runs as if `replace_all` were always true."""

    def make(edit_file: Any) -> Any:
        def patched(path: Path, args: Any) -> Any:
            return edit_file(path, args.model_copy(update={"replace_all": True}))

        return patched

    _wrap(native_files, "edit_file", make)


@mutant(
    "list-dir-unsorted",
    "lists directory entries in reverse order",
    "tools.list-dir",
)
def _list_dir_unsorted() -> None:
    """list_dir's entries (metadata and output lines) come in reverse order."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        metadata = result.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("entries"), list):
            metadata["entries"].reverse()
        if isinstance(result.get("output"), str):
            result["output"] = "\n".join(reversed(result["output"].split("\n")))

    _rewrite_results("execute", change, tool="list_dir")


@mutant(
    "missing-file-reads-empty",
    "answers read_file of a missing file with empty content instead of not_found",
    "tools.not-found",
)
def _missing_file_reads_empty() -> None:
    """A read_file that fails with not_found answers an empty file instead."""

    def empty(data: dict[str, Any]) -> dict[str, Any]:
        return {
            "output": "",
            "is_error": False,
            "metadata": {"size": 0, "offset_bytes": 0, "returned_bytes": 0, "eof": True},
        }

    _rewrite_error("execute", ErrorCode.NOT_FOUND, empty, tool="read_file")


@mutant(
    "exec-failure-not-error",
    "reports a non-zero exit of exec_command with is_error: false",
    "tools.exec-command",
)
def _exec_failure_not_error() -> None:
    """exec_command results always say `is_error: false`."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["is_error"] = False

    _rewrite_results("execute", change, tool="exec_command")


@mutant(
    "exec-ignores-timeout",
    "lets exec_command run past timeout_ms",
    "tools.exec-timeout",
)
def _exec_ignores_timeout() -> None:
    """exec_command runs its command without a timeout."""

    def make(run_command: Any) -> Any:
        async def patched(argv: list[str], **kwargs: Any) -> Any:
            return await run_command(argv, **{**kwargs, "timeout_ms": None})

        return patched

    _wrap(native_worker, "run_command", make)


# --- paths, sensitive paths, read_only, the sandbox, the environment --------------------------------------


def _within(location: str, root: str) -> bool:
    return location == root or location.startswith(root.rstrip("/") + "/")


@mutant(
    "allows-dotdot",
    "lets a relative path with `..` leave the root in standard and read_only",
    "paths.outside-root",
)
def _allows_dotdot() -> None:
    """A relative path with a `..` component is resolved without the root boundary."""

    def make(resolve: Any) -> Any:
        def patched(root: Path, path: str, *, confined: bool) -> Path:
            dotdot = not os.path.isabs(path) and ".." in path.split("/")
            resolved: Path = resolve(root, path, confined=confined and not dotdot)
            return resolved

        return patched

    _wrap(native_worker, "resolve", make)


@mutant(
    "follows-symlinks-out",
    "follows a symlink inside the root to a target outside it",
    "paths.symlink-escape",
)
def _follows_symlinks_out() -> None:
    """A path that is inside the root as written is resolved without the boundary, so its symlinks may leave."""

    def make(resolve: Any) -> Any:
        def patched(root: Path, path: str, *, confined: bool) -> Path:
            real_root = os.path.realpath(root)
            lexical = os.path.normpath(os.path.join(real_root, path))
            inside = "\0" not in path and _within(lexical, real_root)
            resolved: Path = resolve(root, path, confined=confined and not inside)
            return resolved

        return patched

    _wrap(native_worker, "resolve", make)


@mutant(
    "confines-unconfined",
    "keeps the root boundary in unconfined mode",
    "paths.unconfined",
)
def _confines_unconfined() -> None:
    """Tool paths are resolved confined to the root in every mode."""

    def make(resolve: Any) -> Any:
        def patched(root: Path, path: str, *, confined: bool) -> Path:
            resolved: Path = resolve(root, path, confined=True)
            return resolved

        return patched

    _wrap(native_worker, "resolve", make)


@mutant(
    "sensitive-writable-unconfined",
    "lets unconfined tools write sensitive paths such as .env",
    "sensitive.write-refused",
)
def _sensitive_writable_unconfined() -> None:
    """In unconfined mode the sensitive-path guard is skipped for writes."""

    def make(path_of: Any) -> Any:
        def patched(self: NativeWorker, path: str, mode: PermissionMode, *, write: bool) -> Path:
            if write and mode is PermissionMode.UNCONFINED:
                resolved: Path = resolve(self._root, path, confined=False)
                return resolved
            checked: Path = path_of(self, path, mode, write=write)
            return checked

        return patched

    _wrap(NativeWorker, "_path", make)


@mutant(
    "guards-credentials-go",
    "treats any file named credentials.* (credentials.go included) as sensitive",
    "sensitive.not-overbroad",
)
def _guards_credentials_go() -> None:
    """The sensitive-path guard refuses every path whose name starts with `credentials`."""

    def make(check: Any) -> Any:
        def patched(self: SensitivePaths, path: Path, *, write: bool) -> None:
            if path.name.lower().startswith("credentials"):
                raise WorkerError(ErrorCode.SENSITIVE_PATH, f"{path} looks like a credential file")
            check(self, path, write=write)

        return patched

    _wrap(SensitivePaths, "check", make)


@mutant(
    "read-only-writes",
    "lets write_file write in read_only",
    "readonly.mutation-refused",
)
def _read_only_writes() -> None:
    """A read_only `write_file` runs as if the mode were standard."""

    def make(execute: Any) -> Any:
        async def patched(self: NativeWorker, request: Any, context: Any) -> Any:
            if request.tool == "write_file" and request.permission_mode is PermissionMode.READ_ONLY:
                request = request.model_copy(update={"permission_mode": PermissionMode.STANDARD})
            return await execute(self, request, context)

        return patched

    _wrap(NativeWorker, "execute", make)


@mutant(
    "confined-runs-unconfined",
    "runs standard and read_only commands without the OS sandbox",
    "sandbox.never-unconfined",
)
def _confined_runs_unconfined() -> None:
    """Commands get no sandbox hook in any mode."""
    _replace(NativeWorker, "_sandbox", lambda self, mode: None)


@mutant(
    "leaks-worker-environment",
    "passes the worker's own environment on to commands",
    "commands.environment",
)
def _leaks_worker_environment() -> None:
    """A command's environment starts from the worker's os.environ."""

    def make(command_environment: Any) -> Any:
        def patched(*args: Any) -> dict[str, str]:
            return {**os.environ, **command_environment(*args)}

        return patched

    _wrap(native_worker, "command_environment", make)


# --- processes -------------------------------------------------------------------------------------------


@mutant(
    "start-record-wrong-session",
    "answers process/start with a record bound to another root_thread_id",
    "process.start-record",
)
def _start_record_wrong_session() -> None:
    """The process/start reply's root_thread_id is not the binding's session."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["root_thread_id"] = "worker-session"

    _rewrite_results("process/start", change)


@mutant(
    "lists-other-sessions",
    "lists a process of another session in process/list",
    "process.list-get",
)
def _lists_other_sessions() -> None:
    """process/list appends the record of a process that belongs to another session."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["processes"].append(
            {
                "id": "other-session-p1",
                "root_thread_id": "another-thread",
                "argv": ["sleep", "30"],
                "cwd": "/",
                "status": "running",
                "exit_code": None,
                "signal": None,
                "started_at": "2025-01-01T00:00:00.000000000Z",
                "ended_at": None,
                "duration_ns": None,
                "output_bytes": 0,
            }
        )

    _rewrite_results("process/list", change)


@mutant(
    "stop-leader-only",
    "process/stop signals only the leader, not its whole tree",
    "process.stop-tree",
)
def _stop_leader_only() -> None:
    """process/stop sends TERM (KILL after the grace) to the process itself, never to its process group.

    The rest of the tree lives on until the worker's cleanup at EOF, which still ends whole groups.
    """

    async def stop(self: ProcessRegistry, process_id: str, signal_name: ProcessSignal, grace_ms: int) -> Any:
        process = self._lookup(process_id)
        self._claim_stop(process, ProcessEventCause.STOP_REQUEST)
        pipes, transport, pid = process.pipes, process.transport, process.pid
        if pipes is not None and transport is not None and pid is not None and not pipes.exited.done():
            first = signal.SIGKILL if signal_name is ProcessSignal.KILL else signal.SIGTERM
            os.kill(pid, first)
            done, _ = await asyncio.wait((pipes.exited,), timeout=grace_ms / 1000)
            if not done:
                os.kill(pid, signal.SIGKILL)
                await pipes.exited
            done, _ = await asyncio.wait((pipes.drained,), timeout=0.5)
            if not done:
                transport.close()  # descendants hold the output pipe; end the record anyway
        await asyncio.shield(process.done)
        return process.record()

    _replace(ProcessRegistry, "stop", stop)


@mutant(
    "ignores-process-timeout",
    "lets a background process run past its timeout_ms",
    "process.timeout",
)
def _ignores_process_timeout() -> None:
    """process/start drops timeout_ms."""

    def make(start: Any) -> Any:
        async def patched(self: ProcessRegistry, params: Any, **kwargs: Any) -> Any:
            return await start(self, params.model_copy(update={"timeout_ms": None}), **kwargs)

        return patched

    _wrap(ProcessRegistry, "start", make)


@mutant(
    "no-started-event",
    "sends no started event for a new process",
    "process.events",
)
def _no_started_event() -> None:
    """`process/event` notifications of type started are dropped."""

    def make(emit: Any) -> Any:
        def patched(self: Connection, event: Any) -> None:
            if event.type is not ProcessEventType.STARTED:
                emit(self, event)

        return patched

    _wrap(Connection, "emit_process", make)


@mutant(
    "two-terminal-events",
    "sends every terminal process event twice",
    "process.events",
)
def _two_terminal_events() -> None:
    """Each exited, stopped or failed event is emitted twice."""

    def make(emit: Any) -> Any:
        def patched(self: Connection, event: Any) -> None:
            emit(self, event)
            if event.type is not ProcessEventType.STARTED:
                emit(self, event)

        return patched

    _wrap(Connection, "emit_process", make)


@mutant(
    "list-loses-operation-id",
    "drops operation_id from process/list records (start replies keep it)",
    "process.operation-id",
)
def _list_loses_operation_id() -> None:
    """process/list records go out without their operation_id."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        for record in result.get("processes", []):
            record.pop("operation_id", None)

    _rewrite_results("process/list", change)


# --- process/read and process/write ----------------------------------------------------------------------

_SNAKE = {
    "Process": "process",
    "Output": "output",
    "StartOffset": "start_offset",
    "EndOffset": "end_offset",
    "TotalBytes": "total_bytes",
    "Truncated": "truncated",
    "TimedOut": "timed_out",
    "Duration": "duration",
    "MaxBytes": "max_bytes",
    "OffsetBytes": "offset_bytes",
    "Wait": "wait",
    "MinDwell": "min_dwell",
}


@mutant(
    "snake-case-process-read",
    "takes and answers process/read fields in snake_case, not Go casing",
    "read.go-casing",
)
def _snake_case_process_read() -> None:
    """process/read accepts snake_case keys (as well as Go-cased ones) and answers in snake_case."""
    go = {snake: go for go, snake in _SNAKE.items()}

    def make(on_request: Any) -> Any:
        def patched(self: Connection, frame_id: str, method: str, frame: Frame) -> None:
            data = frame.get("data")
            if method == "process/read" and isinstance(data, dict):
                frame = {**frame, "data": {go.get(key, key): value for key, value in data.items()}}
            on_request(self, frame_id, method, frame)

        return patched

    _wrap(Connection, "_on_request", make)

    def rewrite(frame: Frame, method: str, data: dict[str, Any]) -> list[Frame]:
        if method == "process/read" and isinstance(frame.get("data"), dict):
            frame = {"id": frame["id"], "data": {_SNAKE.get(k, k): v for k, v in frame["data"].items()}}
        return [frame]

    _rewrite_replies(rewrite)


def _rewrite_read_params(change: Callable[[Any], dict[str, Any]]) -> None:
    """process/read runs with the parameters `change` returns put over the ones asked."""

    def make(read: Any) -> Any:
        async def patched(self: ProcessRegistry, params: Any) -> Any:
            return await read(self, params.model_copy(update=change(params)))

        return patched

    _wrap(ProcessRegistry, "read", make)


@mutant(
    "ignores-offset-bytes",
    "reads from the retained start whatever OffsetBytes asks",
    "read.offsets",
)
def _ignores_offset_bytes() -> None:
    """process/read runs as if OffsetBytes were always 0."""

    _rewrite_read_params(lambda params: {"offset_bytes": 0})


@mutant(
    "never-truncated",
    "answers Truncated: false even when the read starts above the offset asked",
    "read.truncated",
)
def _never_truncated() -> None:
    """process/read results always say `Truncated: false`."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["Truncated"] = False

    _rewrite_results("process/read", change)


@mutant(
    "wait-as-milliseconds",
    "takes process/read's Wait as milliseconds instead of nanoseconds",
    "read.long-poll",
)
def _wait_as_milliseconds() -> None:
    """process/read waits a million times longer than Wait says (ms read as ns)."""

    _rewrite_read_params(lambda params: {"wait": params.wait * 1_000_000})


@mutant(
    "ignores-wait",
    "answers a read with no new bytes at once instead of waiting up to Wait",
    "read.long-poll",
)
def _ignores_wait() -> None:
    """process/read runs as if Wait were always 0 (no long-polling)."""

    _rewrite_read_params(lambda params: {"wait": 0})


@mutant(
    "timed-out-always-false",
    "answers TimedOut: false even when the wait ended with no new bytes",
    "read.timed-out",
)
def _timed_out_always_false() -> None:
    """process/read results always say `TimedOut: false`."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["TimedOut"] = False

    _rewrite_results("process/read", change)


@mutant(
    "ignores-min-dwell",
    "answers a read at the first new byte, ignoring MinDwell",
    "read.min-dwell",
)
def _ignores_min_dwell() -> None:
    """process/read runs as if MinDwell were always 0."""

    _rewrite_read_params(lambda params: {"min_dwell": 0})


@mutant(
    "write-ignores-close",
    "never closes a process's stdin on process/write close: true",
    "write.stdin",
)
def _write_ignores_close() -> None:
    """process/write runs as if `close` were always false."""

    def make(write: Any) -> Any:
        async def patched(self: ProcessRegistry, process_id: str, data: bytes, close: bool) -> Any:
            return await write(self, process_id, data, False)

        return patched

    _wrap(ProcessRegistry, "write", make)


# --- export ----------------------------------------------------------------------------------------------


@mutant(
    "export-wrong-sha256",
    "answers export/open with the SHA-256 of the path instead of the content",
    "export.snapshot",
)
def _export_wrong_sha256() -> None:
    """export/open's sha256 is the hash of the requested path string."""

    def change(result: dict[str, Any], request: dict[str, Any]) -> None:
        result["sha256"] = hashlib.sha256(str(request.get("path")).encode()).hexdigest()

    _rewrite_results("export/open", change)


@mutant(
    "export-reads-live-file",
    "reads an export from the live file rather than an immutable snapshot",
    "export.immutable",
)
def _export_reads_live_file() -> None:
    """export/open replaces its private copy with a symlink to the source, so reads see later changes."""

    def make(open_export: Any) -> Any:
        async def patched(self: Exports, source: Path) -> Any:
            result = await open_export(self, source)
            snapshot = self._snapshots[result.token]
            snapshot.path.unlink()
            snapshot.path.symlink_to(source.absolute())
            return result

        return patched

    _wrap(Exports, "open", make)


@mutant(
    "export-unknown-token-empty",
    "answers export/read of an unknown token with empty data instead of not_found",
    "export.unknown-token",
)
def _export_unknown_token_empty() -> None:
    """An export/read that fails with not_found answers `{data: "", eof: true}`."""
    _rewrite_error("export/read", ErrorCode.NOT_FOUND, lambda data: {"data": "", "eof": True})


@mutant(
    "export-no-size-limit",
    "exports a file over 256 MiB instead of answering artifact_too_large",
    "export.too-large",
)
def _export_no_size_limit() -> None:
    """The export size limit is lifted."""
    _replace(native_exports, "WORKER_MAX_EXPORT_BYTES", 1 << 62)


# --- lifetime --------------------------------------------------------------------------------------------


@mutant(
    "eof-leaves-processes",
    "exits at EOF without stopping its process trees",
    "lifetime.eof-cleanup",
)
def _eof_leaves_processes() -> None:
    """The process registry's cleanup stops nothing; the trees outlive the worker.

    A detached reaper kills what is left 15 s after the worker exits.
    """
    _record_groups()

    async def close(self: ProcessRegistry) -> None:
        self._closed = True
        _reap_later()

    _replace(ProcessRegistry, "close", close)


@mutant(
    "detached-dies-with-request",
    "stops a background process as soon as its process/start request has been answered",
    "lifetime.detached-processes",
)
def _detached_dies_with_request() -> None:
    """Each process/start schedules a stop of the new process right after its reply."""

    def make(process_start: Any) -> Any:
        async def patched(self: NativeWorker, params: Any, context: Any) -> Any:
            record = await process_start(self, params, context)
            if record.status.value == "running":
                registry = self.processes
                loop = asyncio.get_running_loop()
                loop.call_soon(
                    lambda: loop.create_task(registry.stop(record.id, ProcessSignal.KILL, 0)),
                )
            return record

        return patched

    _wrap(NativeWorker, "process_start", make)


# --- running a mutant --------------------------------------------------------------------------------------


def describe() -> str:
    """The mutant table: name, the requirements it breaks, what it does."""
    width = max(len(name) for name in MUTANTS)
    return "\n".join(
        f"{m.name:<{width}}  {', '.join(m.requirements)}\n{'':<{width}}  {m.description}"
        for m in MUTANTS.values()
    )


def serve(name: str) -> None:
    """Apply the mutant `name` and serve the native worker on stdin/stdout until the connection ends."""
    from wuu.worker import run_execution_backend_v4

    MUTANTS[name].patch()
    asyncio.run(run_execution_backend_v4(NativeWorker().backend()))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--list"]:
        print(describe())
        return 0
    if args == ["--check"]:
        # Every patch finds its target (they stack in this one process, which then serves nothing).
        for each in MUTANTS.values():
            each.patch()
        print(f"{len(MUTANTS)} mutants apply")
        return 0
    if len(args) != 1 or args[0] not in MUTANTS:
        print(
            f"usage: python -m wuu.conformance.mutants NAME  (or --list, --check)\nmutants: {', '.join(MUTANTS)}",
            file=sys.stderr,
        )
        return 2
    serve(args[0])
    return 0
