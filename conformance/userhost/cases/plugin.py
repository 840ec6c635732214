"""Cases of plugin calls (`plugin/client/request`): routing by the connection's inventory, the fingerprint
check, methods a plugin does not serve, `user_input` where it is required and where it is not allowed, and
invalid params that name their field."""

from __future__ import annotations

from typing import Any

from ..personal import open_main, user_input
from ..session import PERSONAL, HostSession
from ..suite import USERHOST

MISSING_PLUGIN = "wuu.conformance-missing"
"""A valid plugin ID that no host's inventory has."""
UNSERVED_METHODS = ("agents.conformance_missing", "initialize")
"""Valid plugin method names wuu.personal does not serve: an unknown one, and a method of the RPC itself."""


def request(method: str, params: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The params of a `plugin/client/request` to wuu.personal, with extra fields as they are."""
    return {"plugin_id": PERSONAL, "method": method, "params": params, **fields}


def fingerprints_unlike(fingerprint: str) -> list[str]:
    """Fingerprints that are not `fingerprint` though a lax comparison would take them for it: another
    value, a prefix, an extension, another case and surrounding white space."""
    others = ["conformance-other-fingerprint", fingerprint + "x", fingerprint + " ", " " + fingerprint]
    if len(fingerprint) > 1:
        others.append(fingerprint[:-1])
    for changed in (fingerprint.upper(), fingerprint.lower()):
        if changed != fingerprint:
            others.append(changed)
    return [other for other in others if other != fingerprint and len(other) <= 256]


@USERHOST.case("plugin.not-found")
async def not_found(host: HostSession) -> None:
    """A call to a plugin the connection's inventory does not list gets plugin_not_found, with or without a
    fingerprint."""
    await host.initialize()
    listed = [entry["plugin_id"] for entry in host.initialized["plugins"]]
    host.expect(MISSING_PLUGIN not in listed, f"the inventory lists {MISSING_PLUGIN}")
    call = {"plugin_id": MISSING_PLUGIN, "method": "agents.main_session", "params": {}}
    await host.error("plugin/client/request", call, "plugin_not_found")
    await host.error("plugin/client/request", {**call, "plugin_fingerprint": "x"}, "plugin_not_found")


@USERHOST.case("plugin.fingerprint-mismatch")
async def fingerprint_mismatch(host: HostSession) -> None:
    """A call whose plugin_fingerprint differs from the inventory's fingerprint in any way (another value,
    a prefix, an extension, another case, white space) gets plugin_fingerprint_mismatch."""
    await open_main(host)
    fingerprint = host.personal()
    for other in fingerprints_unlike(fingerprint):
        call = request("agents.main_session", {}, plugin_fingerprint=other)
        message = await host.request("plugin/client/request", call)
        host.expect_error(
            message,
            "plugin_fingerprint_mismatch",
            f"a call with plugin_fingerprint {other!r} ({fingerprint!r})",
        )


@USERHOST.case("plugin.fingerprint-match")
async def fingerprint_match(host: HostSession) -> None:
    """A call whose plugin_fingerprint is exactly the inventory's fingerprint is served like one without it:
    agents.main_session names the same session."""
    main = await open_main(host)
    call = request("agents.main_session", {}, plugin_fingerprint=host.personal())
    result = await host.ok("plugin/client/request", call)
    session = result["result"]["session_id"]
    host.expect(
        session == main, f"with the inventory's fingerprint the main session is {session!r}, not {main!r}"
    )


@USERHOST.case("plugin.unsupported-method")
async def unsupported_method(host: HostSession) -> None:
    """A call to a method wuu.personal does not serve to clients (an unknown one, and `initialize`, a method
    of the RPC itself) gets unsupported_method."""
    await open_main(host)
    for method in UNSERVED_METHODS:
        message = await host.request("plugin/client/request", request(method, {}))
        host.expect_error(message, "unsupported_method", f"a call of the plugin method {method!r}")


@USERHOST.case("plugin.user-input-required")
async def user_input_required(host: HostSession) -> None:
    """agents.send without user_input gets invalid_params naming the field user_input."""
    main = await open_main(host)
    await host.call_error("agents.send", {"session_id": main}, "invalid_params", field="user_input")


@USERHOST.case("plugin.user-input-rejected")
async def user_input_rejected(host: HostSession) -> None:
    """A method that takes no user input (agents.main_session, agents.history.read, agents.receipts) called
    with a valid user_input gets invalid_params naming the field user_input (an optional method the host
    does not serve answers unsupported_method instead)."""
    main = await open_main(host)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("agents.main_session", {}),
        ("agents.history.read", {"session_id": main}),
        ("agents.receipts", {"session_id": main, "client_input_ids": ["conformance-rejected"]}),
    ]
    for method, params in calls:
        envelope = user_input(f"given to {method}")
        message = await host.call(method, params, user_input=envelope)
        if not host.unserved(method, message):
            host.expect_error(message, "invalid_params", f"{method} with user_input", "user_input")


@USERHOST.case("plugin.invalid-params-field")
async def invalid_params_field(host: HostSession) -> None:
    """Invalid params of a plugin call get invalid_params whose data.field is the dotted path of the bad
    field within the plugin/client/request params: a missing, an out-of-range and a mistyped plugin method
    param (`params.<name>`, of agents.history.read, or agents.history.search when the host does not serve
    it), and a missing `params`, a malformed `plugin_id` and a mistyped `user_input.text` of the call
    itself."""
    main = await open_main(host)
    method = "agents.history.read"
    query: dict[str, Any] = {}
    if host.unserved(method, await host.call(method, {"session_id": main})):
        method, query = "agents.history.search", {"query": "conformance"}  # the same page_size bounds
    inner: list[tuple[dict[str, Any], str]] = [
        (query, "params.session_id"),
        ({"session_id": main, **query, "page_size": 0}, "params.page_size"),
        ({"session_id": main, **query, "page_size": 101}, "params.page_size"),
        ({"session_id": main, **query, "page_size": "5"}, "params.page_size"),
        ({"session_id": 7, **query}, "params.session_id"),
    ]
    for params, field in inner:
        await host.call_error(method, params, "invalid_params", field=field)
    envelope = user_input(client_input_id="conformance-typed", request_id="conformance-typed")
    outer = [
        ({"plugin_id": PERSONAL, "method": "agents.main_session"}, "params"),
        ({"plugin_id": "Not A Plugin!", "method": "agents.main_session", "params": {}}, "plugin_id"),
        (request("agents.send", {"session_id": main}, user_input={**envelope, "text": 5}), "user_input.text"),
    ]
    for call, field in outer:
        await host.error("plugin/client/request", call, "invalid_params", field=field)
