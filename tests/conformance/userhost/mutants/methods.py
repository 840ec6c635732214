"""Mutants of the methods a transport serves: no Coding method, no notification method as a request."""

from __future__ import annotations

from wuu.generated.catalog import USERHOST_METHODS

from . import mutant
from .harness import Hub, Key, Message, RequestRewriter, key, message_of


@mutant(
    "serves-coding-methods",
    "answers a method outside the user-host catalog (a Coding thread or workspace method) with success",
    "methods.coding-refused",
)
class ServesCodingMethods(RequestRewriter):
    """A request for a method the catalog does not list (`thread/start`, `workspace/list`, ...) is answered
    with an empty result instead of `unsupported_method`; the host never sees it."""

    def rewrite(self, request: Message) -> list[Message]:
        if request["method"] in USERHOST_METHODS or "id" not in request:
            return [request]
        self.answer({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        return []


@mutant(
    "notification-method-served",
    "answers plugin/client/invalidate sent as a request with success instead of unsupported_method",
    "methods.notification-method-refused",
)
class NotificationMethodServed(RequestRewriter):
    """A client request for a host-to-client notification method (`plugin/client/invalidate`) is answered
    with an empty result; the host never sees it."""

    def rewrite(self, request: Message) -> list[Message]:
        spec = USERHOST_METHODS.get(request["method"])
        if spec is None or spec.kind != "notification" or "id" not in request:
            return [request]
        self.answer({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        return []


@mutant(
    "plugin-methods-served-unwrapped",
    "serves a plugin method sent as a request method of its own, as if it came in plugin/client/request",
    "methods.plugin-method-wrapped",
)
class PluginMethodsServedUnwrapped(RequestRewriter):
    """A request whose method is a plugin method (`agents.main_session`, ...) is sent to the host wrapped in
    a `plugin/client/request` to `wuu.personal`, and answered with the plugin method's result."""

    def __init__(self, hub: Hub, transport: str) -> None:
        super().__init__(hub, transport)
        self.unwrapped: set[Key] = set()

    def rewrite(self, request: Message) -> list[Message]:
        spec = USERHOST_METHODS.get(request["method"])
        if spec is None or spec.kind != "plugin_request" or "id" not in request:
            return [request]
        params = request.get("params", {})
        self.unwrapped.add(key(request["id"]))
        wrapped = {"plugin_id": "wuu.personal", "method": request["method"], "params": params}
        return [{**request, "method": "plugin/client/request", "params": wrapped}]

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if message is None or key(message.get("id")) not in self.unwrapped:
            self.to_client(line)
            return
        self.unwrapped.discard(key(message["id"]))
        if "result" in message:
            message["result"] = message["result"]["result"]
        self.answer(message)
