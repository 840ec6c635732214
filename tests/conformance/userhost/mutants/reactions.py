"""Mutants of reactions: set and read, compare-and-set, idempotent retries, retained receipts, eligibility,
and the invalidation notice to other clients."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

import emoji as emoji_data

from wuu.generated.models import (
    AgentsReactionsResult,
    AgentsReactResult,
    ReactionActor,
    ReactionState,
    UserHostErrorCode,
)
from wuu.generated.wire import WireModel
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.personal.provider import ReactionWrite
from wuu.host.userhost.plugins import PluginCall, PluginHandler

from . import mutant
from .harness import (
    ProviderProxy,
    Relay,
    message_of,
    rewrite_params,
    rewrite_result,
    with_provider,
    wrap_method,
)


class Unchecked(ProviderProxy):
    """The owner's reaction writes skip the revision check."""

    async def react(
        self,
        actor: ReactionActor,
        session_id: str,
        message_seq: int,
        emoji: str | None,
        expected_revision: int | None,
        request_id: str,
        now: datetime,
    ) -> ReactionWrite:
        written: ReactionWrite = await self.inner.react(
            actor, session_id, message_seq, emoji, None, request_id, now
        )
        return written


@mutant(
    "no-compare-and-set",
    "saves a reaction write whatever its expected_revision, a stale one included",
    "reactions.compare-and-set",
)
def no_compare_and_set() -> Composer:
    """The provider writes every reaction on the current revision, as it does the agent's (`expected_revision`
    None), so a stale write is saved instead of getting `stale_revision`."""
    return with_provider(Unchecked)


@mutant(
    "retry-written-again",
    "writes a retried reaction again under a fresh request ID instead of replaying its receipt",
    "reactions.idempotent",
)
def retry_written_again() -> Composer:
    """The `agents.react` handler runs every call under a request ID of its own (the client's with a
    counter), so a retry is a new write."""
    fresh = itertools.count(1)
    return rewrite_params("agents.react", lambda params: {"request_id": f"{params.request_id}.{next(fresh)}"})


@mutant(
    "every-receipt-retained",
    "replays a reaction request ID older than the 32 newest writes instead of revision-checking it again",
    "reactions.receipts-retained",
)
def every_receipt_retained() -> Composer:
    """The `agents.react` handler remembers every write it answered: a request ID the store no longer
    retains, refused `stale_revision`, is answered with its old result as a replay."""
    answered: dict[tuple[str, int, str], AgentsReactResult] = {}

    def make(handler: PluginHandler) -> PluginHandler:
        async def react(params: Any, call: PluginCall) -> WireModel:
            key = (params.session_id, params.message_seq, params.request_id)
            try:
                result = await handler(params, call)
            except UserHostError as error:
                if error.code is not UserHostErrorCode.STALE_REVISION or key not in answered:
                    raise
                return answered[key].model_copy(update={"replayed": True})
            assert isinstance(result, AgentsReactResult)
            answered.setdefault(key, result)
            return result

        return react

    return wrap_method("agents.react", make)


@mutant(
    "reactions-read-untouched",
    "answers agents.reactions with revision 0 and no emoji, whatever was written",
    "reactions.set-and-read",
)
def reactions_read_untouched() -> Composer:
    """Every snapshot the `agents.reactions` handler answers has the reactions of a message never written."""

    def change(result: AgentsReactionsResult, params: Any) -> WireModel:
        untouched = [
            snapshot.model_copy(update={"reactions": ReactionState(revision=0)})
            for snapshot in result.messages
        ]
        return result.model_copy(update={"messages": untouched})

    return rewrite_result("agents.reactions", change)


@mutant(
    "everything-reaction-eligible",
    "reports every message as reaction_eligible, user messages included",
    "reactions.eligibility",
)
def everything_reaction_eligible() -> Composer:
    """Every snapshot the `agents.reactions` handler answers says `reaction_eligible: true`."""

    def change(result: AgentsReactionsResult, params: Any) -> WireModel:
        eligible = [snapshot.model_copy(update={"reaction_eligible": True}) for snapshot in result.messages]
        return result.model_copy(update={"messages": eligible})

    return rewrite_result("agents.reactions", change)


@mutant(
    "invalidation-to-the-writer-only",
    "sends the reactions notice of a write only to the client that wrote, never to the others",
    "reactions.invalidation",
)
class InvalidationToTheWriterOnly(Relay):
    """A `plugin/client/invalidate` notice is dropped on every connection that has no `agents.react` call in
    flight (the host sends the notice before it answers the write)."""

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and message.get("method") == "plugin/client/invalidate":
            writing = any(
                isinstance(params.get("params"), dict) and params.get("method") == "agents.react"
                for method, params in self.requests.values()
                if method == "plugin/client/request"
            )
            if not writing:
                return
        self.to_client(line)


@mutant(
    "any-emoji-string-accepted",
    "saves a reaction whose emoji is not exactly one Unicode emoji, as a thumbs up",
    "reactions.one-emoji",
)
def any_emoji_string_accepted() -> Composer:
    """The `agents.react` handler writes 👍 in place of an emoji string that is not one emoji."""

    def one(params: Any) -> dict[str, Any]:
        emoji = params.emoji
        return {} if emoji is None or emoji_data.is_emoji(emoji) else {"emoji": "👍"}

    return rewrite_params("agents.react", one)


@mutant(
    "reactions-read-reversed",
    "answers agents.reactions with the snapshots in reverse request order",
    "reactions.read-order",
)
def reactions_read_reversed() -> Composer:
    """The `agents.reactions` handler's snapshots come back in reverse order."""

    def change(result: AgentsReactionsResult, params: Any) -> WireModel:
        return result.model_copy(update={"messages": list(reversed(result.messages))})

    return rewrite_result("agents.reactions", change)
