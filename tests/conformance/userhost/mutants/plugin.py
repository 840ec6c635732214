"""Mutants of `plugin/client/request` routing: the plugin, its fingerprint, its methods, user input, fields."""

from __future__ import annotations

from . import mutant
from .harness import Message, ReplyRewriter, RequestRewriter, code_of, error_message, plugin_method

# JSON-RPC numbers of the codes these mutants answer with.
UNSUPPORTED_METHOD = -32601
OTHER = -32000


@mutant(
    "fingerprint-ignored",
    "routes a plugin call whose plugin_fingerprint does not match the graph's",
    "plugin.fingerprint-mismatch",
)
class FingerprintIgnored(RequestRewriter):
    """`plugin_fingerprint` is dropped from every plugin call before the host sees it, so a stale
    fingerprint is served instead of getting `plugin_fingerprint_mismatch`."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        if request["method"] == "plugin/client/request" and isinstance(params, dict):
            params.pop("plugin_fingerprint", None)
        return [request]


@mutant(
    "matching-fingerprint-refused",
    "answers plugin_fingerprint_mismatch to a plugin call whose fingerprint matches",
    "plugin.fingerprint-match",
)
class MatchingFingerprintRefused(RequestRewriter):
    """Every plugin call that names a fingerprint is answered `plugin_fingerprint_mismatch`; the host never
    sees it."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        if (
            request["method"] != "plugin/client/request"
            or not isinstance(params, dict)
            or "id" not in request
        ):
            return [request]
        if "plugin_fingerprint" not in params:
            return [request]
        self.answer(error_message(request["id"], OTHER, "plugin_fingerprint_mismatch", "mismatch"))
        return []


def _recode(response: Message, code: str, number: int) -> None:
    response["error"] = {**response["error"], "code": number, "data": {"code": code}}


@mutant(
    "unknown-plugin-unsupported-method",
    "answers a call to a plugin that is not in the graph with unsupported_method instead of plugin_not_found",
    "plugin.not-found",
)
class UnknownPluginUnsupportedMethod(ReplyRewriter):
    """`plugin_not_found` responses go out as `unsupported_method`."""

    def rewrite(self, response: Message, method: str, params: Message) -> list[Message]:
        if code_of(response) == "plugin_not_found":
            _recode(response, "unsupported_method", UNSUPPORTED_METHOD)
        return [response]


@mutant(
    "unserved-plugin-method-not-found",
    "answers a call of a method the plugin does not serve with not_found instead of unsupported_method",
    "plugin.unsupported-method",
)
class UnservedPluginMethodNotFound(ReplyRewriter):
    """An `unsupported_method` response to a plugin call goes out as `not_found`."""

    def rewrite(self, response: Message, method: str, params: Message) -> list[Message]:
        if method == "plugin/client/request" and code_of(response) == "unsupported_method":
            _recode(response, "not_found", OTHER)
        return [response]


@mutant(
    "user-input-made-up",
    "serves agents.send without user_input, making one up, instead of answering invalid_params",
    "plugin.user-input-required",
)
class UserInputMadeUp(RequestRewriter):
    """An `agents.send` call without `user_input` gets one made up (text `made up`, fresh ids) before the
    host sees it."""

    made = 0

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        send = isinstance(params, dict) and plugin_method(request["method"], params) == "agents.send"
        if send and isinstance(params, dict) and "user_input" not in params:
            type(self).made += 1
            params["user_input"] = {
                "client_input_id": f"mutant-input-{self.made}",
                "request_id": f"mutant-request-{self.made}",
                "text": "made up",
            }
        return [request]


@mutant(
    "user-input-dropped",
    "serves a call of a method that takes no user input though it carries user_input",
    "plugin.user-input-rejected",
)
class UserInputDropped(RequestRewriter):
    """`user_input` is dropped from every plugin call but `agents.send` before the host sees it."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        if isinstance(params, dict) and plugin_method(request["method"], params) not in (None, "agents.send"):
            params.pop("user_input", None)
        return [request]


@mutant(
    "invalid-params-field-unnamed",
    "answers invalid_params to a plugin call without naming the offending field",
    "plugin.invalid-params-field",
)
class InvalidParamsFieldUnnamed(ReplyRewriter):
    """`error.data.field` is dropped from every `invalid_params` response to a plugin call."""

    def rewrite(self, response: Message, method: str, params: Message) -> list[Message]:
        if method == "plugin/client/request" and code_of(response) == "invalid_params":
            response["error"]["data"].pop("field", None)
        return [response]
