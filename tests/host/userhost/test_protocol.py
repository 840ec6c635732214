"""The user-host RPC's rules without a transport or an event loop (host/userhost/protocol.py): what an NDJSON
line decodes to, the connection's state (initialized or not, ids in flight), and what a finished request's
client gets (spec/schema/userhost/envelope.schema.json)."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

import orjson
import pytest

from wuu.generated import validators
from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES, USERHOST_PROTOCOL_VERSION
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.protocol import (
    Refusal,
    Request,
    Requests,
    check_protocol_version,
    decode,
    failure,
    outcome,
    reply,
    too_large,
)


def refused(line: bytes) -> tuple[Any, UserHostErrorCode, str]:
    """The id, code and message of the refusal a line decodes to (checked against the spec's envelope)."""
    decoded = decode(line)
    assert isinstance(decoded, Refusal), decoded
    validators.validate("JsonRpcErrorResponse", decoded.to_wire())
    return decoded.id, decoded.error.code, decoded.error.message


def raises(code: UserHostErrorCode, action: Any, *args: Any) -> str:
    """The message of the UserHostError `action(*args)` raises, which must have `code`."""
    with pytest.raises(UserHostError) as caught:
        action(*args)
    assert caught.value.code is code
    return caught.value.message


# --- decode -------------------------------------------------------------------------------------------


def test_a_request_decodes_with_its_id_method_and_params() -> None:
    line = b'{"jsonrpc": "2.0", "id": "a-1", "method": "shutdown", "params": {"x": 1}}'
    assert decode(line) == Request("a-1", "shutdown", {"x": 1})
    assert decode(b'{"jsonrpc": "2.0", "id": 7, "method": "shutdown"}') == Request(7, "shutdown", {})


def test_a_client_notification_decodes_to_nothing() -> None:
    assert decode(b'{"jsonrpc": "2.0", "method": "shutdown"}') is None


@pytest.mark.parametrize(
    ("line", "code", "message"),
    [
        (b"{nope", UserHostErrorCode.PARSE_ERROR, "not JSON"),
        (b"[]", UserHostErrorCode.INVALID_REQUEST, "batches are not supported"),
        (b'"text"', UserHostErrorCode.PARSE_ERROR, "not a JSON object"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "shutdown"}', UserHostErrorCode.INVALID_REQUEST, "id:"),
        (
            b'{"jsonrpc": "2.0", "id": 9007199254740992, "method": "x"}',
            UserHostErrorCode.INVALID_REQUEST,
            "id:",
        ),
        (b'{"jsonrpc": "2.0", "id": "", "method": "shutdown"}', UserHostErrorCode.INVALID_REQUEST, "id:"),
    ],
)
def test_a_message_without_a_usable_id_is_refused_with_a_null_id(
    line: bytes, code: UserHostErrorCode, message: str
) -> None:
    found_id, found_code, found_message = refused(line)
    assert (found_id, found_code) == (None, code)
    assert found_message.startswith(message)


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"jsonrpc": "1.0", "id": 3, "method": "shutdown"}, 'jsonrpc: must be "2.0"'),
        ({"jsonrpc": "2.0", "id": 3, "method": "shutdown", "extra": 1}, "unknown member 'extra'"),
        ({"jsonrpc": "2.0", "id": 3, "method": ""}, "method: a string of 1 to 128 characters"),
        ({"jsonrpc": "2.0", "id": 3, "method": "m" * 129}, "method: a string of 1 to 128 characters"),
        ({"jsonrpc": "2.0", "id": 3, "method": "shutdown", "params": []}, "params: an object"),
    ],
)
def test_a_malformed_request_is_refused_under_its_id(message: dict[str, Any], problem: str) -> None:
    assert refused(orjson.dumps(message)) == (3, UserHostErrorCode.INVALID_REQUEST, problem)


# --- the connection's state ---------------------------------------------------------------------------


def initialized() -> Requests[str]:
    requests: Requests[str] = Requests()
    requests.admit(Request(0, "initialize", {}))
    requests.initialize(USERHOST_PROTOCOL_VERSION)
    return requests


def test_before_initialize_only_initialize_is_admitted() -> None:
    requests: Requests[str] = Requests()
    assert not requests.initialized
    message = raises(UserHostErrorCode.NOT_INITIALIZED, requests.admit, Request(1, "shutdown", {}))
    assert message == "shutdown before initialize"
    assert requests.admit(Request(2, "initialize", {})).method == "initialize"


