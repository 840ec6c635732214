"""Cases of `agents.history.search`: matches newest first as the history shows them, pages chained by page
tokens, time bounds applied before pagination, and page tokens bound to their search.

The expected matches are computed from the conversation as `agents.history.read` shows it (the host's agent
may echo the inputs in its answers, and those answers are searched too)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from wuu.generated.catalog import USERHOST_HISTORY_SEARCH_DEFAULT_PAGE_SIZE

from ..conversation import conversation, everything, seqs_of
from ..session import HostSession
from ..suite import USERHOST

SEARCH = "agents.history.search"
DEFAULT_PAGE = USERHOST_HISTORY_SEARCH_DEFAULT_PAGE_SIZE
WORD = "kumquat"


async def search(host: HostSession, session_id: str, query: str, **options: Any) -> dict[str, Any]:
    """One `AgentsHistorySearchResult` (`options` are further params: page_size, page_token, bounds)."""
    return await host.call_ok(SEARCH, {"session_id": session_id, "query": query, **options})


async def all_pages(
    host: HostSession, session_id: str, query: str, **options: Any
) -> list[list[dict[str, Any]]]:
    """Every page of a search, following `next_page_token` until it is null."""
    pages: list[list[dict[str, Any]]] = []
    token: str | None = None
    while True:
        extra = dict(options) if token is None else {**options, "page_token": token}
        page = await search(host, session_id, query, **extra)
        pages.append(page["messages"])
        host.expect(len(pages) <= 100, f"the pages of {query!r} never end (next_page_token never null)")
        token = page["next_page_token"]
        if token is None:
            return pages


def containing(messages: list[dict[str, Any]], query: str) -> list[dict[str, Any]]:
    """The messages whose text holds `query` as a substring, ignoring case (Unicode case folding)."""
    return [m for m in messages if query.casefold() in m["text"].casefold()]


def instant(stamp: str) -> datetime:
    """An RFC 3339 timestamp as an aware datetime (to the microsecond)."""
    head, dot, rest = stamp.upper().partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        rest = rest[:digits][:6].ljust(6, "0") + rest[digits:]
        stamp = f"{head}.{rest}"
    return datetime.fromisoformat(stamp.upper())


def pages_of(pages: list[list[dict[str, Any]]]) -> list[list[int]]:
    return [seqs_of(page) for page in pages]


@USERHOST.case("search.matches")
async def matches(host: HostSession) -> None:
    """A query that is a whole word of visible user or assistant text finds exactly the messages holding that
    word, newest first, and a query no text holds finds nothing. (Beyond that, how text matches is the
    provider's: the words here are chosen so that any tokenization or case folding agrees.)"""
    texts = ["the kumquat grove", "nothing to see", "a xylophone plays", "kumquat and xylophone"]
    session_id, _ = await conversation(host, texts)
    whole = await everything(host, session_id)
    for query in ("kumquat", "xylophone", "grove"):
        expected = [m for m in whole if re.search(rf"\b{query}\b", m["text"])]
        found = (await search(host, session_id, query, page_size=100))["messages"]
        host.expect(
            seqs_of(found) == seqs_of(expected),
            f"the search for {query!r} found the messages {seqs_of(found)}, not {seqs_of(expected)}",
        )
    missing = (await search(host, session_id, "zebraquince"))["messages"]
    host.expect(missing == [], f"a query no text holds found the messages {seqs_of(missing)}")


@USERHOST.case("search.pagination", "search.newest-first")
async def pagination(host: HostSession) -> None:
    """Without page_size a page holds 20 matches; following next_page_token (page_size default and 7) gives
    every match exactly once, newest first, each as agents.history.read shows it, with a null token on the
    last page and no other message."""
    texts: list[str] = []
    for number in range(DEFAULT_PAGE + 2):
        texts.append(f"{WORD} number {number}")
        if number % 5 == 0:
            texts.append(f"plain text {number}")
    session_id, _ = await conversation(host, texts)
    whole = await everything(host, session_id)
    expected = containing(whole, WORD)
    for options in ({}, {"page_size": 7}):
        size = options.get("page_size", DEFAULT_PAGE)
        pages = await all_pages(host, session_id, WORD, **options)
        host.expect(
            all(len(page) == size for page in pages[:-1]) and len(pages[-1]) <= size,
            f"the pages of page_size {size} are not full up to the last: {pages_of(pages)}",
        )
        flat = [m for page in pages for m in page]
        host.expect(
            seqs_of(flat) == seqs_of(expected),
            f"the pages of page_size {size} hold {pages_of(pages)}, not each match once newest first: "
            f"{seqs_of(expected)}",
        )
        host.expect(flat == expected, "a match differs from the message agents.history.read shows")


@USERHOST.case("search.bounds")
async def bounds(host: HostSession) -> None:
    """time_min is inclusive and time_max exclusive, and the bounds apply before pagination: pages of one
    match within the bounds are full and hold exactly the matches within them."""
    session_id, _ = await conversation(host, [f"{WORD} bounded {number}" for number in range(5)])
    expected = containing(await everything(host, session_id), WORD)
    host.expect(len(expected) >= 5, f"the history holds {len(expected)} messages with {WORD!r}, not 5")
    top, bottom = expected[0]["created_at"], expected[3]["created_at"]
    host.expect(top is not None and bottom is not None, "a message sent in this case has no created_at")
    low, high = instant(bottom), instant(top)
    host.expect(low < high, f"messages sent one after the other share the timestamp {top}")
    # A message without a timestamp never matches a bounded search.
    dated = [(m, instant(m["created_at"])) for m in expected if m["created_at"] is not None]
    cases: list[tuple[dict[str, str], list[dict[str, Any]]]] = [
        ({"time_min": bottom, "time_max": top}, [m for m, at in dated if low <= at < high]),
        ({"time_min": bottom}, [m for m, at in dated if low <= at]),
        ({"time_max": top}, [m for m, at in dated if at < high]),
    ]
    for window, within in cases:
        pages = await all_pages(host, session_id, WORD, page_size=1, **window)
        host.expect(
            pages_of(pages) == [[m["message_seq"]] for m in within] or (within == [] and pages == [[]]),
            f"the search within {window} gave the pages {pages_of(pages)}, not one each of {seqs_of(within)}",
        )


@USERHOST.case("search.token-bound")
async def token_bound(host: HostSession) -> None:
    """A page token is valid only with its own query and bounds: reused with another query, with bounds added,
    or replaced by a string no search made, it gets invalid_params; with its own search it gives the next
    page."""
    session_id, _ = await conversation(host, [f"{WORD} token {number}" for number in range(3)])
    expected = containing(await everything(host, session_id), WORD)
    first = await search(host, session_id, WORD, page_size=1)
    token = first["next_page_token"]
    host.expect(token is not None, f"the first of {len(expected)} matches has a null next_page_token")
    stamp = expected[-1]["created_at"] or "1970-01-01T00:00:00Z"
    for query, extra in [
        (WORD[:-1], {}),
        (WORD.upper(), {}),
        (WORD, {"time_min": stamp}),
    ]:
        params = {"session_id": session_id, "query": query, "page_size": 1, "page_token": token, **extra}
        await host.call_error(SEARCH, params, "invalid_params")
    forged = {"session_id": session_id, "query": WORD, "page_size": 1, "page_token": "not-a-page-token"}
    await host.call_error(SEARCH, forged, "invalid_params")
    second = await search(host, session_id, WORD, page_size=1, page_token=token)
    host.expect(
        seqs_of(second["messages"]) == seqs_of(expected[1:2]),
        f"the token's own search gave {seqs_of(second['messages'])}, not the second match",
    )
