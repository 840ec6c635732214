"""Mutants of the client transports: shutdown and EOF detach one client, at most 16, stalled readers."""

from __future__ import annotations

from wuu.generated.catalog import USERHOST_MAX_CLIENT_TRANSPORTS

from . import mutant
from .harness import Message, Relay, ReplyRewriter, code_of, message_of


@mutant(
    "shutdown-closes-every-client",
    "ends every client's connection when one client shuts down",
    "clients.shutdown-detaches",
)
class ShutdownClosesEveryClient(ReplyRewriter):
    """Once a client's `shutdown` is answered, every other connection is closed as well."""

    def rewrite(self, response: Message, method: str, params: Message) -> list[Message]:
        if method == "shutdown" and "result" in response:
            for relay in self.hub.others(self):
                relay.end()
        return [response]


@mutant(
    "eof-keeps-client-attached",
    "keeps a client attached after its input ends (EOF), so the host never lets it go",
    "clients.eof-detaches",
)
class EofKeepsClientAttached(Relay):
    """The end of a client's input is never passed on: the host keeps the connection attached, its calls
    keep their authority and its transport slot stays taken until the host ends."""

    def client_ended(self) -> None:
        pass


@mutant(
    "seventeenth-client-admitted",
    f"lets a client beyond the first {USERHOST_MAX_CLIENT_TRANSPORTS} initialize instead of refusing it",
    "clients.max-transports",
)
class SeventeenthClientAdmitted(Relay):
    """The host's `too_many_clients` refusal of a connection's first request is replaced by the result of
    another client's initialize, and the connection stays open (the host has closed its side)."""

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if message is not None and code_of(message) == "too_many_clients":
            results = [relay.initialized for relay in self.hub.others(self) if relay.initialized is not None]
            if results:
                self.answer({"jsonrpc": "2.0", "id": message["id"], "result": results[0]})
                self.keep_client = True
                return
        self.to_client(line)


@mutant(
    "stalled-reader-buffered",
    "buffers without bound for a client that stops reading, instead of disconnecting it",
    "clients.stalled-reader",
)
class StalledReaderBuffered(Relay):
    """The relay takes every message the host sends at once and queues it for the client without bound,
    so a client that stops reading never fills the host's outgoing queue and is never disconnected."""

    backpressure = False


@mutant(
    "stdio-eof-ends-every-client",
    "ends every client's connection when the stdio client's input ends, though the host also serves a socket",
    "clients.stdio-only-ends",
)
class StdioEofEndsEveryClient(Relay):
    """The stdio client's EOF closes every connection, as if the host were stdio-only and ended (the socket
    keeps accepting new clients)."""

    def client_ended(self) -> None:
        if self.transport != "stdio":
            self.end_host_input()
            return
        for relay in list(self.hub.relays):
            relay.end()
