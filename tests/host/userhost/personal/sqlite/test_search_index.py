"""The search index trails the history by at most `search_index.LAG` messages: the message that completes a
batch indexes the batch in its own transaction and moves the mark; only the main conversation's visible text
is indexed; a search finds a message whether or not the index holds it yet."""

from __future__ import annotations

import pytest

from tests.host.userhost.personal.sqlite.conftest import Store
from wuu.host.userhost.personal.sqlite import history, search_index, tasks
from wuu.host.userhost.personal.sqlite.messages import append_message

LAG = 4


@pytest.fixture(autouse=True)
def short_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_index, "LAG", LAG)


def indexed(store: Store, term: str) -> list[int]:
    """The row ids the index holds for a term."""
    rows = store.connection.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid", (f'"{term}"',)
    )
    return [row[0] for row in rows]


def found(store: Store, query: str) -> list[int]:
    """The main conversation's sequences a search finds, newest first."""
    hits = history.search(store.connection, store.main, store.main, query, None, None, None, 50)
    return [hit.message_seq for hit in hits]


def test_a_batch_is_indexed_by_the_message_that_completes_it(store: Store) -> None:
    for number in range(1, LAG):
        append_message(store.connection, store.main, "user", f"Garden note {number}", store.clock())
    assert indexed(store, "garden") == [] and search_index.indexed_through(store.connection) == 0
    assert found(store, "GARDEN") == [3, 2, 1]
    append_message(store.connection, store.main, "assistant", "garden reply", store.clock())
    assert indexed(store, "garden") == [1, 2, 3, 4] and search_index.indexed_through(store.connection) == 4
    append_message(store.connection, store.main, "user", "garden again", store.clock())
    assert found(store, "garden") == [5, 4, 3, 2, 1]  # the newest from the rows past the mark, then the index


def test_only_the_main_conversations_visible_text_is_indexed(store: Store) -> None:
    task = tasks.create(store.connection, "dispatch-1", None, store.clock())
    append_message(
        store.connection, store.main, "assistant", "hidden garden plan", store.clock(), "reasoning"
    )
    append_message(store.connection, store.main, "assistant", "garden tool call", store.clock(), "tool")
    append_message(store.connection, task.session_id, "user", "garden task", store.clock())
    append_message(store.connection, store.main, "user", "the garden itself", store.clock())
    assert search_index.indexed_through(store.connection) == 4  # every saved message counts toward a batch
    (visible,) = store.connection.execute(
        "SELECT id FROM messages WHERE session_id = ? AND kind = 'text'", (store.main,)
    ).fetchone()
    assert indexed(store, "garden") == [visible]
    assert found(store, "garden") == [3]
