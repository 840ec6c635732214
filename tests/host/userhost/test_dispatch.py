"""How a user host dispatches requests on a Unix socket (spec/methods/userhost.json and its params defs):
the methods it serves and refuses, `initialize` first and once, strict params naming the bad field, the
routing of plugin calls by id, fingerprint and method, `user_input`, the host services without providers,
and calls of a connection whose captured graph is no longer current.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE
from tests.host.userhost.conftest import Connect
from tests.host.userhost.plugins import FAIL_PATH, FINGERPRINT, PLUGIN_ID, make_test_plugin
from wuu.generated import validators
from wuu.host.userhost import UserHost
from wuu.host.userhost.client import UserHostClient

INIT_PARAMS: dict[str, Any] = {"protocol_version": 1, "client_info": {"name": "t", "version": "1"}}
NUMBERS = {
    "parse_error": -32700,
    "invalid_request": -32600,
    "unsupported_method": -32601,
    "invalid_params": -32602,
    "internal": -32603,
}
USER_INPUT = {"client_input_id": "in-1", "request_id": "req-1", "text": "hello"}

# Methods the user-host transport does not serve: unknown names, generic Coding methods, the host's own
# notification, and plugin methods, which travel only inside plugin/client/request.
UNSERVED = [
    "nope",
    "thread/start",
    "thread/list",
    "thread/resume",
    "turn/start",
    "workspace/list",
    "storage/read",
    "storage/write",
    "config/set",
    "config/read",
    "configuration/update",
    "package/install",
    "package/remove",
    "plugin/client/invalidate",
    "agents.main_session",
    "agents.send",
    "Initialize",
    "initialize ",
]
# Every request method of the catalog but initialize, with params that are wrong on purpose: the state
# is checked before the params.
AFTER_INITIALIZE = [
    "plugin/client/request",
    "plugin/client/cancel",
    "user_question/answer",
    "user_question/dismiss",
    "push/register",
    "push/unregister",
    "shutdown",
]


async def failure(
    client: UserHostClient, method: str, params: dict[str, Any], *, request_id: int | str = 42
) -> tuple[str, str | None]:
    """Send one request that must fail; its error's stable code and field. Checks the id and the number."""
    response = await client.request(method, params, request_id=request_id)
    validators.validate("JsonRpcErrorResponse", response)
    assert response["id"] == request_id, response
    data = response["error"]["data"]
    assert response["error"]["code"] == NUMBERS.get(data["code"], -32000), response
    return data["code"], data.get("field")


async def plugin_failure(client: UserHostClient, **params: Any) -> tuple[str, str | None]:
    """The error of one `plugin/client/request` with `params` (plugin and method defaulted)."""
    call = {"plugin_id": PLUGIN_ID, "method": "agents.main_session", "params": {}, **params}
    return await failure(client, "plugin/client/request", call)


async def plugin_result(client: UserHostClient, **params: Any) -> dict[str, Any]:
    """The plugin result of one `plugin/client/request` that must succeed."""
    call = {"plugin_id": PLUGIN_ID, "method": "agents.main_session", "params": {}, **params}
    response = await client.request("plugin/client/request", call)
    assert "result" in response, response
    result: dict[str, Any] = response["result"]["result"]
    return result


async def initialized(connect: Connect) -> UserHostClient:
    client = await connect()
    await client.initialize()
    return client


async def test_unserved_methods_are_unsupported_before_and_after_initialize(connect: Connect) -> None:
    client = await connect()
    for method in UNSERVED:
        assert await failure(client, method, {}) == ("unsupported_method", None), method
    # Unsupported comes before the params: even params that no method takes.
    assert await failure(client, "thread/start", {"cwd": "/"}) == ("unsupported_method", None)
    await client.initialize()
    for method in UNSERVED:
        assert await failure(client, method, {}) == ("unsupported_method", None), method


async def test_every_method_but_initialize_needs_initialize_first(connect: Connect) -> None:
    client = await connect()
    for method in AFTER_INITIALIZE:
        assert await failure(client, method, {"bogus": True}) == ("not_initialized", None), method
    # A failed initialize leaves the connection uninitialized.
    assert (await failure(client, "initialize", {**INIT_PARAMS, "protocol_version": 2}))[0] == (
        "unsupported_protocol_version"
    )
    assert await failure(client, "shutdown", {}) == ("not_initialized", None)
    await client.initialize()
    assert await client.request("plugin/client/cancel", {"id": 1}, request_id=7) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"cancelled": False},
    }


async def test_initialize_twice_is_already_initialized(connect: Connect) -> None:
    client = await initialized(connect)
    assert await failure(client, "initialize", INIT_PARAMS) == ("already_initialized", None)
    # Even with another version: the state is checked before the version.
    assert await failure(client, "initialize", {**INIT_PARAMS, "protocol_version": 2}) == (
        "already_initialized",
        None,
    )


