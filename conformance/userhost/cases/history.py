"""Cases of `agents.history.read`: pages newest first, chained by `before_seq`, stable while newer messages
arrive."""

from __future__ import annotations

import itertools
from typing import Any

from wuu.generated.models import AgentsHistoryReadParams

from ..conversation import conversation, everything, exchange, read_page, seqs_of
from ..personal import HISTORY_PAGE, open_main
from ..session import HostSession
from ..suite import USERHOST

DEFAULT_PAGE = AgentsHistoryReadParams.model_fields["page_size"].default


def expect_newest_first(host: HostSession, messages: list[dict[str, Any]], what: str) -> None:
    seqs = seqs_of(messages)
    host.expect(all(a > b for a, b in itertools.pairwise(seqs)), f"{what} is not newest first: {seqs}")


async def walk(host: HostSession, session_id: str, page_size: int | None) -> list[list[dict[str, Any]]]:
    """Every page from the newest, following `next_before_seq` until it is null."""
    pages: list[list[dict[str, Any]]] = []
    before: int | None = None
    while True:
        page = await read_page(host, session_id, before_seq=before, page_size=page_size)
        messages = page["messages"]
        pages.append(messages)
        host.expect(len(pages) <= HISTORY_PAGE, "the history pages never end (next_before_seq never null)")
        before = page["next_before_seq"]
        if before is None:
            return pages
        host.expect(
            messages and before == messages[-1]["message_seq"],
            f"next_before_seq {before} is not the sequence of the page's oldest message: {seqs_of(messages)}",
        )


@USERHOST.case("history.read-pages")
async def read_pages(host: HostSession) -> None:
    """agents.history.read pages newest first: each page holds the newest `page_size` messages below
    `before_seq`, `next_before_seq` is the page's oldest sequence (null on the last page), the pages together
    are the whole conversation once each, a sequence plus one opens the history at that message, and an
    older page stays the same after a newer message arrives."""
    texts = ["history one", "history two", "history three", "history four"]
    session_id, user_seqs = await conversation(host, texts)
    whole = await everything(host, session_id)
    expect_newest_first(host, whole, "the history")
    users = [m for m in whole if m["role"] == "user"]
    host.expect(
        [(m["message_seq"], m["text"]) for m in reversed(users)] == list(zip(user_seqs, texts, strict=True)),
        f"the history's user messages are not the inputs sent, at their receipts' sequences: {users}",
    )
    for size in (1, 3):
        pages = await walk(host, session_id, size)
        host.expect(
            all(len(page) == size for page in pages[:-1]) and 0 < len(pages[-1]) <= size,
            f"pages of page_size {size} are not full up to the last: {[seqs_of(p) for p in pages]}",
        )
        flat = [m for page in pages for m in page]
        host.expect(
            flat == whole,
            f"pages of page_size {size} are not the whole history once, newest first: "
            f"{[seqs_of(p) for p in pages]} for {seqs_of(whole)}",
        )
    middle = user_seqs[1]
    opened = (await read_page(host, session_id, before_seq=middle + 1, page_size=2))["messages"]
    host.expect(
        opened == [m for m in whole if m["message_seq"] <= middle][:2],
        f"before_seq {middle + 1} does not open the history at message {middle}: {seqs_of(opened)}",
    )
    older = await read_page(host, session_id, before_seq=middle + 1, page_size=3)
    newest = user_seqs[-1]
    await exchange(host, session_id, "history five")
    later = await read_page(host, session_id, before_seq=middle + 1, page_size=3)
    host.expect(later == older, f"the page before {middle + 1} changed when a newer message arrived")
    top = (await read_page(host, session_id, page_size=1))["messages"]
    host.expect(
        top and top[0]["message_seq"] > newest, "the newest page does not start with the newest message"
    )


@USERHOST.case("history.default-page-size")
async def default_page_size(host: HostSession) -> None:
    """agents.history.read without `page_size` returns 50 messages of a longer conversation."""
    session_id = await open_main(host)
    count = 0
    while len(await everything(host, session_id)) <= DEFAULT_PAGE:
        count += 1
        host.expect(count <= DEFAULT_PAGE + 1, "the history does not grow as inputs are sent")
        await exchange(host, session_id, f"filler {count}")
    whole = await everything(host, session_id)
    page = await read_page(host, session_id)
    host.expect(
        page["messages"] == whole[:DEFAULT_PAGE],
        f"the default page holds {len(page['messages'])} messages, not the newest {DEFAULT_PAGE}",
    )
    host.expect(
        page["next_before_seq"] == whole[DEFAULT_PAGE - 1]["message_seq"],
        f"the default page's next_before_seq is {page['next_before_seq']}",
    )
