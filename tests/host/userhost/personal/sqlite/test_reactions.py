"""The reaction rules of the store (`sqlite/reactions.py`), on a bare connection: who may react to what,
compare-and-set on the revision, idempotency by request ID within the retained receipts, and the changes
the agent has not yet seen."""

from __future__ import annotations

import pytest

from wuu.generated.catalog import USERHOST_MAX_REACTION_REQUEST_RECEIPTS
from wuu.generated.models import ReactionActor
from wuu.host.userhost.personal.provider import ReactionWrite, Submission
from wuu.host.userhost.personal.refusals import NotReactionTarget, RequestIdConflict, StaleRevision
from wuu.host.userhost.personal.sqlite import admission, reactions, tasks
from wuu.host.userhost.personal.sqlite.messages import append_message

from .conftest import Store

OWNER, AGENT = ReactionActor.OWNER, ReactionActor.AGENT


@pytest.fixture
def said(store: Store) -> Store:
    """The main conversation holds a user input (1), an assistant reply (2) and a hidden reasoning record (3)."""
    user_input = Submission(store.main, "wuu.personal", "in-1", "req-1", "hi", "0" * 64, (), "binding")
    admission.admit(store.connection, store.main, user_input, store.clock())
    append_message(store.connection, store.main, "assistant", "hello", store.clock(), "text")
    append_message(store.connection, store.main, "assistant", "thinking", store.clock(), "reasoning")
    return store


def react(
    store: Store,
    actor: ReactionActor,
    seq: int,
    emoji: str | None,
    expected: int | None,
    request_id: str,
) -> ReactionWrite:
    return reactions.react(
        store.connection, store.main, actor, store.main, seq, emoji, expected, request_id, store.clock()
    )


def test_the_owner_reacts_to_replies_and_the_agent_to_user_inputs_only(said: Store) -> None:
    assert react(said, OWNER, 2, "👍", 0, "r-1").state.owner == "👍"
    assert react(said, AGENT, 1, "👀", None, "r-2").state.agent == "👀"
    for actor, seq in [(OWNER, 1), (AGENT, 2), (OWNER, 3), (OWNER, 4)]:
        with pytest.raises(
            NotReactionTarget, match=f"^message {seq} is not a reaction target for the {actor.value}$"
        ):
            react(said, actor, seq, "👍", None, f"r-{actor.value}-{seq}")
    assert said.count("reaction_receipts") == 2


def test_a_reply_in_a_task_session_is_no_reaction_target(said: Store) -> None:
    task = tasks.create(said.connection, "dispatch-1", None, said.clock())
    append_message(said.connection, task.session_id, "assistant", "task says", said.clock(), "text")
    row = said.connection.execute(
        "SELECT seq FROM messages WHERE session_id = ?", (task.session_id,)
    ).fetchone()
    with pytest.raises(NotReactionTarget):
        reactions.react(
            said.connection, said.main, OWNER, task.session_id, row[0], "👍", None, "r-1", said.clock()
        )


def test_a_write_on_a_stale_revision_is_refused_and_the_agent_writes_on_the_current_one(said: Store) -> None:
    assert react(said, OWNER, 2, "👍", 0, "r-1").state.revision == 1
    with pytest.raises(StaleRevision, match=r"^message 2 is at reaction revision 1, not 0$"):
        react(said, OWNER, 2, "❤️", 0, "r-2")
    cleared = react(said, OWNER, 2, None, 1, "r-3")
    assert (cleared.state.revision, cleared.state.owner) == (2, None)
    written = react(said, AGENT, 1, "👀", None, "r-4")
    assert (written.receipt.expected_revision, written.receipt.revision) == (0, 1)


def test_the_same_request_twice_is_written_once_and_another_reaction_under_it_conflicts(said: Store) -> None:
    first = react(said, OWNER, 2, "👍", 0, "r-1")
    again = react(said, OWNER, 2, "👍", 0, "r-1")
    assert (first.replayed, again.replayed) == (False, True)
    assert (again.receipt, again.state) == (first.receipt, first.state)
    # A replay answers the current state, not a second write: a stale expected revision does not matter.
    react(said, OWNER, 2, "❤️", 1, "r-2")
    assert react(said, OWNER, 2, "👍", 0, "r-1").state.owner == "❤️"
    with pytest.raises(RequestIdConflict, match=r"^request r-1 was already used for another reaction$"):
        react(said, OWNER, 2, "🎉", 2, "r-1")


def test_only_the_newest_request_receipts_of_a_message_are_retained(said: Store) -> None:
    kept = USERHOST_MAX_REACTION_REQUEST_RECEIPTS
    for number in range(kept + 1):
        react(said, AGENT, 1, "👀" if number % 2 else None, None, f"r-{number}")
    assert said.count("reaction_receipts") == kept
    # The oldest receipt is gone: its request ID is a new write now, no longer a replay.
    assert react(said, AGENT, 1, None, None, "r-0").replayed is False


def test_the_agent_sees_the_owners_changes_coalesced_until_it_has_seen_them(said: Store) -> None:
    react(said, OWNER, 2, "👍", 0, "r-1")
    react(said, OWNER, 2, "❤️", 1, "r-2")
    react(said, AGENT, 1, "👀", None, "r-3")  # the agent's own reactions are no change to show it
    changes, mark = reactions.changes(said.connection, said.main, 24)
    assert [(change.message_seq, change.owner, change.excerpt) for change in changes] == [(2, "❤️", "hello")]
    reactions.changes_seen(said.connection, said.main, mark)
    assert reactions.changes(said.connection, said.main, 24) == ([], mark)
    reactions.changes_seen(said.connection, said.main, 0)  # the mark never moves back
    assert reactions.changes(said.connection, said.main, 24) == ([], mark)
