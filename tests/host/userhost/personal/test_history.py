"""`agents.history.read` and `agents.history.search` of the Personal plugin
(spec/schema/userhost/personal.schema.json `AgentsHistoryReadParams`, `AgentsHistorySearchParams`,
`HistoryMessage`).

Covered, over the real Unix socket on the real SQLite file:
- history.read: newest first, `page_size` (default 50), `next_before_seq` chained through every page until
  null, older pages unchanged while new messages arrive, `before_seq` one past a search hit opening the
  history at that message, attachment metadata only (exactly the `AttachmentMetadata` keys, no path, no
  bytes), `reaction_eligible` true on assistant messages and false on user messages;
- visible text only: an agent of this file saves hidden `reasoning` and `tool` records besides its reply;
  neither method ever returns them, and history pages skip their sequences;
- search: Unicode case-insensitive substring matching (É/é, Ω/ω, Д/д, ß/SS), a query with double quotes
  or FTS syntax taken literally, 1-2 character queries (too short for the trigram index), newest first,
  `page_token` pagination with no duplicates or gaps (default page 20), tokens refused (invalid_params
  `params.page_token`) with another query or other bounds or when garbage, forged (the unsigned cursor
  of 2^63 of the attack of issue 22, a signed token's MAC on another cursor, random bytes), still valid while
  new messages arrive and after a restart (the space's key in `state/page-tokens.key`, 0600; a damaged key
  stops the start);
- time bounds on the conftest's manual clock: `time_min` inclusive, `time_max` exclusive exactly at the
  boundaries (offsets, lowercase designators, sub-microsecond fractions), applied before pagination, and a
  bad timestamp refused naming the field;
- legacy messages without a timestamp (nulled in the store's file while the host runs): found by an
  unbounded search with `created_at` null, excluded by any bound;
- another session than the main one: `not_found` for both methods;
- every client integer that reaches SQLite (`before_seq`, `message_seq`, `message_seqs`,
  `expected_revision`, `offset`) is refused from 2^63 naming the field, and answered at 2^63 - 1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import stat
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.host.userhost.personal.conftest import (
    Attach,
    Inputs,
    Space,
    StartSpace,
    attachment,
    call,
    error,
    result,
    send,
    silent,
)
from wuu.generated.models import UserHostErrorCode as Code
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import Agent, AgentStep, StoreError
from wuu.host.userhost.personal.sqlite import search_index

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MESSAGE_KEYS = {"message_seq", "role", "text", "created_at", "reaction_eligible", "reactions", "attachments"}
METADATA_KEYS = {"attachment_id", "filename", "media_type", "size", "sha256"}

Open = Callable[..., Awaitable[tuple[Space, UserHostClient]]]


@pytest.fixture
async def open_space(start_space: StartSpace, attach: Attach) -> Open:
    """Starts a Personal host (keyword arguments go to `personal()`) and opens an initialized client of it.
    The clock is held (it does not advance by itself): a test sets `space.clock.now` for known times."""

    async def start(**options: Any) -> tuple[Space, UserHostClient]:
        space = await start_space(**options)
        space.clock.step = timedelta(0)
        return space, await attach(space)

    return start


@pytest.fixture(params=[1, 3, search_index.LAG], ids=["indexed", "split", "scanned"])
def index_lag(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """How far the search index trails the history: every message indexed as it is saved, a few at a time
    (a search reads the index and the newer messages past its mark), or none in a short history."""
    monkeypatch.setattr(search_index, "LAG", request.param)
    lag: int = request.param
    return lag


def stamp(moment: datetime) -> str:
    """A timestamp as the store writes it (UTC, microseconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def say(
    space: Space,
    client: UserHostClient,
    inputs: Inputs,
    text: str,
    at: datetime | None = None,
    attachments: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Send one input (at `at` on the held clock) and wait for the agent; its receipt."""
    if at is not None:
        space.clock.now = at
    receipt: dict[str, Any] = result(await send(client, space.main, inputs(text, attachments)))["receipt"]
    await space.idle()
    return receipt


async def read(client: UserHostClient, session_id: str, **params: Any) -> dict[str, Any]:
    return result(await call(client, "agents.history.read", {"session_id": session_id, **params}))


async def search(client: UserHostClient, session_id: str, query: str, **params: Any) -> dict[str, Any]:
    return result(
        await call(client, "agents.history.search", {"session_id": session_id, "query": query, **params})
    )


async def found(client: UserHostClient, session_id: str, query: str, **params: Any) -> list[int]:
    """The sequences of one search page."""
    page = await search(client, session_id, query, **params)
    return [message["message_seq"] for message in page["messages"]]


async def all_pages(
    client: UserHostClient, session_id: str, query: str, page_token: str | None = None, **params: Any
) -> list[list[dict[str, Any]]]:
    """Every page of a search (from `page_token`, else the first page), following `next_page_token` until
    it is null."""
    pages = []
    token = page_token
    while True:
        extra = {} if token is None else {"page_token": token}
        page = await search(client, session_id, query, **params, **extra)
        pages.append(page["messages"])
        token = page["next_page_token"]
        if token is None:
            return pages
        assert isinstance(token, str) and token


async def history_pages(client: UserHostClient, session_id: str, **params: Any) -> list[dict[str, Any]]:
    """Every page of the history, following `next_before_seq` until it is null."""
    pages = []
    before: int | None = None
    while True:
        extra = {} if before is None else {"before_seq": before}
        page = await read(client, session_id, **params, **extra)
        pages.append(page)
        before = page["next_before_seq"]
        if before is None:
            return pages
        assert before == page["messages"][-1]["message_seq"]


def seqs(messages: Sequence[dict[str, Any]]) -> list[int]:
    return [message["message_seq"] for message in messages]


def erase_timestamps(space: Space, message_seqs: Sequence[int]) -> None:
    """Make these main-conversation messages legacy ones (no timestamp), directly in the store's file while
    the host runs (its WAL readers see the change)."""
    connection = sqlite3.connect(space.database, timeout=10)
    try:
        marks = ", ".join("?" for _ in message_seqs)
        changed = connection.execute(
            f"UPDATE messages SET created_at = NULL, created_us = NULL WHERE session_id = ? AND seq IN ({marks})",
            (space.main, *message_seqs),
        ).rowcount
        connection.commit()
    finally:
        connection.close()
    assert changed == len(message_seqs)


# --- history.read ------------------------------------------------------------------------------------


async def test_history_is_newest_first_with_exact_messages(open_space: Open, inputs: Inputs) -> None:
    """Each message as the spec shapes it; user messages are not reaction targets, assistant ones are."""
    space, client = await open_space()  # the stand-in agent answers `Received: <text>`
    for index in range(3):
        await say(space, client, inputs, f"question {index}", at=T0 + timedelta(minutes=index))
    page = await read(client, space.main)
    expected = []
    for index in reversed(range(3)):
        at = stamp(T0 + timedelta(minutes=index))
        for seq, role, text in (
            (2 * index + 2, "assistant", f"Received: question {index}"),
            (2 * index + 1, "user", f"question {index}"),
        ):
            expected.append(
                {
                    "message_seq": seq,
                    "role": role,
                    "text": text,
                    "created_at": at,
                    "reaction_eligible": role == "assistant",
                    "reactions": {"revision": 0},
                    "attachments": [],
                }
            )
    assert page == {"messages": expected, "next_before_seq": None}


async def test_pages_chain_by_next_before_seq_until_null(open_space: Open, inputs: Inputs) -> None:
    """`page_size` pages, each `next_before_seq` the oldest sequence of its page, null on the last one
    (also when the last page is exactly full)."""
    space, client = await open_space()
    for index in range(7):
        await say(space, client, inputs, f"line {index}")
    every = seqs((await read(client, space.main))["messages"])
    assert every == list(range(14, 0, -1))
    pages = await history_pages(client, space.main, page_size=5)
    assert [seqs(page["messages"]) for page in pages] == [
        [14, 13, 12, 11, 10],
        [9, 8, 7, 6, 5],
        [4, 3, 2, 1],
    ]
    assert [page["next_before_seq"] for page in pages] == [10, 5, None]
    exact = await history_pages(client, space.main, page_size=7)
    assert [seqs(page["messages"]) for page in exact] == [list(range(14, 7, -1)), list(range(7, 0, -1))]
    assert [page["next_before_seq"] for page in exact] == [8, None]
    single = await history_pages(client, space.main, page_size=1)
    assert [seqs(page["messages"]) for page in single] == [[seq] for seq in range(14, 0, -1)]
    assert await read(client, space.main, before_seq=1) == {"messages": [], "next_before_seq": None}
    assert seqs((await read(client, space.main, before_seq=2**63 - 1))["messages"]) == every


async def test_the_default_page_holds_50_messages(open_space: Open, inputs: Inputs) -> None:
    space, client = await open_space(agent=silent())
    for index in range(52):
        await say(space, client, inputs, f"m{index}")
    first = await read(client, space.main)
    assert seqs(first["messages"]) == list(range(52, 2, -1))
    assert first["next_before_seq"] == 3
    rest = await read(client, space.main, before_seq=3)
    assert rest == {"messages": rest["messages"], "next_before_seq": None}
    assert seqs(rest["messages"]) == [2, 1]
    assert seqs((await read(client, space.main, page_size=100))["messages"]) == list(range(52, 0, -1))


async def test_older_pages_stay_the_same_while_new_messages_arrive(open_space: Open, inputs: Inputs) -> None:
    space, client = await open_space()
    for index in range(6):
        await say(space, client, inputs, f"before {index}")
    reference = await history_pages(client, space.main, page_size=4)
    assert [page["next_before_seq"] for page in reference] == [9, 5, None]
    walked = [await read(client, space.main, page_size=4)]
    assert walked[0] == reference[0]
    while walked[-1]["next_before_seq"] is not None:
        await say(space, client, inputs, f"arriving {len(walked)}")  # two new messages per page read
        walked.append(await read(client, space.main, page_size=4, before_seq=walked[-1]["next_before_seq"]))
    assert walked == reference
    newest = await read(client, space.main, page_size=4)
    assert seqs(newest["messages"]) == [16, 15, 14, 13]


async def test_a_search_hit_opens_the_history_at_that_message(
    open_space: Open, inputs: Inputs, index_lag: int
) -> None:
    """`before_seq` one past a sequence search returned: the page starts with that very message."""
    space, client = await open_space()
    for index in range(10):
        await say(space, client, inputs, "the needle" if index == 3 else f"hay {index}")
    (user_hit, *_) = reversed((await search(client, space.main, "needle"))["messages"])
    assert user_hit["message_seq"] == 7 and user_hit["role"] == "user"
    opened = await read(client, space.main, before_seq=user_hit["message_seq"] + 1, page_size=3)
    assert opened["messages"][0] == user_hit
    assert seqs(opened["messages"]) == [7, 6, 5]
    assert opened["next_before_seq"] == 5
    answer = (await search(client, space.main, "Received: the needle"))["messages"]
    assert seqs(answer) == [8]
    assert (await read(client, space.main, before_seq=9, page_size=1))["messages"] == answer


async def test_history_shows_attachment_metadata_only(open_space: Open, inputs: Inputs) -> None:
    """The metadata the receipt bound, in submitted order, with exactly the `AttachmentMetadata` keys: no
    path and no bytes, in history as in search."""
    space, client = await open_space(agent=silent())
    first, second = b"first attachment bytes \x00\x01", b"%PDF-1.7 second"
    receipt = await say(
        space,
        client,
        inputs,
        "two files",
        attachments=[attachment(first, "a.txt"), attachment(second, "b.pdf", "application/pdf")],
    )
    (message,) = (await read(client, space.main))["messages"]
    assert set(message) == MESSAGE_KEYS
    assert [set(metadata) for metadata in message["attachments"]] == [METADATA_KEYS, METADATA_KEYS]
    assert message["attachments"] == receipt["attachments"]
    assert [(m["filename"], m["media_type"], m["size"]) for m in message["attachments"]] == [
        ("a.txt", "text/plain", len(first)),
        ("b.pdf", "application/pdf", len(second)),
    ]
    (hit,) = (await search(client, space.main, "two files"))["messages"]
    assert hit == message
    stored = space.rows("SELECT file FROM attachments ORDER BY position")
    wire = json.dumps([message, hit])
    for (path,) in stored:
        assert path not in wire and Path(path).name in wire  # its ID, never its path
    assert "attachments/" not in wire and str(space.home) not in wire


# --- visible text only -------------------------------------------------------------------------------


class RecordingAgent:
    """An agent that saves a hidden reasoning record and a tool record before its visible reply."""

    async def step(self, step: AgentStep) -> None:
        await step.assemble(step.history)
        if step.pending:
            newest = step.pending[-1]
            await step.record("reasoning", f"zq secret reasoning about {newest.text}")
            await step.record("tool", f"zq tool call lookup({newest.text})")
            await step.reply(f"Visible answer to {newest.text}")


def recording() -> Agent:
    return RecordingAgent()


async def test_hidden_records_are_never_read_or_searched(
    open_space: Open, inputs: Inputs, index_lag: int
) -> None:
    space, client = await open_space(agent=recording())
    await say(space, client, inputs, "alpha")
    await say(space, client, inputs, "beta")
    # The records are in the store: user 1, reasoning 2, tool 3, reply 4, user 5, reasoning 6, tool 7, reply 8.
    assert space.rows("SELECT seq, kind FROM messages WHERE session_id = ? ORDER BY seq", space.main) == [
        (1, "text"),
        (2, "reasoning"),
        (3, "tool"),
        (4, "text"),
        (5, "text"),
        (6, "reasoning"),
        (7, "tool"),
        (8, "text"),
    ]
    page = await read(client, space.main)
    assert [(m["message_seq"], m["text"]) for m in page["messages"]] == [
        (8, "Visible answer to beta"),
        (5, "beta"),
        (4, "Visible answer to alpha"),
        (1, "alpha"),
    ]
    assert page["next_before_seq"] is None
    pages = await history_pages(client, space.main, page_size=1)
    assert [seqs(p["messages"]) for p in pages] == [[8], [5], [4], [1]]
    assert [p["next_before_seq"] for p in pages] == [8, 5, 4, None]
    assert seqs((await read(client, space.main, before_seq=8))["messages"]) == [5, 4, 1]
    assert seqs((await read(client, space.main, before_seq=4))["messages"]) == [1]
    for query in ("secret", "SECRET REASONING", "lookup(", "zq", "z", "tool call", "q s"):
        assert await search(client, space.main, query) == {"messages": [], "next_page_token": None}, query
    # A query that both hidden and visible messages hold finds only the visible ones.
    assert await found(client, space.main, "alpha") == [4, 1]
    assert await found(client, space.main, "be") == [8, 5]


# --- search: matching --------------------------------------------------------------------------------


async def test_search_ignores_case_across_scripts(open_space: Open, inputs: Inputs, index_lag: int) -> None:
    """Substring matching with Unicode case folding, for long (indexed) and short (1-2 character) queries."""
    space, client = await open_space(agent=silent())
    for text in ("l'école est fermée", "ΩΜΕΓΑ point", "Дом у реки", "nothing here", "ÉCOLE normale"):  # noqa: RUF001
        await say(space, client, inputs, text)
    cases = {
        "ÉCOLE": [5, 1],
        "école": [5, 1],
        "Cole": [5, 1],  # a substring inside a word
        "ωμεγα": [2],
        "Ωμ": [2],
        "ω": [2],
        "дом у": [3],  # noqa: RUF001
        "ДОМ": [3],
        "д": [3],
        "É": [5, 1],
        "é": [5, 1],
        "ée": [1],
        "FERMÉE": [1],
        "ING HE": [4],
        "xyz": [],
        "q": [],
    }
    for query, expected in cases.items():
        assert await found(client, space.main, query) == expected, query


async def test_sharp_s_folds_alike_for_short_and_long_queries(
    open_space: Open, inputs: Inputs, index_lag: int
) -> None:
    """Unicode case folding maps ß to ss: "Straße" and "STRASSE" match the same queries, whatever the
    query's length (the 1-2 character path and the indexed path must agree)."""
    space, client = await open_space(agent=silent())
    await say(space, client, inputs, "Straße")
    await say(space, client, inputs, "STRASSE")
    queries = ("ß", "ss", "aße", "ASS", "straße", "STRASSE")
    matches = {query: await found(client, space.main, query) for query in queries}
    assert matches == {query: [2, 1] for query in queries}


async def test_queries_with_quotes_and_fts_syntax_are_literal(
    open_space: Open, inputs: Inputs, index_lag: int
) -> None:
    space, client = await open_space(agent=silent())
    for text in (
        'she said "hi" twice',  # 1
        '"quoted"',  # 2
        "no quotes at all",  # 3
        'an empty "" pair',  # 4
        "c++ (x) AND -y* OR z: NEAR(a b)",  # 5
        "hi there",  # 6
    ):
        await say(space, client, inputs, text)
    cases = {
        '"hi"': [1],
        '"': [4, 2, 1],
        '""': [4],
        'said "': [1],
        '"quoted"': [2],
        '"hi" OR there': [],
        "hi": [6, 1],
        "HI THERE": [6],
        "c++ (x) AND -y*": [5],
        "OR z: NEAR(": [5],
        "*": [5],
        "(": [5],
        "NOT": [],
    }
    for query, expected in cases.items():
        assert await found(client, space.main, query) == expected, query


# --- search: pages -----------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["NOTE", "Ot"], ids=["indexed", "short"])
async def test_search_pages_cover_every_match_once_newest_first(
    open_space: Open, inputs: Inputs, query: str, index_lag: int
) -> None:
    space, client = await open_space(agent=silent())
    matching = []
    for index in range(31):
        if index % 4 == 3:
            await say(space, client, inputs, f"something else {index}")
        else:
            await say(space, client, inputs, f"a Note {index}")
            matching.append(index + 1)
    newest_first = matching[::-1]
    assert len(newest_first) == 24
    pages = await all_pages(client, space.main, query, page_size=5)
    assert [len(page) for page in pages] == [5, 5, 5, 5, 4]
    assert [seq for page in pages for seq in seqs(page)] == newest_first
    exact = await all_pages(client, space.main, query, page_size=8)  # the last page is exactly full
    assert [seqs(page) for page in exact] == [newest_first[0:8], newest_first[8:16], newest_first[16:24]]
    default = await all_pages(client, space.main, query)  # 20 a page
    assert [seqs(page) for page in default] == [newest_first[:20], newest_first[20:]]
    whole = await search(client, space.main, query, page_size=100)
    assert seqs(whole["messages"]) == newest_first and whole["next_page_token"] is None
    # The page size is not part of what a token is valid for.
    first = await search(client, space.main, query, page_size=5)
    second = await search(client, space.main, query, page_size=7, page_token=first["next_page_token"])
    assert seqs(second["messages"]) == newest_first[5:12]


async def test_a_token_is_valid_only_for_its_own_search(open_space: Open, inputs: Inputs) -> None:
    space, client = await open_space(agent=silent())
    for index in range(6):
        await say(space, client, inputs, f"token test {index}", at=T0 + timedelta(minutes=index))
    bounds = {"time_min": "2026-03-01T12:00:00Z", "time_max": "2026-03-01T13:00:00Z"}
    unbounded = await search(client, space.main, "token", page_size=2)
    bounded = await search(client, space.main, "token", page_size=2, **bounds)
    assert seqs(unbounded["messages"]) == seqs(bounded["messages"]) == [6, 5]
    token, bounded_token = unbounded["next_page_token"], bounded["next_page_token"]
    misuses: list[tuple[str, dict[str, Any]]] = [
        ("TOKEN", {"page_token": token}),  # another query (even one that matches the same)
        ("test", {"page_token": token}),
        ("token", {"page_token": token, "time_min": bounds["time_min"]}),  # other bounds
        ("token", {"page_token": token, "time_max": bounds["time_max"]}),
        ("token", {"page_token": token, **bounds}),
        ("token", {"page_token": bounded_token}),  # a bounded token without its bounds
        ("token", {"page_token": bounded_token, "time_min": bounds["time_min"]}),
        ("token", {"page_token": bounded_token, **bounds, "time_max": "2026-03-01T14:00:00Z"}),
        ("token", {"page_token": "garbage"}),
        ("token", {"page_token": "!!!!"}),
        ("token", {"page_token": "e30"}),  # `{}` in base64
        ("token", {"page_token": "WzFd"}),  # `[1]`
        ("token", {"page_token": "é"}),
        ("token", {"page_token": token[:-2]}),
        ("token", {"page_token": token + "x"}),
    ]
    for query, params in misuses:
        response = await call(
            client, "agents.history.search", {"session_id": space.main, "query": query, **params}
        )
        error(response, Code.INVALID_PARAMS, "params.page_token")
    assert await found(client, space.main, "token", page_size=2, page_token=token) == [4, 3]
    assert await found(client, space.main, "token", page_size=2, page_token=bounded_token, **bounds) == [4, 3]


def unsigned_token(before: Any, scope: str) -> str:
    """A page token in the unsigned format the host issued before issue 22: base64url of
    `{"before": <seq>, "scope": <24 hex of the search's digest>}`."""
    raw = json.dumps({"before": before, "scope": scope}).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def forged_cursors(token: str, *cursors: int) -> list[str]:
    """The token with its first 8 bytes (the cursor) replaced, its MAC kept."""
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return [
        base64.urlsafe_b64encode(cursor.to_bytes(8, "big") + raw[8:]).decode("ascii").rstrip("=")
        for cursor in cursors
    ]


async def test_a_forged_token_is_invalid_params_never_internal(open_space: Open, inputs: Inputs) -> None:
    """The attack: an unsigned cursor of 2^63, past SQLite's integers. Every token the host did not issue
    for this search is `invalid_params` naming `params.page_token`, and the host keeps serving."""
    space, client = await open_space(agent=silent())
    for index in range(4):
        await say(space, client, inputs, f"forge {index}")
    first = await search(client, space.main, "forge", page_size=2)
    token = first["next_page_token"]
    other = (await search(client, space.main, "forg", page_size=2))["next_page_token"]
    old_scope = hashlib.sha256(
        json.dumps([space.main, "forge", None, None], separators=(",", ":")).encode()
    ).hexdigest()[:24]
    forgeries = [
        unsigned_token(2**63, old_scope),  # the attack's token
        unsigned_token(2**63 - 1, old_scope),
        unsigned_token(3, old_scope),
        unsigned_token(-(2**63) - 1, old_scope),
        *forged_cursors(token, 2**63, 2**64 - 1, 0, 2, 4),  # the real MAC on another cursor
        other,  # a real token of another query
        *(base64.urlsafe_b64encode(os.urandom(size)).decode().rstrip("=") for size in (40, 40, 1, 64, 700)),
        token[:-1] + ("A" if token[-1] != "A" else "B"),
        token + "=",
        "+" + token[1:],  # another spelling of the same bytes (the standard alphabet)
    ]
    for forged in forgeries:
        assert forged != token
        response = await call(
            client,
            "agents.history.search",
            {"session_id": space.main, "query": "forge", "page_size": 2, "page_token": forged},
        )
        error(response, Code.INVALID_PARAMS, "params.page_token")
    assert await found(client, space.main, "forge", page_size=2, page_token=token) == [2, 1]


async def test_a_token_survives_a_restart_under_the_spaces_key(
    start_space: StartSpace, attach: Attach, inputs: Inputs
) -> None:
    first = await start_space(agent=silent())
    client = await attach(first)
    for index in range(5):
        await say(first, client, inputs, f"lasting {index}")
    token = (await search(client, first.main, "lasting", page_size=2))["next_page_token"]
    key = first.state / "page-tokens.key"
    secret = key.read_bytes()
    assert len(secret) == 32 and stat.S_IMODE(key.stat().st_mode) == 0o600
    await first.host.close()

    again = await start_space(agent=silent())
    client = await attach(again)
    assert await found(client, again.main, "lasting", page_size=2, page_token=token) == [3, 2]
    assert key.read_bytes() == secret


async def test_a_damaged_key_stops_the_start_naming_the_file(start_space: StartSpace, home: Path) -> None:
    space = await start_space(agent=silent())
    key = space.state / "page-tokens.key"
    await space.host.close()
    key.write_bytes(b"short")
    with pytest.raises(StoreError, match=r"page-tokens\.key holds 5 bytes"):
        await start_space(agent=silent())
    key.unlink()  # the next start makes a new key
    again = await start_space(agent=silent())
    assert len(key.read_bytes()) == 32 and again.main == space.main


async def test_a_token_stays_valid_while_new_messages_arrive(open_space: Open, inputs: Inputs) -> None:
    space, client = await open_space(agent=silent())
    for index in range(9):
        await say(space, client, inputs, f"river {index}")
    first = await search(client, space.main, "river", page_size=4)
    assert seqs(first["messages"]) == [9, 8, 7, 6]
    reference = await all_pages(client, space.main, "river", page_size=4, page_token=first["next_page_token"])
    for index in range(5):
        await say(space, client, inputs, f"RIVER arriving {index}")
    again = await all_pages(client, space.main, "river", page_size=4, page_token=first["next_page_token"])
    assert again == reference
    assert [seqs(page) for page in again] == [[5, 4, 3, 2], [1]]
    assert await found(client, space.main, "river", page_size=4) == [14, 13, 12, 11]


# --- search: time bounds -----------------------------------------------------------------------------


async def minutes_apart(space: Space, client: UserHostClient, inputs: Inputs, count: int, text: str) -> None:
    """`count` inputs, the N-th (1-based) at 12:(N-1):00Z."""
    for index in range(count):
        await say(space, client, inputs, f"{text} {index}", at=T0 + timedelta(minutes=index))


async def test_time_min_is_inclusive_and_time_max_exclusive(
    open_space: Open, inputs: Inputs, index_lag: int
) -> None:
    space, client = await open_space(agent=silent())
    await minutes_apart(space, client, inputs, 10, "event")  # seq N at 12:(N-1):00
    (fourth,) = [m for m in (await read(client, space.main))["messages"] if m["message_seq"] == 4]
    assert fourth["created_at"] == "2026-03-01T12:03:00.000000Z"
    cases: list[tuple[dict[str, str], list[int]]] = [
        ({"time_min": "2026-03-01T12:03:00Z", "time_max": "2026-03-01T12:07:00Z"}, [7, 6, 5, 4]),
        ({"time_min": "2026-03-01T12:03:00.000001Z", "time_max": "2026-03-01T12:06:59.999999Z"}, [7, 6, 5]),
        (
            {"time_min": "2026-03-01T12:02:59.999999Z", "time_max": "2026-03-01T12:07:00.000001Z"},
            [8, 7, 6, 5, 4],
        ),
        ({"time_min": "2026-03-01T13:03:00+01:00", "time_max": "2026-03-01T07:07:00-05:00"}, [7, 6, 5, 4]),
        ({"time_min": "2026-03-01t12:03:00z", "time_max": "2026-03-01t12:07:00.000z"}, [7, 6, 5, 4]),
        ({"time_min": "2026-03-01T12:09:00Z"}, [10]),
        ({"time_min": "2026-03-01T12:09:00.000001Z"}, []),
        ({"time_max": "2026-03-01T12:00:00.000001Z"}, [1]),
        ({"time_max": "2026-03-01T12:00:00Z"}, []),
        ({"time_min": "2026-03-01T12:05:00Z", "time_max": "2026-03-01T12:05:00Z"}, []),
        ({"time_min": "2026-03-01T12:06:00Z", "time_max": "2026-03-01T12:05:00Z"}, []),
        ({"time_min": "1970-01-01T00:00:00Z", "time_max": "9999-12-31T23:59:59Z"}, list(range(10, 0, -1))),
        ({"time_max": "1970-01-01T00:00:00Z"}, []),
    ]
    for bounds, expected in cases:
        assert await found(client, space.main, "event", **bounds) == expected, bounds
        assert await found(client, space.main, "ev", **bounds) == expected, bounds  # the short-query path


async def test_sub_microsecond_bounds_are_not_rounded_across_a_message(
    open_space: Open, inputs: Inputs
) -> None:
    """RFC 3339 allows any number of fraction digits: a message saved at 12:03:00.000000 is before
    12:03:00.0000001, so a `time_min` there excludes it and a `time_max` there includes it."""
    space, client = await open_space(agent=silent())
    await minutes_apart(space, client, inputs, 5, "event")  # seq 4 at 12:03:00.000000
    below = await found(client, space.main, "event", time_max="2026-03-01T12:03:00.0000001Z")
    above = await found(client, space.main, "event", time_min="2026-03-01T12:03:00.0000001Z")
    assert (below, above) == ([4, 3, 2, 1], [5])


async def test_bounds_at_the_ends_of_the_calendar_are_served(open_space: Open, inputs: Inputs) -> None:
    """Valid RFC 3339 bounds whose UTC instant falls outside years 1-9999 (an offset pushes them past the
    end) are bounds like any other, not a host failure."""
    space, client = await open_space(agent=silent())
    await minutes_apart(space, client, inputs, 3, "event")
    outcomes: dict[str, Any] = {}
    for bounds in (
        {"time_max": "9999-12-31T23:59:59-23:59"},
        {"time_min": "0001-01-01T00:00:00+01:00"},
        {"time_min": "0001-01-01T00:00:00+01:00", "time_max": "9999-12-31T23:59:59-23:59"},
    ):
        response = await call(
            client, "agents.history.search", {"session_id": space.main, "query": "event", **bounds}
        )
        outcomes[json.dumps(bounds)] = (
            seqs(response["result"]["result"]["messages"])
            if "result" in response
            else response["error"]["data"]
        )
    assert outcomes == {key: [3, 2, 1] for key in outcomes}


async def test_bounds_apply_before_pagination(open_space: Open, inputs: Inputs, index_lag: int) -> None:
    """Pages are full of in-range matches: out-of-range and non-matching messages take no room."""
    space, client = await open_space(agent=silent())
    for index in range(30):
        text = "quiet" if index % 3 == 1 else f"entry {index}"
        await say(space, client, inputs, text, at=T0 + timedelta(minutes=index))
    # In [12:05, 12:25): seqs 6..25, of which the `entry` ones (index % 3 != 1).
    expected = [index + 1 for index in range(24, 4, -1) if index % 3 != 1]
    assert len(expected) == 14
    bounds = {"time_min": "2026-03-01T12:05:00Z", "time_max": "2026-03-01T12:25:00Z"}
    pages = await all_pages(client, space.main, "ENTRY", page_size=5, **bounds)
    assert [seqs(page) for page in pages] == [expected[0:5], expected[5:10], expected[10:14]]
    short = await all_pages(client, space.main, "En", page_size=5, **bounds)
    assert [seqs(page) for page in short] == [expected[0:5], expected[5:10], expected[10:14]]
    for page in pages:
        for message in page:
            assert bounds["time_min"] <= message["created_at"].replace(".000000Z", "Z") < bounds["time_max"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time_min", "2026-02-30T00:00:00Z"),  # no such day
        ("time_max", "2026-13-01T00:00:00Z"),
        ("time_min", "2026-03-01T25:00:00Z"),
        ("time_max", "2026-03-01 12:00:00Z"),
        ("time_min", "yesterday"),
        ("time_max", "2026-03-01T12:00:00"),  # no offset
        ("time_min", ""),
    ],
)
async def test_a_bad_timestamp_is_invalid_params_naming_the_field(
    open_space: Open, inputs: Inputs, field: str, value: str
) -> None:
    space, client = await open_space(agent=silent())
    await say(space, client, inputs, "an event")
    response = await call(
        client, "agents.history.search", {"session_id": space.main, "query": "event", field: value}
    )
    error(response, Code.INVALID_PARAMS, f"params.{field}")


async def test_messages_without_a_timestamp_match_only_unbounded_searches(
    open_space: Open, inputs: Inputs, index_lag: int
) -> None:
    space, client = await open_space(agent=silent())
    await minutes_apart(space, client, inputs, 6, "legacy")
    erase_timestamps(space, [2, 4, 6])
    unbounded = (await search(client, space.main, "LEGACY"))["messages"]
    assert [(m["message_seq"], m["created_at"]) for m in unbounded] == [
        (6, None),
        (5, "2026-03-01T12:04:00.000000Z"),
        (4, None),
        (3, "2026-03-01T12:02:00.000000Z"),
        (2, None),
        (1, "2026-03-01T12:00:00.000000Z"),
    ]
    assert [
        (m["message_seq"], m["created_at"]) for m in (await search(client, space.main, "Le"))["messages"]
    ] == [(m["message_seq"], m["created_at"]) for m in unbounded]
    history = (await read(client, space.main))["messages"]
    assert [m["created_at"] for m in history] == [m["created_at"] for m in unbounded]
    for bounds in (
        {"time_min": "1970-01-01T00:00:00Z"},
        {"time_max": "9999-12-31T23:59:59Z"},
        {"time_min": "2000-01-01T00:00:00Z", "time_max": "2100-01-01T00:00:00Z"},
    ):
        assert await found(client, space.main, "legacy", **bounds) == [5, 3, 1], bounds
        assert await found(client, space.main, "le", **bounds) == [5, 3, 1], bounds
        pages = await all_pages(client, space.main, "legacy", page_size=1, **bounds)
        assert [seqs(page) for page in pages] == [[5], [3], [1]], bounds
    # A message saved after a legacy one gets its own time.
    await say(space, client, inputs, "legacy after", at=T0 + timedelta(minutes=30))
    (newest,) = (await read(client, space.main, page_size=1))["messages"]
    assert (newest["message_seq"], newest["created_at"]) == (7, "2026-03-01T12:30:00.000000Z")
    assert await found(client, space.main, "legacy", time_min="2026-03-01T12:04:00Z") == [7, 5]


# --- sessions and params -----------------------------------------------------------------------------


async def test_another_session_is_not_found(open_space: Open, inputs: Inputs) -> None:
    """Any session but the main conversation, a task session of the same space included."""
    space, client = await open_space(agent=silent())
    await say(space, client, inputs, "main only")
    assert space.plugin.tasks is not None
    task = await space.plugin.tasks.create("task-req-1")
    assert task.session_id != space.main
    for session_id in ("ses_main_nope", task.session_id, space.main.upper(), space.main + "x"):
        error(await call(client, "agents.history.read", {"session_id": session_id}), Code.NOT_FOUND)
        error(
            await call(client, "agents.history.search", {"session_id": session_id, "query": "main"}),
            Code.NOT_FOUND,
        )
    assert await found(client, space.main, "main") == [1]


REACT = {"message_seq": 1, "emoji": "👍", "expected_revision": 0, "request_id": "react-1"}


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("agents.history.read", {"page_size": 0}, "params.page_size"),
        ("agents.history.read", {"page_size": 101}, "params.page_size"),
        ("agents.history.read", {"before_seq": 0}, "params.before_seq"),
        ("agents.history.read", {"before_seq": "5"}, "params.before_seq"),
        ("agents.history.search", {"query": ""}, "params.query"),
        ("agents.history.search", {"query": "x" * 1025}, "params.query"),
        ("agents.history.search", {"query": "x", "page_size": 101}, "params.page_size"),
        ("agents.history.search", {"query": "x", "page_token": ""}, "params.page_token"),
        ("agents.history.search", {}, "params.query"),
        # Every client integer that reaches SQLite stops at its largest integer, 2^63 - 1.
        ("agents.history.read", {"before_seq": 2**63}, "params.before_seq"),
        ("agents.react", {**REACT, "message_seq": 2**63}, "params.message_seq"),
        ("agents.react", {**REACT, "expected_revision": 2**63}, "params.expected_revision"),
        ("agents.reactions", {"message_seqs": [1, 2**63]}, "params.message_seqs.1"),
        ("host.session.attachment.read", {"attachment_id": "att_1", "offset": 2**63}, "params.offset"),
    ],
)
async def test_params_outside_the_schema_are_invalid(
    open_space: Open, method: str, params: dict[str, Any], field: str
) -> None:
    space, client = await open_space(agent=silent())
    error(await call(client, method, {"session_id": space.main, **params}), Code.INVALID_PARAMS, field)


async def test_the_largest_integers_reach_the_store_and_are_answered(
    open_space: Open, inputs: Inputs
) -> None:
    space, client = await open_space(agent=silent())
    await say(space, client, inputs, "the only one")
    top = 2**63 - 1
    assert seqs((await read(client, space.main, before_seq=top))["messages"]) == [1]
    for params in ({**REACT, "message_seq": top}, {**REACT, "message_seq": 1, "expected_revision": top}):
        response = await call(client, "agents.react", {"session_id": space.main, **params})
        error(response, Code.NOT_REACTION_TARGET)
    reactions = await call(client, "agents.reactions", {"session_id": space.main, "message_seqs": [top]})
    assert result(reactions)["messages"] == []
