"""The generated OpenAPI document of the HTTP binding (generated/openapi/userhost.openapi.json) says what the
spec says: an operation per method, the spec's schemas as bodies, each error code at its status, bearer auth."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator

from tools import openapi, speclint
from wuu.generated import validators
from wuu.generated.catalog import (
    USER_HOST_ERROR_CODE_HTTP_STATUS,
    USERHOST_METHODS,
    USERHOST_PROTOCOL_VERSION,
)
from wuu.generated.keywords import python_pattern

DOCUMENT_TEXT = resources.files("wuu.generated").joinpath("openapi/userhost.openapi.json").read_text("utf-8")
DOCUMENT: dict[str, Any] = json.loads(DOCUMENT_TEXT)
SPEC_DEFS: dict[str, Any] = validators.bundle()["$defs"]
CODES = SPEC_DEFS["UserHostErrorCode"]
STATUS_OF: dict[str, int] = CODES["x-http-status"]
RPC = [m for m in USERHOST_METHODS.values() if m.direction == "client_to_host" and m.kind == "request"]
PLUGIN = [m for m in USERHOST_METHODS.values() if m.kind == "plugin_request"]
NOTIFICATIONS = [m for m in USERHOST_METHODS.values() if m.direction == "host_to_client"]
REF = "#/components/schemas/"


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every operation of the document: its path, HTTP method and definition."""
    for path, item in DOCUMENT["paths"].items():
        for http_method, op in item.items():
            yield path, http_method, op


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """A node of the document with a local `$ref` followed (a response or a parameter)."""
    while "$ref" in node:
        target: Any = DOCUMENT
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
    return node


