"""Mutants of execute and the core tools: unknown tools, tool arguments, the file tools' results and
refusals, and exec_command's exit status and timeout."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from wuu.generated.catalog import WORKER_TOOLS
from wuu.generated.models import ErrorCode, ExecutionToolRequestV4, ReadFileMetadata, ToolResult
from wuu.generated.wire import WireModel
from wuu.worker import ExecutionBackendV4, Handler, RequestContext
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import answer_error, override, rewrite_arguments, rewrite_result, with_arguments


@mutant(
    "unknown-tool-error-result",
    "answers an unknown tool with an error result instead of unsupported_tool",
    "execute.unsupported-tool",
)
def unknown_tool_error_result(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """`execute` of a tool the worker does not provide answers `{output, is_error: true}`."""
    return answer_error(
        "execute",
        ErrorCode.UNSUPPORTED_TOOL,
        lambda request: ToolResult(output=f"unknown tool {request.tool}", is_error=True),
    )(worker, backend)


def _lenient(request: ExecutionToolRequestV4) -> ExecutionToolRequestV4:
    """`request` with its arguments validated laxly, after removing the fields the tool does not define;
    unchanged when even that fails (the worker then refuses them as it would)."""
    spec = WORKER_TOOLS.get(request.tool)
    try:
        value = orjson.loads(request.call.arguments)
    except orjson.JSONDecodeError:
        return request
    if spec is None or not isinstance(value, dict):
        return request
    known = {field.alias or name for name, field in spec.arguments.model_fields.items()}
    try:
        arguments = spec.arguments.model_validate({key: item for key, item in value.items() if key in known})
    except ValidationError:
        return request
    return with_arguments(request, arguments.to_wire())


@mutant(
    "lenient-tool-arguments",
    "drops unknown tool arguments and coerces wrongly typed ones instead of answering invalid_request",
    "execute.invalid-arguments",
)
def lenient_tool_arguments(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """Tool arguments are validated laxly, after removing the fields the tool does not define: the worker
    gets them re-encoded from that lax reading."""

    def make(execute: Handler) -> Handler:
        async def handler(request: ExecutionToolRequestV4, context: RequestContext) -> WireModel:
            return await execute(_lenient(request), context)

        return handler

    return override(backend, "execute", make)


def _metadata(result: ToolResult, **fields: Any) -> ToolResult:
    """`result` with `fields` put over its metadata (a result without metadata stays as it is)."""
    if result.metadata is None:
        return result
    return result.model_copy(update={"metadata": {**result.metadata, **fields}})


@mutant(
    "read-eof-always-false",
    "reports eof: false from read_file even at the end of the file",
    "tools.read-file",
)
def read_eof_always_false(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """read_file's metadata always says `eof: false`."""
    return rewrite_result("execute", lambda result, request: _metadata(result, eof=False), tool="read_file")(
        worker, backend
    )


@mutant(
    "write-creates-parents",
    "creates missing parent directories in write_file without create_dirs",
    "tools.write-file",
)
def write_creates_parents(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """write_file runs as if `create_dirs` were always true: valid arguments reach the worker with it set."""
    return rewrite_arguments("write_file", lambda arguments: {**arguments, "create_dirs": True})(
        worker, backend
    )


@mutant(
    "edit-replaces-ambiguous",
    "replaces every occurrence of an ambiguous old_string instead of refusing",
    "tools.edit-file",
)
def edit_replaces_ambiguous(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """edit_file runs as if `replace_all` were always true: valid arguments reach the worker with it set."""
    return rewrite_arguments("edit_file", lambda arguments: {**arguments, "replace_all": True})(
        worker, backend
    )


def _reversed_listing(result: ToolResult, request: ExecutionToolRequestV4) -> ToolResult:
    """A list_dir result with its entries and its output lines in reverse order."""
    entries = (result.metadata or {}).get("entries")
    if isinstance(entries, list):
        result = _metadata(result, entries=entries[::-1])
    return result.model_copy(update={"output": "\n".join(reversed(result.output.split("\n")))})


@mutant(
    "list-dir-unsorted",
    "lists directory entries in reverse order",
    "tools.list-dir",
)
def list_dir_unsorted(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """list_dir's entries (metadata and output lines) come in reverse order."""
    return rewrite_result("execute", _reversed_listing, tool="list_dir")(worker, backend)


def _empty_file(request: ExecutionToolRequestV4) -> ToolResult:
    """The result of reading an empty file whole."""
    metadata = ReadFileMetadata(size=0, offset_bytes=0, returned_bytes=0, eof=True)
    return ToolResult(output="", is_error=False, metadata=metadata.to_wire())


@mutant(
    "missing-file-reads-empty",
    "answers read_file of a missing file with empty content instead of not_found",
    "tools.not-found",
)
def missing_file_reads_empty(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """A read_file that fails with not_found answers an empty file instead."""
    return answer_error("execute", ErrorCode.NOT_FOUND, _empty_file, tool="read_file")(worker, backend)


@mutant(
    "exec-failure-not-error",
    "reports a non-zero exit of exec_command with is_error: false",
    "tools.exec-command",
)
def exec_failure_not_error(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """exec_command results always say `is_error: false`."""
    return rewrite_result(
        "execute", lambda result, request: result.model_copy(update={"is_error": False}), tool="exec_command"
    )(worker, backend)


@mutant(
    "exec-ignores-timeout",
    "lets exec_command run past timeout_ms",
    "tools.exec-timeout",
)
def exec_ignores_timeout(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """exec_command runs its command without a timeout: valid arguments reach the worker without `timeout_ms`."""
    return rewrite_arguments(
        "exec_command",
        lambda arguments: {key: value for key, value in arguments.items() if key != "timeout_ms"},
    )(worker, backend)
