"""Mutants of `initialize`: the binding and isolation report, the version, once per connection, the graph."""

from __future__ import annotations

import re
from typing import Any

from wuu.generated.catalog import USERHOST_PROTOCOL_VERSION

from . import mutant
from .harness import Hub, Message, Relay, ReplyRewriter, RequestRewriter, message_of, rewrite_results


def _other_space(result: dict[str, Any], params: Message) -> None:
    result["user_space_id"] = f"{result['user_space_id']}-elsewhere"


mutant(
    "reports-another-user-space",
    "initialize reports a user space other than the one the host was started with",
    "initialize.binding-reported",
)(
    rewrite_results(
        "initialize",
        _other_space,
        doc="The result of initialize names the host's user space with `-elsewhere` appended.",
    )
)


def _verified(result: dict[str, Any], params: Message) -> None:
    result["user_host_isolation"] = {"memory": "logical", "host": "verified"}


mutant(
    "reports-verified-isolation",
    "initialize reports verified host isolation though nothing verified it",
    "initialize.binding-reported",
)(
    rewrite_results(
        "initialize",
        _verified,
        doc='The result of initialize reports `{"memory": "logical", "host": "verified"}`.',
    )
)


def _unlisted_capability(result: dict[str, Any], params: Message) -> None:
    result["capabilities"] = [*result["capabilities"], "mutant.unlisted"]


mutant(
    "unlisted-capability-reported",
    "initialize reports a capability in effect that the client did not list",
    "initialize.capabilities",
)(
    rewrite_results(
        "initialize",
        _unlisted_capability,
        doc="The result's `capabilities` gain `mutant.unlisted`, whatever the client listed.",
    )
)


def _unordered(result: dict[str, Any], params: Message) -> None:
    result["plugins"] = sorted(result["plugins"], key=lambda entry: entry["plugin_id"], reverse=True)
    result["plugins"].append({"plugin_id": "a.mutant", "fingerprint": "a.mutant/1"})


mutant(
    "inventory-unordered",
    "initialize lists the plugin inventory out of plugin_id order",
    "initialize.inventory-ordered",
)(
    rewrite_results(
        "initialize",
        _unordered,
        doc="The inventory is listed in descending plugin_id order, with an extra `a.mutant` entry last "
        "(so even a one-plugin graph is out of order).",
    )
)


@mutant(
    "second-initialize-accepted",
    "answers a second initialize on a connection with the first one's result",
    "initialize.already-initialized",
)
class SecondInitializeAccepted(RequestRewriter):
    """Once the connection is initialized, another initialize is answered with the first one's result
    instead of `already_initialized`; the host never sees it."""

    def rewrite(self, request: Message) -> list[Message]:
        if request["method"] != "initialize" or self.initialized is None or "id" not in request:
            return [request]
        self.answer({"jsonrpc": "2.0", "id": request["id"], "result": self.initialized})
        return []


@mutant(
    "protocol-version-ignored",
    "accepts an initialize that asks for a protocol version the host does not speak",
    "initialize.version-mismatch",
)
class ProtocolVersionIgnored(RequestRewriter):
    """An initialize asking for another protocol version reaches the host asking for the one it speaks
    (so it succeeds, reporting that version)."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        if request["method"] == "initialize" and isinstance(params, dict) and "protocol_version" in params:
            params["protocol_version"] = USERHOST_PROTOCOL_VERSION
        return [request]


@mutant(
    "client-binding-accepted",
    "accepts an initialize whose params name a user space or product domain (the client's binding)",
    "initialize.no-client-binding",
)
class ClientBindingAccepted(RequestRewriter):
    """The binding fields a client puts in initialize's params (`user_space_id`, `product_domain`) are
    dropped before the host sees them, so the request succeeds instead of getting `invalid_params`."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        if request["method"] == "initialize" and isinstance(params, dict):
            for name in ("user_space_id", "product_domain", "user_space", "composition_profile"):
                params.pop(name, None)
        return [request]


@mutant(
    "requests-before-initialize-served",
    "serves requests that arrive before initialize as if the connection were initialized",
    "initialize.first",
)
class RequestsBeforeInitializeServed(Relay):
    """Before the client's initialize, the relay initializes the host's connection itself (and swallows
    the answer), so the client's early requests are served; the client's own initialize is then answered
    with the result of the relay's."""

    HIDDEN = "mutant-initialize"

    def __init__(self, hub: Hub, transport: str) -> None:
        super().__init__(hub, transport)
        self.hidden_sent = False

    def from_client(self, line: bytes) -> None:
        message = message_of(line)
        if message is None or not isinstance(message.get("method"), str) or "id" not in message:
            self.to_host(line)
            return
        if message["method"] == "initialize":
            if self.hidden_sent and self.initialized is not None:
                self.answer({"jsonrpc": "2.0", "id": message["id"], "result": self.initialized})
                return
            self.hidden_sent = True  # the client's own initialize comes first: nothing to hide
        elif not self.hidden_sent:
            self.hidden_sent = True
            self.send(
                {
                    "jsonrpc": "2.0",
                    "id": self.HIDDEN,
                    "method": "initialize",
                    "params": {
                        "protocol_version": USERHOST_PROTOCOL_VERSION,
                        "client_info": {"name": "mutant", "version": "1"},
                    },
                }
            )
        self.to_host(line)

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and message.get("id") == self.HIDDEN:
            return
        self.to_client(line)


@mutant(
    "another-graph-for-later-clients",
    "reports a different graph generation to every client after the first",
    "initialize.same-graph",
)
class AnotherGraphForLaterClients(ReplyRewriter):
    """A client that initializes while another connection is already initialized is told a graph generation
    one higher than the host's (the first client is told the truth)."""

    def rewrite(self, response: Message, method: str, params: Message) -> list[Message]:
        earlier = [relay for relay in self.hub.others(self) if relay.initialized is not None]
        if method == "initialize" and "result" in response and earlier:
            response["result"]["graph_generation"] += 1
        return [response]


@mutant(
    "initialize-params-repaired",
    "accepts initialize params that break UserHostInitializeParams, repairing them",
    "initialize.params-validated",
)
class InitializeParamsRepaired(RequestRewriter):
    """Before the host sees an initialize, a missing or mistyped `protocol_version` becomes the host's, a
    missing or incomplete `client_info` a made-up one, and capabilities that are not a list of names are
    dropped."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        if request["method"] != "initialize" or not isinstance(params, dict):
            return [request]
        version = params.get("protocol_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            params["protocol_version"] = USERHOST_PROTOCOL_VERSION
        info = params.get("client_info")
        if not isinstance(info, dict) or not {"name", "version"} <= set(info):
            params["client_info"] = {"name": "mutant", "version": "1"}
        capabilities = params.get("capabilities")
        if "capabilities" in params and not (
            isinstance(capabilities, list) and all(_capability(name) for name in capabilities)
        ):
            del params["capabilities"]
        return [request]


def _capability(name: object) -> bool:
    return isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9_.-]*", name) is not None
