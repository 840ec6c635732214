"""Mutants of `agents.history.search`: what matches, pagination, time bounds, bound page tokens."""

from __future__ import annotations

from typing import Any

from wuu.generated.models import HistoryMessage, HistoryRole, UserHostErrorCode
from wuu.generated.wire import WireModel
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.plugins import PluginCall, PluginHandler

from . import mutant
from .harness import ProviderProxy, rewrite_params, with_provider, wrap_method


class AssistantOnly(ProviderProxy):
    """Search leaves out the user's messages."""

    async def search(
        self,
        session_id: str,
        query: str,
        time_min_us: int | None,
        time_max_us: int | None,
        before_seq: int | None,
        limit: int,
    ) -> list[HistoryMessage]:
        found: list[HistoryMessage] = await self.inner.search(
            session_id, query, time_min_us, time_max_us, before_seq, limit
        )
        return [message for message in found if message.role is not HistoryRole.USER]


@mutant(
    "search-skips-user-messages",
    "finds a query only in the assistant's messages, never in the user's",
    "search.matches",
)
def search_skips_user_messages() -> Composer:
    """The provider's search leaves out every match that is a user message."""
    return with_provider(AssistantOnly)


class Overlapping(ProviderProxy):
    """A search page after the first starts with the previous page's last match."""

    async def search(
        self,
        session_id: str,
        query: str,
        time_min_us: int | None,
        time_max_us: int | None,
        before_seq: int | None,
        limit: int,
    ) -> list[HistoryMessage]:
        before = None if before_seq is None else before_seq + 1
        found: list[HistoryMessage] = await self.inner.search(
            session_id, query, time_min_us, time_max_us, before, limit
        )
        return found


@mutant(
    "search-pages-overlap",
    "repeats the last match of a search page at the top of the next one",
    "search.pagination",
)
def search_pages_overlap() -> Composer:
    """The provider searches each page after the first from one sequence higher than its token says."""
    return with_provider(Overlapping)


@mutant(
    "search-time-bounds-ignored",
    "ignores the time bounds of agents.history.search",
    "search.bounds",
)
def search_time_bounds_ignored() -> Composer:
    """The `agents.history.search` handler runs every search without `time_min` and `time_max`."""
    return rewrite_params("agents.history.search", lambda params: {"time_min": None, "time_max": None})


@mutant(
    "search-token-unbound",
    "answers a page token that does not fit its search with the search's first page",
    "search.token-bound",
)
def search_token_unbound() -> Composer:
    """When the `agents.history.search` handler refuses a page token (another query or bounds, or none it
    issued), it runs the search again without one."""

    def make(handler: PluginHandler) -> PluginHandler:
        async def search(params: Any, call: PluginCall) -> WireModel:
            try:
                return await handler(params, call)
            except UserHostError as error:
                if error.code is not UserHostErrorCode.INVALID_PARAMS or error.field != "params.page_token":
                    raise
                return await handler(params.model_copy(update={"page_token": None}), call)

        return search

    return wrap_method("agents.history.search", make)


class OldestFirst(ProviderProxy):
    """Search answers its matches oldest first."""

    async def search(
        self,
        session_id: str,
        query: str,
        time_min_us: int | None,
        time_max_us: int | None,
        before_seq: int | None,
        limit: int,
    ) -> list[HistoryMessage]:
        found: list[HistoryMessage] = await self.inner.search(
            session_id, query, time_min_us, time_max_us, before_seq, limit
        )
        return list(reversed(found))


@mutant(
    "search-oldest-first",
    "answers the matches of a search oldest first",
    "search.newest-first",
)
def search_oldest_first() -> Composer:
    """The provider's search answers its matches in ascending message_seq."""
    return with_provider(OldestFirst)