def body_schema(op: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of an operation's request body."""
    content = op["requestBody"]["content"]
    assert list(content) == ["application/json"]
    schema: dict[str, Any] = content["application/json"]["schema"]
    return schema


def response_validator(response: dict[str, Any]) -> Draft202012Validator:
    """A validator of a JSON response's body, its `$ref`s resolved in the document."""
    schema = resolve(response)["content"]["application/json"]["schema"]
    return Draft202012Validator({**schema, "components": DOCUMENT["components"]})


def error_body(code: str) -> dict[str, Any]:
    """A well-formed HTTP error body with `code`."""
    return {"error": {"code": -32000, "message": "failed", "data": {"code": code}}}


def refs(node: Any) -> Iterator[str]:
    """Every `$ref` under a node."""
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def test_the_document_is_a_valid_openapi_3_1_document() -> None:
    OpenAPIV31SpecValidator(DOCUMENT).validate()
    assert DOCUMENT["openapi"].startswith("3.1.")


def test_the_document_is_generated_deterministically() -> None:
    first, second = openapi.document(), openapi.document()
    assert json.dumps(first, indent=2, ensure_ascii=False) + "\n" == DOCUMENT_TEXT
    assert first == second


def test_there_is_one_path_per_method_and_the_event_stream_and_nothing_else() -> None:
    expected = {f"/v1/rpc/{m.method}" for m in RPC} | {f"/v1/plugins/wuu.personal/{m.method}" for m in PLUGIN}
    assert set(DOCUMENT["paths"]) == expected | {"/v1/events"}
    assert {path: list(item) for path, item in DOCUMENT["paths"].items()} == {
        path: ["get" if path == "/v1/events" else "post"] for path in expected | {"/v1/events"}
    }
    ids = [op["operationId"] for _, _, op in operations()]
    assert len(ids) == len(set(ids))


def without_base64_patterns(node: Any) -> Any:
    """A document schema without the pattern the generator adds to each base64 string, which it checks."""
    if isinstance(node, list):
        return [without_base64_patterns(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: without_base64_patterns(value) for key, value in node.items()}
    if out.get("contentEncoding") == "base64":
        assert out.pop("pattern") == openapi.BASE64_PATTERN
    return out


@pytest.mark.parametrize("method", RPC, ids=lambda m: m.method)
def test_every_request_method_takes_its_params_and_answers_its_result(method: Any) -> None:
    op = DOCUMENT["paths"][f"/v1/rpc/{method.method}"]["post"]
    assert op["requestBody"]["required"] is True
    params = {"$ref": REF + method.params.__name__}
    if method.method == "initialize":
        # The path's version is the only one the host takes there.
        version = {"protocol_version": {"const": USERHOST_PROTOCOL_VERSION}}
        assert body_schema(op) == {"allOf": [params], "properties": version}
    else:
        assert body_schema(op) == params
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": REF + method.result.__name__
    }


@pytest.mark.parametrize("method", PLUGIN, ids=lambda m: m.method)
def test_every_plugin_method_takes_its_params_and_answers_its_unwrapped_result(method: Any) -> None:
    op = DOCUMENT["paths"][f"/v1/plugins/wuu.personal/{method.method}"]["post"]
    schema = body_schema(op)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["params"]["$ref"] == REF + method.params.__name__
    # Only a method that takes user input has `user_input`, and requires it.
    assert ("user_input" in schema["properties"]) is method.user_input
    assert schema["required"] == (["params", "user_input"] if method.user_input else ["params"])
    if method.user_input:
        assert schema["properties"]["user_input"]["$ref"] == REF + "UserInput"
    call_params = SPEC_DEFS["PluginClientRequestParams"]["properties"]
    assert schema["properties"]["plugin_fingerprint"] == call_params["plugin_fingerprint"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": REF + method.result.__name__
    }
    header = resolve(op["parameters"][0])
    assert (header["name"], header["in"], header["required"]) == ("Wuu-Request-Id", "header", False)


def test_the_bundled_schemas_are_the_specs_with_their_refs_rewritten() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    for name, schema in schemas.items():
        text = json.dumps(SPEC_DEFS[name]).replace('"#/$defs/', f'"{REF}')
        assert without_base64_patterns(schema) == json.loads(text), name
    # Every reference resolves inside the document, and the bundled set is closed under references.
    for ref in refs(DOCUMENT):
        assert ref.startswith("#/components/"), ref
        resolve({"$ref": ref})
    assert {"HttpErrorResponse", "PluginClientInvalidateParams", "UserInput"} <= set(schemas)


def test_the_status_table_covers_every_error_code() -> None:
    assert list(STATUS_OF) == CODES["enum"]


@pytest.mark.parametrize("code", CODES["enum"])
def test_every_error_code_is_a_documented_response_of_every_operation_with_its_status(code: str) -> None:
    status = STATUS_OF[code]
    for path, _, op in operations():
        response = op["responses"][str(status)]
        validator = response_validator(response)
        assert validator.is_valid(error_body(code)), (path, code)
        # A code at a status that is not its own does not match the document.
        for other in {s for s in STATUS_OF.values() if s != status}:
            assert not response_validator(op["responses"][str(other)]).is_valid(error_body(code))
        assert f"`{code}`" in resolve(response)["description"]
        assert not validator.is_valid({"error": {"code": -32000, "message": "failed"}})


def test_every_operation_documents_401_with_its_challenge_and_no_body() -> None:
    for path, _, op in operations():
        response = resolve(op["responses"]["401"])
        assert "content" not in response, path
        assert response["headers"]["WWW-Authenticate"]["required"] is True


def test_every_operation_with_a_body_documents_413_as_parse_error_and_408_as_invalid_request() -> None:
    for path, http_method, op in operations():
        if http_method == "get":
            assert "413" not in op["responses"] and "408" not in op["responses"]
            continue
        validator = response_validator(op["responses"]["413"])
        assert validator.is_valid(error_body("parse_error")), path
        assert not validator.is_valid(error_body("invalid_request"))
        validator = response_validator(op["responses"]["408"])
        assert validator.is_valid(error_body("invalid_request")), path
        assert not validator.is_valid(error_body("parse_error"))


def test_the_bearer_security_scheme_applies_to_every_operation() -> None:
    scheme = DOCUMENT["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, _, op in operations():
        assert op.get("security", DOCUMENT["security"]) == [{"bearer": []}], path


def test_the_event_stream_carries_every_notification() -> None:
    op = DOCUMENT["paths"]["/v1/events"]["get"]
    content = op["responses"]["200"]["content"]
    assert list(content) == ["text/event-stream"]
    assert content["text/event-stream"]["x-wuu-events"] == {
        m.method: {"$ref": REF + m.params.__name__} for m in NOTIFICATIONS
    }


def test_the_links_chain_send_receipts_and_react_the_history_reads_and_the_approvals() -> None:
    by_id = {op["operationId"]: op for _, _, op in operations()}
    chain = [
        (
            "personal_agents_main_session",
            [
                "personal_agents_send",
                "personal_agents_history_read",
                "personal_agents_history_search",
                "personal_approvals_list",
            ],
        ),
        ("personal_agents_send", ["personal_agents_receipts"]),
        ("personal_agents_receipts", ["personal_agents_react"]),
        ("personal_approvals_review_read", ["personal_approvals_review_set"]),
    ]
    for source, targets in chain:
        links = by_id[source]["responses"]["200"]["links"]
        assert [link["operationId"] for link in links.values()] == targets


def test_the_catalog_carries_the_status_table_for_the_hosts() -> None:
    assert {code.value: status for code, status in USER_HOST_ERROR_CODE_HTTP_STATUS.items()} == STATUS_OF


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"parse_error": 400}, "maps each of its values"),
        ({"parse_error": 400, "cancelled": 409, "gone": 410}, "maps each of its values"),
        ({"parse_error": 200, "cancelled": 409}, "from 400 to 599"),
        ({"parse_error": "400", "cancelled": 409}, "from 400 to 599"),
    ],
)
def test_speclint_refuses_a_status_table_that_is_not_one_status_per_code(table: Any, problem: str) -> None:
    schema = {
        "title": "Codes",
        "description": "Codes.",
        "type": "string",
        "enum": ["parse_error", "cancelled"],
        "x-enum-descriptions": ["Parse.", "Cancelled."],
        "x-http-status": table,
    }
    assert any(problem in found for found in speclint.lint_def("here", "Codes", schema))
    fine = {**schema, "x-http-status": {"parse_error": 400, "cancelled": 409}}
    assert list(speclint.lint_def("here", "Codes", fine)) == []