def test_initialize_at_another_version_leaves_the_connection_uninitialized() -> None:
    requests: Requests[str] = Requests()
    message = raises(UserHostErrorCode.UNSUPPORTED_PROTOCOL_VERSION, requests.initialize, 2)
    assert message == f"version 2; this host speaks {USERHOST_PROTOCOL_VERSION}"
    assert not requests.initialized
    requests.initialize(USERHOST_PROTOCOL_VERSION)
    assert requests.initialized
    raises(UserHostErrorCode.ALREADY_INITIALIZED, requests.initialize, USERHOST_PROTOCOL_VERSION)
    assert requests.admit(Request(3, "shutdown", {})).method == "shutdown"


@pytest.mark.parametrize("method", ["nope", "plugin/client/invalidate", "agents.send"])
def test_a_method_not_served_to_clients_is_unsupported(method: str) -> None:
    message = raises(UserHostErrorCode.UNSUPPORTED_METHOD, initialized().admit, Request(1, method, {}))
    assert message == f"{method} is not served on this transport"


def test_an_id_in_flight_is_refused_until_its_request_finishes() -> None:
    requests = initialized()
    requests.start(7, "the work of 7")
    assert requests.in_flight(7) and requests.get(7) == "the work of 7"
    message = raises(
        UserHostErrorCode.INVALID_REQUEST, requests.admit, Request(7, "shutdown", {}, id_name="wuu-rpc-id")
    )
    assert message == "wuu-rpc-id: 7 is already in flight on this connection"
    # The string "7" is another id.
    assert not requests.in_flight("7")
    requests.admit(Request("7", "shutdown", {}))
    assert requests.work() == ["the work of 7"]
    requests.finish(7)
    assert not requests.in_flight(7) and requests.get(7) is None and requests.work() == []
    requests.admit(Request(7, "shutdown", {}))


def test_the_in_flight_check_comes_before_the_method_check() -> None:
    requests = initialized()
    requests.start("dup", "work")
    raises(UserHostErrorCode.INVALID_REQUEST, requests.admit, Request("dup", "nope", {}))


def test_check_protocol_version() -> None:
    check_protocol_version(USERHOST_PROTOCOL_VERSION)
    raises(UserHostErrorCode.UNSUPPORTED_PROTOCOL_VERSION, check_protocol_version, 0)


# --- outcomes -----------------------------------------------------------------------------------------


def test_a_result_is_answered_as_it_is() -> None:
    done: Future[dict[str, Any]] = Future()
    done.set_result({"ok": True})
    assert outcome(done, 1) == {"ok": True}
    message = reply(1, outcome(done, 1))
    validators.validate("JsonRpcMessage", message)
    assert message == {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}


def test_cancelled_work_is_answered_cancelled() -> None:
    done: Future[dict[str, Any]] = Future()
    assert done.cancel()
    answer = outcome(done, "c")
    assert isinstance(answer, UserHostError) and answer.code is UserHostErrorCode.CANCELLED
    message = reply("c", answer)
    validators.validate("JsonRpcErrorResponse", message)
    assert message["error"]["data"] == {"code": "cancelled"}


def test_a_user_host_error_is_answered_as_raised() -> None:
    done: Future[dict[str, Any]] = Future()
    raised = UserHostError(UserHostErrorCode.INVALID_PARAMS, "bad", "params.text")
    done.set_exception(raised)
    assert outcome(done, 2) is raised
    assert reply(2, raised)["error"] == {
        "code": -32602,
        "message": "bad",
        "data": {"code": "invalid_params", "field": "params.text"},
    }


def test_an_unexpected_failure_is_internal_and_its_details_go_to_the_log_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: Future[dict[str, Any]] = Future()
    done.set_exception(RuntimeError("/secret/path exploded"))
    with caplog.at_level(logging.ERROR, "wuu.host.userhost"):
        answer = outcome(done, 3)
    assert isinstance(answer, UserHostError) and answer.code is UserHostErrorCode.INTERNAL
    assert "/secret/path" not in answer.message
    (record,) = caplog.records
    assert record.exc_info is not None and "/secret/path" in str(record.exc_info[1])
    assert record.__dict__["error_id"] in answer.message


def test_a_raised_failure_is_itself_when_it_is_a_user_host_error_else_internal() -> None:
    raised = UserHostError(UserHostErrorCode.STALE_REVISION, "moved on")
    assert failure(raised, 4) is raised
    assert failure(KeyError("k"), 4).code is UserHostErrorCode.INTERNAL


def test_a_response_over_the_frame_limit_is_too_large() -> None:
    assert too_large(USERHOST_MAX_FRAME_BYTES) is None
    error = too_large(USERHOST_MAX_FRAME_BYTES + 1)
    assert error is not None and error.code is UserHostErrorCode.INTERNAL
    assert error.message == f"the response of {USERHOST_MAX_FRAME_BYTES + 1} bytes is too large"
