"""Mutants of cancel: the immediate answer, the one terminal reply of a cancelled request, unknown ids."""

from __future__ import annotations

from wuu.generated.models import ErrorCode
from wuu.worker.connection import REQUEST_KEYS

from . import mutant
from .harness import Frame, Relay, ReplyRewriter, frame_of, rewrite_results

# Requests that the worker answers at once (initialize too, once one has succeeded): a cancel never finds them
# in flight.
ANSWERED_AT_ONCE = frozenset(("initialize", "cancel"))


@mutant(
    "answers-cancel-late",
    "answers cancel only once the request it names has ended (and lets that request run on)",
    "cancel.answered-at-once",
)
class AnswersCancelLate(Relay):
    """A cancel of a request in flight is held back, and answered `{cancelled: true}` right after that
    request's terminal reply.

    The named request is not interrupted: it finishes on its own (its result is a legal outcome of a
    cancel), and only then is the cancel answered.
    """

    def __init__(self) -> None:
        super().__init__()
        self._late: dict[str, list[str]] = {}
        """The id of a request in flight -> the ids of the cancels held back until it ends."""

    def from_host(self, line: bytes) -> None:
        frame = frame_of(line)
        if frame is not None and self._cancels_in_flight(frame):
            self._late.setdefault(frame["data"]["id"], []).append(frame["id"])
            return
        self.to_worker(line)

    def _cancels_in_flight(self, frame: Frame) -> bool:
        """Whether the worker would take `frame` for a valid cancel of a request in flight."""
        data = frame.get("data")
        if self.initialized is None or not isinstance(data, dict) or set(data) != {"id"}:
            return False
        target = self.requests.get(data["id"]) if isinstance(data["id"], str) else None
        return (
            frame.get("method") == "cancel"
            and isinstance(frame.get("id"), str)
            and set(frame) <= REQUEST_KEYS
            and frame.get("token") == self.initialized[0]
            and target is not None
            and target[0] not in ANSWERED_AT_ONCE
        )

    def from_worker(self, line: bytes) -> None:
        self.to_host(line)
        frame = frame_of(line)
        if self.answered is not None and frame is not None:
            for cancel in self._late.pop(frame["id"], []):
                # The worker never saw the cancel, so its reply is the relay's to match.
                self.requests.pop(cancel, None)
                self.answer({"id": cancel, "data": {"cancelled": True}})


@mutant(
    "two-terminal-replies",
    "answers a cancelled request with `cancelled` at once and again when its handler ends",
    "cancel.one-terminal-reply",
)
class TwoTerminalReplies(ReplyRewriter):
    """When the worker answers a cancel `{cancelled: true}`, the request it names also gets an extra
    `cancelled` reply at once, before its own terminal reply."""

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method == "cancel" and reply.get("data") == {"cancelled": True}:
            return [reply, {"id": data["id"], "error": ErrorCode.CANCELLED.value}]
        return [reply]


@mutant(
    "replies-before-draining",
    "answers a cancelled request `cancelled` at once, while its handler is still draining",
    "cancel.drained-before-reply",
)
class RepliesBeforeDraining(ReplyRewriter):
    """When the worker answers a cancel `{cancelled: true}`, the request it names gets its terminal reply
    `cancelled` at once, and the worker's own one, sent once its handler has drained, is dropped: exactly one
    terminal reply, but before the drain (a cancelled exec_command's command still ends after it)."""

    def __init__(self) -> None:
        super().__init__()
        self._answered_early: set[str] = set()

    def rewrite(self, reply: Frame, method: str, data: Frame) -> list[Frame]:
        if method == "cancel" and reply.get("data") == {"cancelled": True}:
            self._answered_early.add(data["id"])
            return [reply, {"id": data["id"], "error": ErrorCode.CANCELLED.value}]
        if reply["id"] in self._answered_early:
            self._answered_early.discard(reply["id"])
            return []
        return [reply]


def _always_cancelled(result: Frame, request: Frame) -> None:
    result["cancelled"] = True


mutant(
    "cancels-unknown-ids",
    "answers cancelled: true for a cancel of an unknown or finished request",
    "cancel.unknown-id",
)(rewrite_results("cancel", _always_cancelled, doc="Every successful cancel reply says `cancelled: true`."))