def test_speclint_refuses_a_status_table_off_an_enum_def() -> None:
    prop = {"type": "string", "description": "A code.", "x-http-status": {}}
    schema = {
        "title": "Thing",
        "description": "A thing.",
        "type": "object",
        "additionalProperties": False,
        "properties": {"code": prop},
    }
    assert any("belongs on an enum def" in found for found in speclint.lint_def("here", "Thing", schema))


def test_initialize_takes_only_the_paths_protocol_version() -> None:
    op = DOCUMENT["paths"]["/v1/rpc/initialize"]["post"]
    validator = Draft202012Validator({**body_schema(op), "components": DOCUMENT["components"]})
    client = {"name": "c", "version": "1"}
    assert validator.is_valid({"protocol_version": USERHOST_PROTOCOL_VERSION, "client_info": client})
    for other in (USERHOST_PROTOCOL_VERSION + 1, 60000, 2147483647):
        assert not validator.is_valid({"protocol_version": other, "client_info": client})


def base64_strings(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema node of a base64 string under a node."""
    if isinstance(node, dict):
        if node.get("contentEncoding") == "base64":
            yield node
        for value in node.values():
            yield from base64_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from base64_strings(item)


def canonical_base64(text: str) -> bool:
    """The host's rule (host/userhost/personal/attachments.py): text that decodes, and is its bytes' encoding."""
    try:
        return base64.b64encode(base64.b64decode(text, validate=True)).decode() == text
    except (binascii.Error, ValueError):
        return False


def test_every_base64_string_carries_the_pattern_of_canonical_base64() -> None:
    found = list(base64_strings(DOCUMENT["components"]["schemas"]))
    assert len(found) == 2  # the attachment's data and a chunk of it
    assert all(node["pattern"] == openapi.BASE64_PATTERN for node in found)


def test_the_base64_pattern_matches_exactly_the_canonical_encodings() -> None:
    pattern = re.compile(python_pattern(openapi.BASE64_PATTERN))
    # Every string of up to 6 characters over letters whose low bits differ, the padding and a line feed.
    for size in range(7):
        for letters in itertools.product("AQRgw/=\n", repeat=size):
            text = "".join(letters)
            assert bool(pattern.search(text)) is canonical_base64(text), repr(text)
    for size in range(40):
        assert pattern.search(base64.b64encode(bytes(range(size))).decode())
