"""Mutants of input admission (`agents.send`, `agents.receipts`): the main session, receipts, replays."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from wuu.generated.models import AgentsReceiptsResult, AgentsSendResult, UserHostErrorCode
from wuu.generated.wire import WireModel
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.plugins import PluginCall, PluginHandler

from . import mutant
from .harness import (
    CallWith,
    Message,
    RequestRewriter,
    main_session,
    plugin_method,
    rewrite_result,
    wrap_method,
    wrap_methods,
)


@mutant(
    "replay-not-flagged",
    "answers a retried submission (same request ID and input) with replayed false",
    "admission.replay",
)
def replay_not_flagged() -> Composer:
    """The `agents.send` handler's result always says `replayed: false`, a retry's included."""
    return rewrite_result("agents.send", lambda result, params: result.model_copy(update={"replayed": False}))


@mutant(
    "receipt-already-read",
    "answers a new submission with a receipt whose read_at is already set",
    "admission.receipt",
)
def receipt_already_read() -> Composer:
    """The receipt in every `agents.send` result has `read_at` set to its `accepted_at`."""

    def change(result: AgentsSendResult, params: Any) -> WireModel:
        receipt = result.receipt.model_copy(update={"read_at": result.receipt.accepted_at})
        return result.model_copy(update={"receipt": receipt})

    return rewrite_result("agents.send", change)


@mutant(
    "receipts-reversed",
    "answers agents.receipts with the receipts in reverse request order",
    "admission.receipts-read",
)
def receipts_reversed() -> Composer:
    """The `agents.receipts` handler's receipts come back in reverse order."""

    def change(result: AgentsReceiptsResult, params: Any) -> WireModel:
        return result.model_copy(update={"receipts": list(reversed(result.receipts))})

    return rewrite_result("agents.receipts", change)


@mutant(
    "client-input-id-reused",
    "admits an input whose client input ID already names another input, under a fresh ID",
    "admission.client-input-conflict",
)
def client_input_id_reused() -> Composer:
    """When `agents.send` refuses a client input ID that names another input (`invalid_params` on
    `user_input.client_input_id`), the handler admits the input again under a fresh client input ID."""
    fresh = itertools.count(1)

    def make(handler: PluginHandler) -> PluginHandler:
        async def send(params: Any, call: PluginCall) -> WireModel:
            try:
                return await handler(params, call)
            except UserHostError as error:
                if error.field != "user_input.client_input_id" or call.user_input is None:
                    raise
                renamed = call.user_input.model_copy(
                    update={"client_input_id": f"{call.user_input.client_input_id}.m{next(fresh)}"}
                )
                return await handler(params, CallWith(call, renamed))

        return send

    return wrap_method("agents.send", make)


@mutant(
    "read-at-asserted",
    "takes a client's read_at (or receipt) field in user_input or the send params instead of refusing it",
    "admission.read-at-not-settable",
)
class ReadAtAsserted(RequestRewriter):
    """`read_at` and `receipt` fields in an `agents.send` call's `user_input` and params are dropped before
    the host sees them, so the call is admitted instead of getting `invalid_params`."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        if isinstance(params, dict) and plugin_method(request["method"], params) == "agents.send":
            for part in (params.get("user_input"), params.get("params")):
                if isinstance(part, dict):
                    part.pop("read_at", None)
                    part.pop("receipt", None)
        return [request]


@mutant(
    "any-session-is-main",
    "admits agents.send and serves agents.receipts naming another session, as if it were the main one",
    "admission.main-session",
)
def any_session_is_main() -> Composer:
    """`agents.send` and `agents.receipts` run on the main session whatever session they name."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def on_main(params: Any, call: PluginCall) -> WireModel:
            return await handler(
                params.model_copy(update={"session_id": await main_session(methods, call)}), call
            )

        return on_main

    return wrap_methods(["agents.send", "agents.receipts"], make)


@mutant(
    "request-id-reused-for-another-input",
    "admits another input under a request ID already used, instead of answering request_id_conflict",
    "admission.request-id-conflict",
)
def request_id_reused_for_another_input() -> Composer:
    """When `agents.send` refuses a request ID bound to another input (`request_id_conflict`), the handler
    admits the input again under a fresh request ID."""
    fresh = itertools.count(1)

    def make(handler: PluginHandler) -> PluginHandler:
        async def send(params: Any, call: PluginCall) -> WireModel:
            try:
                return await handler(params, call)
            except UserHostError as error:
                if error.code is not UserHostErrorCode.REQUEST_ID_CONFLICT or call.user_input is None:
                    raise
                renamed = call.user_input.model_copy(
                    update={"request_id": f"{call.user_input.request_id}.m{next(fresh)}"}
                )
                return await handler(params, CallWith(call, renamed))

        return send

    return wrap_method("agents.send", make)


@mutant(
    "empty-text-filled",
    "admits an input of empty text without attachments, as a single space",
    "admission.empty-text",
)
class EmptyTextFilled(RequestRewriter):
    """The empty text of an `agents.send` input without attachments becomes a space before the host sees
    it."""

    def rewrite(self, request: Message) -> list[Message]:
        params = request.get("params")
        envelope = params.get("user_input") if isinstance(params, dict) else None
        send = isinstance(params, dict) and plugin_method(request["method"], params) == "agents.send"
        if (
            send
            and isinstance(envelope, dict)
            and envelope.get("text") == ""
            and not envelope.get("attachments")
        ):
            envelope["text"] = " "
        return [request]
