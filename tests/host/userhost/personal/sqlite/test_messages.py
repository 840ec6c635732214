"""How the store saves a message (`sqlite/messages.py`): the next sequence of its session, and a time that
never runs backwards within the session, whatever the clock does."""

from __future__ import annotations

from datetime import timedelta

from wuu.host.userhost.personal.sqlite import sessions
from wuu.host.userhost.personal.sqlite.messages import append_message
from wuu.host.userhost.personal.stamps import micros, rfc3339

from .conftest import Store


def saved(store: Store, session_id: str) -> list[tuple[int, str, int]]:
    return store.connection.execute(
        "SELECT seq, created_at, created_us FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
    ).fetchall()


def test_a_message_takes_its_sessions_next_sequence(store: Store) -> None:
    store.connection.execute("INSERT INTO sessions VALUES ('ses_task', 'task', '2026-03-01T12:00:00Z')")
    assert append_message(store.connection, store.main, "user", "one", store.clock()) == 1
    assert append_message(store.connection, "ses_task", "user", "task one", store.clock()) == 1
    assert append_message(store.connection, store.main, "assistant", "two", store.clock()) == 2
    assert [row[0] for row in saved(store, store.main)] == [1, 2]


def test_a_clock_that_steps_back_saves_the_previous_messages_time(store: Store) -> None:
    later = store.clock()
    append_message(store.connection, store.main, "user", "first", later)
    append_message(store.connection, store.main, "user", "from the past", later - timedelta(seconds=5))
    append_message(store.connection, store.main, "user", "on time", later + timedelta(seconds=1))
    first, stepped_back, on_time = saved(store, store.main)
    assert stepped_back[1:] == first[1:] == (rfc3339(later), micros(later))
    assert on_time[1:] == (rfc3339(later + timedelta(seconds=1)), micros(later) + 1_000_000)


def test_a_session_that_is_not_in_the_store_gets_no_message(store: Store) -> None:
    try:
        append_message(store.connection, "ses_other", "user", "lost", store.clock())
    except Exception as error:  # the foreign key: an IntegrityError
        assert "FOREIGN KEY" in str(error)
    else:
        raise AssertionError("a message was saved for a session the store does not have")
    assert store.count("messages") == 0
    assert not sessions.exists(store.connection, "ses_other")
