"""Mutants of `plugin/client/cancel`: unknown ids, connection-local ids, one response per request."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

from . import mutant
from .harness import Message, Relay, ReplyRewriter, error_message, key, message_of, rewrite_results


def _always(result: dict[str, Any], params: Message) -> None:
    result["cancelled"] = True


mutant(
    "cancel-always-delivered",
    "answers cancelled: true to a cancel whatever it names, an unknown id included",
    "cancel.unknown-id",
)(
    rewrite_results(
        "plugin/client/cancel",
        _always,
        doc="Every `plugin/client/cancel` result says `cancelled: true`, also for an id that is not in flight.",
    )
)


@mutant(
    "cancelled-request-answered-twice",
    "answers a cancelled request with a cancelled error as soon as the cancel is delivered, and again later",
    "cancel.exactly-one-response",
)
class CancelledRequestAnsweredTwice(ReplyRewriter):
    """When a cancel is delivered (`cancelled: true`), the named request is answered `cancelled` at once;
    the host's own response to it still follows, so it gets two."""

    def rewrite(self, response: Message, method: str, params: Message) -> list[Message]:
        result = response.get("result")
        if method == "plugin/client/cancel" and isinstance(result, dict) and result.get("cancelled") is True:
            early = error_message(params.get("id"), -32000, "cancelled", "cancelled")
            return [response, early]
        return [response]


@mutant(
    "cancels-across-connections",
    "delivers a cancel naming an id not in flight on its connection to another connection's request",
    "cancel.connection-local",
)
class CancelsAcrossConnections(Relay):
    """A cancel whose id is not in flight on its own connection, but is on another's, is sent on that other
    connection instead, and its answer comes back to the client that asked."""

    fresh = itertools.count(1)
    routes: ClassVar[dict[str, tuple[Relay, object]]] = {}
    """The stand-in id of a cancel sent on another connection -> the connection that asked, and its id."""

    def from_client(self, line: bytes) -> None:
        message = message_of(line)
        params = message.get("params") if message is not None else None
        if message is None or message.get("method") != "plugin/client/cancel" or not isinstance(params, dict):
            self.to_host(line)
            return
        target = key(params.get("id"))
        owners = [relay for relay in self.hub.others(self) if target in relay.requests]
        if target in self.requests or not owners or "id" not in message:
            self.to_host(line)
            return
        stand_in = f"mutant-cancel-{next(self.fresh)}"
        self.routes[stand_in] = (self, message["id"])
        owners[0].send({**message, "id": stand_in})

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        request_id = message.get("id") if message is not None else None
        if message is not None and isinstance(request_id, str) and request_id in self.routes:
            asker, asked_id = self.routes.pop(request_id)
            asker.answer({**message, "id": asked_id})
            return
        self.to_client(line)
