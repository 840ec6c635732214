"""The admission rules of the store (`sqlite/admission.py`), on a bare connection: idempotency by business
request ID, the binding a retry must match, client input IDs unique per session, and the read stage."""

from __future__ import annotations

from dataclasses import replace

import pytest

from wuu.host.userhost.personal.provider import Submission
from wuu.host.userhost.personal.refusals import (
    ClientInputIdTaken,
    MainSessionMissing,
    RequestIdConflict,
    SessionNotFound,
)
from wuu.host.userhost.personal.sqlite import admission
from wuu.host.userhost.services import Caller

from .conftest import Store


def submission(store: Store, request_id: str, client_input_id: str, text: str = "hello") -> Submission:
    """An input to the main conversation whose binding digest stands for its request ID, client input ID
    and text."""
    return Submission(
        session_id=store.main,
        plugin_id="wuu.personal",
        client_input_id=client_input_id,
        request_id=request_id,
        text=text,
        text_sha256="0" * 64,
        attachments=(),
        binding_digest=f"{request_id}/{client_input_id}/{text}",
    )


def test_the_same_request_twice_is_admitted_once_and_replayed(store: Store) -> None:
    first = admission.admit(store.connection, store.main, submission(store, "req-1", "in-1"), store.clock())
    again = admission.admit(store.connection, store.main, submission(store, "req-1", "in-1"), store.clock())
    assert (first.replayed, again.replayed) == (False, True)
    assert again.receipt == first.receipt
    assert (first.receipt.history_seq, first.receipt.accepted, first.receipt.read_at) == (1, True, None)
    assert (store.count("messages"), store.count("input_receipts")) == (1, 1)


def test_a_request_id_bound_to_another_input_is_a_conflict_and_writes_nothing(store: Store) -> None:
    admission.admit(store.connection, store.main, submission(store, "req-1", "in-1"), store.clock())
    with pytest.raises(RequestIdConflict, match=r"^request req-1 was already used for another input$"):
        admission.admit(
            store.connection, store.main, submission(store, "req-1", "in-1", "bye"), store.clock()
        )
    assert (store.count("messages"), store.count("input_receipts")) == (1, 1)


def test_a_client_input_id_names_one_input_of_its_session(store: Store) -> None:
    admission.admit(store.connection, store.main, submission(store, "req-1", "in-1"), store.clock())
    with pytest.raises(ClientInputIdTaken, match=r"^client input in-1 already names another input"):
        admission.admit(store.connection, store.main, submission(store, "req-2", "in-1"), store.clock())
    assert store.count("input_receipts") == 1


def test_an_unknown_session_admits_nothing(store: Store) -> None:
    other = replace(submission(store, "req-1", "in-1"), session_id="ses_other")
    with pytest.raises(SessionNotFound):
        admission.admit(store.connection, store.main, other, store.clock())
    assert store.count("messages") == 0


def test_a_main_conversation_missing_from_the_store_admits_nothing(store: Store) -> None:
    store.connection.execute("PRAGMA foreign_keys = OFF")
    store.connection.execute("DELETE FROM sessions WHERE session_id = ?", (store.main,))
    store.connection.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(MainSessionMissing, match=f"^the main conversation {store.main} is missing"):
        admission.admit(store.connection, store.main, submission(store, "req-1", "in-1"), store.clock())
    assert (store.count("messages"), store.count("input_receipts")) == (0, 0)


def test_each_receipt_names_the_sequence_its_message_took(store: Store) -> None:
    store.connection.execute(
        "INSERT INTO messages (session_id, seq, role, text) VALUES (?, 1, 'assistant', 'hi')", (store.main,)
    )
    first = admission.admit(store.connection, store.main, submission(store, "req-1", "in-1"), store.clock())
    second = admission.admit(
        store.connection, store.main, submission(store, "req-2", "in-2", "bye"), store.clock()
    )
    assert (first.receipt.history_seq, second.receipt.history_seq) == (2, 3)
    assert store.connection.execute(
        "SELECT seq, text FROM messages WHERE role = 'user' ORDER BY seq"
    ).fetchall() == [(2, "hello"), (3, "bye")]


def test_read_at_is_recorded_once_and_only_for_the_exact_pair(store: Store) -> None:
    admission.admit(store.connection, store.main, submission(store, "req-1", "in-1"), store.clock())
    admission.admit(store.connection, store.main, submission(store, "req-2", "in-2"), store.clock())
    assert [m.client_input_id for m in admission.pending_inputs(store.connection, store.main, 10)] == [
        "in-1",
        "in-2",
    ]
    # `in-2` is message 2: the pair (in-2, 1) names no receipt.
    assert admission.record_read(store.connection, store.main, [("in-1", 1), ("in-2", 1)], store.clock()) == [
        "in-1"
    ]
    assert admission.record_read(store.connection, store.main, [("in-1", 1)], store.clock()) == []
    [read, unread] = admission.receipts(store.connection, store.main, store.main, ["in-1", "in-2", "in-3"])
    assert (read.revision, read.read_at is not None, unread.read_at) == (2, True, None)
    assert [m.client_input_id for m in admission.pending_inputs(store.connection, store.main, 10)] == ["in-2"]


def test_the_transport_that_admitted_an_input_is_kept_with_it(store: Store) -> None:
    by_socket = replace(submission(store, "req-1", "in-1"), admitted_by=Caller("unix"))
    admission.admit(store.connection, store.main, by_socket, store.clock())
    admission.admit(store.connection, store.main, submission(store, "req-2", "in-2"), store.clock())
    assert admission.admitted_by(store.connection, store.main, "in-1") == Caller("unix")
    assert admission.admitted_by(store.connection, store.main, "in-2") is None
    assert admission.admitted_by(store.connection, store.main, "in-unknown") is None
