"""The space and session rules of the store (`sqlite/sessions.py`), on a bare connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from wuu.host.userhost.personal.refusals import MainSessionMissing, SessionNotFound
from wuu.host.userhost.personal.sqlite import sessions
from wuu.host.userhost.personal.sqlite.sessions import StoreError

from .conftest import Store


def test_a_store_records_its_space_once_and_refuses_another(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "personal.sqlite"
    sessions.create_or_check_space(store.connection, path, "local", "personal", store.clock())
    assert sessions.main_session_id(store.connection) == store.main
    assert store.count("sessions") == 1
    with pytest.raises(StoreError, match="belongs to user space 'local', domain 'personal', not 'other'"):
        sessions.create_or_check_space(store.connection, path, "other", "personal", store.clock())


def test_a_missing_main_conversation_is_told_apart_from_an_unknown_session(store: Store) -> None:
    sessions.require(store.connection, store.main, store.main)
    with pytest.raises(SessionNotFound, match=r"^no session ses_other$"):
        sessions.require(store.connection, "ses_other", store.main)
    store.connection.execute("DELETE FROM sessions")
    with pytest.raises(MainSessionMissing, match=f"the main conversation {store.main} is missing"):
        sessions.require(store.connection, store.main, store.main)
