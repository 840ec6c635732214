"""Validation at the wire boundary is strict: no coercion, no name-based fields, exact re-encoding."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import TypeAdapter, ValidationError

from tools import speclint
from tools.speclint import reachable
from wuu.generated import models, validators, wire
from wuu.generated.catalog import WORKER_METHODS, WORKER_TOOLS
from wuu.generated.models import (
    ExecutionProcessV4,
    ExecutionToolRequestV4,
    ProcessReadParams,
    ProcessReadResult,
    ReadFileMetadata,
    ReplyFrame,
)

REPLY = TypeAdapter(ReplyFrame)

PROCESS = {
    "id": "proc-1",
    "root_thread_id": "thread-1",
    "argv": ["sh", "-c", "echo hi"],
    "cwd": "/workspace",
    "status": "exited",
    "exit_code": 0,
    "signal": None,
    "started_at": "2026-11-29T10:00:00.123456789+01:00",
    "ended_at": "2026-11-29T10:00:01Z",
    "duration_ns": 876543211,
    "output_bytes": 3,
}


def test_a_string_where_an_integer_belongs_is_rejected_by_both() -> None:
    frame = {"Process": "proc-1", "MaxBytes": "1"}
    with pytest.raises(ValidationError) as raised:
        ProcessReadParams.model_validate_json(json.dumps(frame), strict=True)
    assert raised.value.errors()[0]["loc"] == ("MaxBytes",)
    assert [list(e.absolute_path) for e in validators.errors("ProcessReadParams", frame)] == [["MaxBytes"]]


def test_snake_case_keys_on_a_go_cased_message_are_rejected_by_both() -> None:
    frame = {"process": "proc-1", "max_bytes": 10}
    with pytest.raises(ValidationError) as raised:
        ProcessReadParams.model_validate_json(json.dumps(frame), strict=True)
    assert {e["type"] for e in raised.value.errors()} == {"missing", "extra_forbidden"}
    assert validators.errors("ProcessReadParams", frame)


def test_python_attribute_names_are_not_wire_names() -> None:
    with pytest.raises(ValidationError):
        ProcessReadParams.model_validate({"process": "proc-1"})


def test_go_cased_result_round_trips_exactly() -> None:
    wire = {
        "Process": PROCESS,
        "Output": base64.b64encode(b"hi\n").decode(),
        "StartOffset": 0,
        "EndOffset": 3,
        "TotalBytes": 3,
        "Truncated": False,
        "TimedOut": False,
        "Duration": 1500,
    }
    decoded = ProcessReadResult.model_validate_json(json.dumps(wire), strict=True)
    assert decoded.end_offset == 3 and decoded.process.exit_code == 0
    assert decoded.to_wire() == wire


def test_timestamps_keep_their_exact_text() -> None:
    decoded = ExecutionProcessV4.model_validate_json(json.dumps(PROCESS), strict=True)
    assert decoded.started_at == "2026-11-29T10:00:00.123456789+01:00"
    bad = {**PROCESS, "started_at": "2026-11-29 10:00:00"}
    with pytest.raises(ValidationError):
        ExecutionProcessV4.model_validate_json(json.dumps(bad), strict=True)
    assert validators.errors("ExecutionProcessV4", bad)


def test_nullable_fields_are_required_and_optional_fields_stay_absent() -> None:
    missing_null = {key: value for key, value in PROCESS.items() if key != "signal"}
    with pytest.raises(ValidationError) as raised:
        ExecutionProcessV4.model_validate_json(json.dumps(missing_null), strict=True)
    assert raised.value.errors()[0]["loc"] == ("signal",)
    decoded = ExecutionProcessV4.model_validate_json(json.dumps(PROCESS), strict=True)
    assert "pid" not in decoded.to_wire() and decoded.to_wire()["signal"] is None


def test_a_reply_is_data_or_error_never_both() -> None:
    with pytest.raises(ValidationError):
        REPLY.validate_json(b'{"id": "1", "data": {}, "error": "internal"}', strict=True)
    assert validators.errors("ReplyFrame", {"id": "1", "data": {}, "error": "internal"})


def test_request_id_limit_counts_utf8_bytes() -> None:
    frame = {"id": "é" * 129, "method": "cancel", "token": "t", "data": {}}
    assert len(frame["id"]) == 129 and len(frame["id"].encode()) == 258
    assert validators.errors("RequestFrame", frame)[0].message.startswith("258 UTF-8 bytes")
    with pytest.raises(ValidationError, match="id: 258 UTF-8 bytes is over the limit of 256"):
        REPLY.validate_json(json.dumps({"id": "é" * 129, "data": {}}), strict=True)


# --- open result metadata, closed requests (spec/README.md, "Extensions") --------------------------------

READ_METADATA = {"size": 32, "offset_bytes": 0, "returned_bytes": 32, "eof": True}


def test_result_metadata_keeps_extension_keys_and_checks_the_known_ones() -> None:
    extended = {**READ_METADATA, "x-acme-trace": {"span": "0af7", "sampled": True}}
    assert validators.errors("ReadFileMetadata", extended) == []
    assert ReadFileMetadata.model_validate_json(json.dumps(extended), strict=True).to_wire() == extended
    wrong = {**extended, "size": "32"}
    assert [list(e.absolute_path) for e in validators.errors("ReadFileMetadata", wrong)] == [["size"]]
    with pytest.raises(ValidationError) as raised:
        ReadFileMetadata.model_validate_json(json.dumps(wrong), strict=True)
    assert raised.value.errors()[0]["loc"] == ("size",)


def test_every_request_def_stays_closed() -> None:
    requests = {spec.params.__name__ for spec in WORKER_METHODS.values()}
    requests |= {spec.arguments.__name__ for spec in WORKER_TOOLS.values()}
    reached = reachable(validators.bundle()["$defs"], requests)
    objects = {name for name in reached if "properties" in validators.bundle()["$defs"][name]}
    assert {"ExecutionToolRequestV4", "ToolCall", "Actor", "ReadFileArguments"} <= objects
    for name in sorted(objects):
        assert getattr(models, name).model_config.get("extra") == "forbid", name


def test_speclint_refuses_an_open_def_that_a_request_reaches() -> None:
    checker = speclint._Checker()
    checker.bundle["$defs"]["ToolCall"]["additionalProperties"] = True
    checker.bundle["$defs"]["WorkerInfo"]["additionalProperties"] = True
    assert list(speclint.lint_open_defs(checker)) == [
        "$defs/ToolCall: only a tool's result metadata (and the defs inside it) is open",
        "$defs/WorkerInfo: only a tool's result metadata (and the defs inside it) is open",
        "$defs/ToolCall: is open but part of a request (a method's params or a tool's arguments)",
    ]


@pytest.mark.parametrize("text", ["read_file\n", "read_file\r", "read_file\u2028"])
def test_a_pattern_ends_at_the_end_of_the_text_as_in_ecmascript(text: str) -> None:
    """The spec's patterns are ECMAScript's: `$` is the end of the text, so a trailing line break is refused
    by the validators and the models alike (Python's `$` alone would also match before a final newline)."""
    request = {"tool": text, "call": {"id": "c", "arguments": "{}"}, "actor": {"kind": "agent", "id": "a"}}
    request["permission_mode"] = "standard"
    assert validators.errors("ExecutionToolRequestV4", {**request, "tool": "read_file"}) == []
    assert validators.errors("ExecutionToolRequestV4", request)
    with pytest.raises(ValidationError):
        ExecutionToolRequestV4.model_validate_json(json.dumps(request), strict=True)


def test_a_schema_checked_model_refuses_through_its_plain_twin_what_the_schema_does() -> None:
    # UserInput's if/else (text may be empty only with attachments) is beyond a pydantic model.
    assert "UserInput" in wire.SCHEMA_CHECKED_MODELS
    empty = {"client_input_id": "a", "request_id": "b", "text": ""}
    assert validators.errors("UserInput", empty) != []
    with pytest.raises(ValidationError, match="text: is shorter than 1 characters"):
        models.UserInput.model_validate(empty)
    assert models.UserInput.model_validate({**empty, "text": "hi"}).text == "hi"
    # A keyword in a non-object def a field references: a worker argv whose program is relative.
    docker = {"backend": "docker", "image": "i", "workspace": "/workspace", "worker": ["bin/wuu-worker"]}
    assert validators.errors("DockerExecutionProfile", docker) != []
    with pytest.raises(ValidationError, match=r"worker\.0"):
        models.DockerExecutionProfile.model_validate(docker)
    # A def's `dependentRequired`: a read-only mount names the host folder it mounts.
    mount = {"backend": "docker", "image": "i", "workspace": "/workspace", "mount_read_only": True}
    assert validators.errors("DockerExecutionProfile", mount) != []
    with pytest.raises(ValidationError, match="host_workspace: is required when mount_read_only is given"):
        models.DockerExecutionProfile.model_validate(mount)
    assert models.DockerExecutionProfile.model_validate({**mount, "host_workspace": "/srv/w"}).mount_read_only
