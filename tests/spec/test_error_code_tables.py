"""The tables of the user-host error codes (spec/README.md, "Error codes"): every code has a JSON-RPC number,
an HTTP status and a gRPC status in the spec, the generated tables are the spec's, and speclint refuses a
table that is not one value of its kind per code."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tools import speclint
from wuu.generated import validators
from wuu.generated.catalog import (
    USER_HOST_ERROR_CODE_GRPC_STATUS,
    USER_HOST_ERROR_CODE_HTTP_STATUS,
    USER_HOST_ERROR_CODE_JSONRPC_NUMBER,
)
from wuu.generated.models import UserHostErrorCode

CODES: dict[str, Any] = validators.bundle()["$defs"]["UserHostErrorCode"]


def test_every_code_has_a_number_an_http_status_and_a_grpc_status_in_the_spec() -> None:
    for keyword in ("x-jsonrpc-number", "x-http-status", "x-grpc-status"):
        assert list(CODES[keyword]) == CODES["enum"], keyword


def test_the_generated_tables_are_the_specs() -> None:
    assert {c.value: n for c, n in USER_HOST_ERROR_CODE_JSONRPC_NUMBER.items()} == CODES["x-jsonrpc-number"]
    assert {c.value: s for c, s in USER_HOST_ERROR_CODE_HTTP_STATUS.items()} == CODES["x-http-status"]
    grpc_names = {c.value: s.name for c, s in USER_HOST_ERROR_CODE_GRPC_STATUS.items()}
    assert grpc_names == CODES["x-grpc-status"]
    for table in (USER_HOST_ERROR_CODE_JSONRPC_NUMBER, USER_HOST_ERROR_CODE_HTTP_STATUS):
        assert set(table) == set(UserHostErrorCode)
    assert set(USER_HOST_ERROR_CODE_GRPC_STATUS) == set(UserHostErrorCode)
    assert all(isinstance(status, grpc.StatusCode) for status in USER_HOST_ERROR_CODE_GRPC_STATUS.values())


def test_the_envelope_codes_keep_the_numbers_json_rpc_2_0_defines() -> None:
    # JSON-RPC 2.0 fixes these five; every code of the protocol's own is the implementation-defined -32000.
    defined = {
        UserHostErrorCode.PARSE_ERROR: -32700,
        UserHostErrorCode.INVALID_REQUEST: -32600,
        UserHostErrorCode.UNSUPPORTED_METHOD: -32601,
        UserHostErrorCode.INVALID_PARAMS: -32602,
        UserHostErrorCode.INTERNAL: -32603,
    }
    for code, number in USER_HOST_ERROR_CODE_JSONRPC_NUMBER.items():
        assert number == defined.get(code, -32000), code


def _codes(**tables: Any) -> dict[str, Any]:
    return {
        "title": "Codes",
        "description": "Codes.",
        "type": "string",
        "enum": ["parse_error", "cancelled"],
        "x-enum-descriptions": ["Parse.", "Cancelled."],
        **tables,
    }


@pytest.mark.parametrize(
    ("keyword", "table", "problem"),
    [
        ("x-jsonrpc-number", {"parse_error": -32700}, "maps each of its values"),
        ("x-jsonrpc-number", {"parse_error": -32700, "cancelled": 1}, "from -32768 to -32000"),
        ("x-jsonrpc-number", {"parse_error": -32700, "cancelled": -32000.0}, "from -32768 to -32000"),
        (
            "x-grpc-status",
            {"parse_error": "INVALID_ARGUMENT", "gone": "NOT_FOUND"},
            "maps each of its values",
        ),
        ("x-grpc-status", {"parse_error": "INVALID_ARGUMENT", "cancelled": "OK"}, "other than OK"),
        ("x-grpc-status", {"parse_error": "invalid_argument", "cancelled": "CANCELLED"}, "other than OK"),
        ("x-grpc-status", {"parse_error": 3, "cancelled": "CANCELLED"}, "other than OK"),
    ],
)
def test_speclint_refuses_a_code_table_that_is_not_one_value_per_code(
    keyword: str, table: dict[str, Any], problem: str
) -> None:
    found = list(speclint.lint_def("here", "Codes", _codes(**{keyword: table})))
    assert any(keyword in line and problem in line for line in found), found


def test_speclint_accepts_complete_code_tables() -> None:
    tables = {
        "x-jsonrpc-number": {"parse_error": -32700, "cancelled": -32000},
        "x-http-status": {"parse_error": 400, "cancelled": 409},
        "x-grpc-status": {"parse_error": "INVALID_ARGUMENT", "cancelled": "CANCELLED"},
    }
    assert list(speclint.lint_def("here", "Codes", _codes(**tables))) == []


@pytest.mark.parametrize("keyword", ["x-jsonrpc-number", "x-grpc-status"])
def test_speclint_refuses_a_code_table_off_an_enum_def(keyword: str) -> None:
    schema = {
        "title": "Thing",
        "description": "A thing.",
        "type": "object",
        "additionalProperties": False,
        "properties": {"code": {"type": "string", "description": "A code.", keyword: {}}},
    }
    found = list(speclint.lint_def("here", "Thing", schema))
    assert any(f"{keyword} belongs on an enum def" in line for line in found), found
