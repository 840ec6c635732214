"""Mutants of `agents.history.read`: pages of the conversation, each message once."""

from __future__ import annotations

from wuu.generated.models import HistoryMessage
from wuu.host.userhost.authority import Composer

from . import mutant
from .harness import Message, ProviderProxy, rewrite_plugin_params, with_provider

HISTORY_MAX_PAGE = 100
"""The largest `page_size` of `agents.history.read` (its schema's maximum)."""


class Overlapping(ProviderProxy):
    """A history page below a sequence starts with the message at that sequence."""

    async def history(self, session_id: str, before_seq: int | None, limit: int) -> list[HistoryMessage]:
        found: list[HistoryMessage] = await self.inner.history(
            session_id, None if before_seq is None else before_seq + 1, limit
        )
        return found


@mutant(
    "history-pages-overlap",
    "repeats the oldest message of a history page at the top of the next one",
    "history.read-pages",
)
def history_pages_overlap() -> Composer:
    """The provider reads each history page from one sequence higher than `before_seq` says."""
    return with_provider(Overlapping)


def _largest_page(params: Message, request: Message) -> None:
    params.setdefault("page_size", HISTORY_MAX_PAGE)


mutant(
    "history-default-page-100",
    "reads 100 messages per history page when page_size is omitted, instead of 50",
    "history.default-page-size",
)(
    rewrite_plugin_params(
        "agents.history.read",
        _largest_page,
        doc="An `agents.history.read` call without `page_size` asks for the largest page (100) by the time the "
        "host sees it.",
    )
)