@pytest.mark.parametrize("version", [2, 2147483647])
async def test_another_protocol_version_is_unsupported(connect: Connect, version: int) -> None:
    client = await connect()
    assert await failure(client, "initialize", {**INIT_PARAMS, "protocol_version": version}) == (
        "unsupported_protocol_version",
        None,
    )


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({**INIT_PARAMS, "protocol_version": "1"}, "protocol_version"),
        ({**INIT_PARAMS, "protocol_version": 1.0}, "protocol_version"),
        ({**INIT_PARAMS, "protocol_version": 0}, "protocol_version"),
        ({**INIT_PARAMS, "protocol_version": True}, "protocol_version"),
        ({"client_info": INIT_PARAMS["client_info"]}, "protocol_version"),
        ({"protocol_version": 1}, "client_info"),
        ({**INIT_PARAMS, "client_info": {"name": "t"}}, "client_info.version"),
        ({**INIT_PARAMS, "client_info": {"name": "", "version": "1"}}, "client_info.name"),
        ({**INIT_PARAMS, "capabilities": "x"}, "capabilities"),
        ({**INIT_PARAMS, "capabilities": ["Bad Name"]}, "capabilities.0"),
        ({**INIT_PARAMS, "user_space_id": "other"}, "user_space_id"),
        ({**INIT_PARAMS, "product_domain": "coding"}, "product_domain"),
        ({**INIT_PARAMS, "isolation": "verified_host"}, "isolation"),
        ({**INIT_PARAMS, "graph_generation": 7}, "graph_generation"),
    ],
)
async def test_initialize_params_are_strict(connect: Connect, params: dict[str, Any], field: str) -> None:
    client = await connect()
    assert await failure(client, "initialize", params) == ("invalid_params", field)
    await client.initialize()  # the failed initialize left the connection uninitialized


async def test_absent_params_are_empty_params(connect: Connect) -> None:
    client = await connect()

    async def without_params(request_id: int, method: str) -> dict[str, Any]:
        reply = client.expect_response(request_id)
        await client.send_bytes(b'{"jsonrpc":"2.0","id":%d,"method":"%s"}\n' % (request_id, method.encode()))
        return await asyncio.wait_for(reply, DEADLINE)

    # initialize's required fields are then missing; shutdown takes none.
    response = await without_params(1, "initialize")
    assert response["error"]["data"] == {"code": "invalid_params", "field": "protocol_version"}
    await client.initialize()
    assert await without_params(2, "shutdown") == {"jsonrpc": "2.0", "id": 2, "result": {}}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"plugin_id": None}, "plugin_id"),
        ({"plugin_id": 5}, "plugin_id"),
        ({"plugin_id": "Wuu.Test"}, "plugin_id"),
        ({"method": 5}, "method"),
        ({"method": "agents/main_session"}, "method"),
        ({"params": []}, "params"),
        ({"plugin_fingerprint": ""}, "plugin_fingerprint"),
        ({"user_input": "hello"}, "user_input"),
        ({"extra": 1}, "extra"),
        ({"method": "agents.history.search", "params": {"session_id": "main"}}, "params.query"),
        ({"method": "agents.history.search", "params": {"session_id": "main", "query": 5}}, "params.query"),
        (
            {
                "method": "agents.history.search",
                "params": {"session_id": "main", "query": "q", "page_size": "9"},
            },
            "params.page_size",
        ),
        ({"method": "agents.main_session", "params": {"session_id": "main"}}, "params.session_id"),
        (
            {
                "method": "agents.send",
                "params": {"session_id": "main"},
                "user_input": {**USER_INPUT, "text": 5},
            },
            "user_input.text",
        ),
        (
            {"method": "agents.send", "params": {"session_id": "main"}, "user_input": {"text": "hi"}},
            "user_input.client_input_id",
        ),
    ],
)
async def test_plugin_request_params_are_strict(connect: Connect, params: dict[str, Any], field: str) -> None:
    client = await initialized(connect)
    assert await plugin_failure(client, **params) == ("invalid_params", field)


async def test_missing_plugin_request_fields_are_named(connect: Connect) -> None:
    client = await initialized(connect)
    whole = {"plugin_id": PLUGIN_ID, "method": "agents.main_session", "params": {}}
    for missing in whole:
        params = {key: value for key, value in whole.items() if key != missing}
        assert await failure(client, "plugin/client/request", params) == ("invalid_params", missing)
    assert await failure(client, "plugin/client/cancel", {}) == ("invalid_params", "id")
    assert await failure(client, "plugin/client/cancel", {"id": 1.5}) == ("invalid_params", "id")
    assert await failure(client, "plugin/client/cancel", {"id": 1, "x": 1}) == ("invalid_params", "x")
    assert await failure(client, "shutdown", {"now": True}) == ("invalid_params", "now")


async def test_plugin_calls_are_routed_by_id_fingerprint_and_method(connect: Connect) -> None:
    client = await initialized(connect)
    assert await plugin_result(client) == {"session_id": "main"}
    assert await plugin_result(client, plugin_fingerprint=FINGERPRINT) == {"session_id": "main"}
    assert await plugin_failure(client, plugin_id="wuu.personal") == ("plugin_not_found", None)
    assert await plugin_failure(client, plugin_fingerprint="test-2") == ("plugin_fingerprint_mismatch", None)
    # A plugin method of the catalog that this plugin does not serve, a method not in the catalog, and
    # catalog names that are not plugin methods.
    for method in ["agents.receipts", "agents.nope", "initialize", "shutdown"]:
        assert await plugin_failure(client, method=method) == ("unsupported_method", None), method


async def test_user_input_is_required_by_agents_send_and_refused_elsewhere(connect: Connect) -> None:
    client = await initialized(connect)
    send = {"method": "agents.send", "params": {"session_id": "main"}}
    assert await plugin_failure(client, **send) == ("invalid_params", "user_input")
    receipt = (await plugin_result(client, **send, user_input=USER_INPUT))["receipt"]
    assert (receipt["client_input_id"], receipt["request_id"]) == ("in-1", "req-1")
    assert await plugin_failure(client, user_input=USER_INPUT) == ("invalid_params", "user_input")
    search = {"method": "agents.history.search", "params": {"session_id": "main", "query": "q"}}
    assert await plugin_failure(client, **search, user_input=USER_INPUT) == ("invalid_params", "user_input")


async def test_empty_text_without_attachments_is_invalid_params(connect: Connect) -> None:
    client = await initialized(connect)
    send = {"method": "agents.send", "params": {"session_id": "main"}}
    assert await plugin_failure(client, **send, user_input={**USER_INPUT, "text": ""}) == (
        "invalid_params",
        "user_input.text",
    )


async def test_a_plugin_that_raises_is_internal(connect: Connect, caplog: pytest.LogCaptureFixture) -> None:
    client = await initialized(connect)
    search = {"method": "agents.history.search", "params": {"session_id": "main", "query": "fail"}}
    call = {"plugin_id": PLUGIN_ID, **search}
    error = (await client.request("plugin/client/request", call, request_id="r-7"))["error"]
    assert error["data"] == {"code": "internal"}
    # The client gets an error id and nothing of the host's files; the log has the details under that id.
    assert FAIL_PATH not in error["message"] and "state" not in error["message"]
    found = re.search(r"error id ([0-9a-f]{16})", error["message"])
    assert found is not None, error["message"]
    logged = [record for record in caplog.records if getattr(record, "error_id", None) == found.group(1)]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert FAIL_PATH in str(logged[0].exc_info[1]) and "'r-7'" in logged[0].getMessage()
    assert await plugin_result(client) == {"session_id": "main"}  # the connection goes on


async def test_host_services_without_providers(connect: Connect) -> None:
    client = await initialized(connect)
    question = {"question_id": "q-1", "request_id": "r-1"}
    assert await failure(client, "user_question/answer", {**question, "text": "yes"}) == ("not_found", None)
    assert await failure(client, "user_question/dismiss", question) == ("not_found", None)
    # A Unix socket authenticates no device: no push registration.
    push = {"provider": "apns", "app_id": "dev.wuu.app", "token": "t0k3n"}
    assert await failure(client, "push/register", push) == ("permission_denied", None)
    assert await failure(client, "push/unregister", {"registration_id": "reg-1"}) == (
        "permission_denied",
        None,
    )
    # Their params are strict all the same.
    assert await failure(client, "user_question/answer", question) == ("invalid_params", "text")
    assert await failure(client, "push/register", {**push, "provider": "pigeon"}) == (
        "invalid_params",
        "provider",
    )


async def test_a_connection_of_an_older_graph_gets_graph_generation_changed(
    connect: Connect, host: UserHost, home: Path
) -> None:
    old = await initialized(connect)
    assert old.initialized is not None and old.initialized.graph_generation == 1
    state = home / "user-spaces" / "local" / "personal" / "state"
    host.replace_plugins([make_test_plugin([host], state)])
    assert await plugin_failure(old) == ("graph_generation_changed", None)
    assert await failure(old, "plugin/client/cancel", {"id": 1}) == ("graph_generation_changed", None)
    # The connection is otherwise alive; a new connection captures the new graph.
    assert await failure(old, "initialize", INIT_PARAMS) == ("already_initialized", None)
    new = await initialized(connect)
    assert new.initialized is not None and new.initialized.graph_generation == 2
    assert await plugin_result(new) == {"session_id": "main"}
