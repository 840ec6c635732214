"""Cases of `agents.react` and `agents.reactions`: the owner's emoji on an assistant message, revision-checked,
idempotent by request ID with a bounded set of retained receipts, only on reaction targets, and announced to
the other clients by `plugin/client/invalidate`."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from wuu.generated.catalog import USERHOST_MAX_REACTION_REQUEST_RECEIPTS

from ..connection import Connection, Message
from ..conversation import POLL, everything, exchange
from ..personal import open_main
from ..session import PERSONAL, HostSession
from ..suite import USERHOST

REACT = "agents.react"
REACTIONS = "agents.reactions"
INVALIDATE = "plugin/client/invalidate"
EMOJI = ("👍", "🎉")
UNTOUCHED = {"revision": 0}


async def target(host: HostSession) -> tuple[str, int, int]:
    """The main session, a user message and the assistant message that answered it: (session, user, reply)."""
    session_id = await open_main(host)
    user_seq, reply = await exchange(host, session_id, "please react to the answer")
    return session_id, user_seq, int(reply["message_seq"])


def react_params(
    session_id: str, seq: int, emoji: str | None, expected: int, request_id: str
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "message_seq": seq,
        "emoji": emoji,
        "expected_revision": expected,
        "request_id": request_id,
    }


async def react(
    host: HostSession, session_id: str, seq: int, emoji: str | None, expected: int, request_id: str
) -> dict[str, Any]:
    """The `AgentsReactResult` of a write that must succeed."""
    return await host.call_ok(REACT, react_params(session_id, seq, emoji, expected, request_id))


async def react_error(
    host: HostSession,
    session_id: str,
    seq: int,
    emoji: str | None,
    expected: int,
    request_id: str,
    code: str,
) -> Message:
    """The error response of a write that must fail with `code`."""
    params = react_params(session_id, seq, emoji, expected, request_id)
    return await host.call_error(REACT, params, code)


async def snapshots(host: HostSession, session_id: str, seqs: list[int]) -> list[dict[str, Any]]:
    """The `MessageReactionSnapshot`s `agents.reactions` returns for `seqs`."""
    result = await host.call_ok(REACTIONS, {"session_id": session_id, "message_seqs": seqs})
    host.expect(
        result["session_id"] == session_id, f"agents.reactions names the session {result['session_id']}"
    )
    found: list[dict[str, Any]] = result["messages"]
    return found


async def state(host: HostSession, session_id: str, seq: int) -> dict[str, Any]:
    """The current `ReactionState` of one message, as `agents.reactions` rereads it."""
    found = await snapshots(host, session_id, [seq])
    host.expect([s["message_seq"] for s in found] == [seq], f"agents.reactions of [{seq}] answered {found}")
    reactions: dict[str, Any] = found[0]["reactions"]
    return reactions


def expect_written(
    host: HostSession,
    result: dict[str, Any],
    session_id: str,
    seq: int,
    emoji: str | None,
    expected: int,
    request_id: str,
) -> None:
    """Fail unless `result` is the new (not replayed) write of `emoji` over revision `expected`."""
    now = {"revision": expected + 1} if emoji is None else {"owner": emoji, "revision": expected + 1}
    what = f"agents.react of {emoji!r} over revision {expected}"
    host.expect(
        (result["session_id"], result["message_seq"]) == (session_id, seq),
        f"{what} names {result['session_id']}/{result['message_seq']}",
    )
    host.expect(result["reactions"] == now, f"{what} left the reactions {result['reactions']}, not {now}")
    host.expect(result["replayed"] is False, f"{what} answered replayed true for a new request ID")
    receipt = dict(result["receipt"])
    receipt.pop("applied_at")
    wanted = {
        "request_id": request_id,
        "session_id": session_id,
        "message_seq": seq,
        "actor": "owner",
        "emoji": emoji,
        "expected_revision": expected,
        "revision": expected + 1,
    }
    host.expect(receipt == wanted, f"{what} has the receipt {result['receipt']}")


@USERHOST.case("reactions.set-and-read")
async def set_and_read(host: HostSession) -> None:
    """An assistant message starts at revision 0 without reactions; agents.react sets the owner's emoji,
    replaces it and clears it with null, each at the next revision with its receipt, and agents.reactions
    and agents.history.read reread exactly that state."""
    session_id, _, seq = await target(host)
    host.expect(
        await state(host, session_id, seq) == UNTOUCHED,
        f"the new assistant message {seq} does not start at {UNTOUCHED}",
    )
    for expected, emoji in enumerate([EMOJI[0], EMOJI[1], None]):
        request_id = f"set-{expected}"
        written = await react(host, session_id, seq, emoji, expected, request_id)
        expect_written(host, written, session_id, seq, emoji, expected, request_id)
        now = await state(host, session_id, seq)
        host.expect(
            now == written["reactions"], f"agents.reactions rereads {now}, not {written['reactions']}"
        )
        listed = [m for m in await everything(host, session_id) if m["message_seq"] == seq]
        host.expect(
            listed and listed[0]["reactions"] == now,
            f"agents.history.read shows message {seq} with {listed[0]['reactions'] if listed else 'nothing'}",
        )


@USERHOST.case("reactions.compare-and-set")
async def compare_and_set(host: HostSession) -> None:
    """A write whose expected_revision is not the message's current revision (ahead of it, or behind it
    after another write) gets stale_revision and changes nothing."""
    session_id, _, seq = await target(host)
    await react_error(host, session_id, seq, EMOJI[0], 1, "ahead", "stale_revision")
    host.expect(await state(host, session_id, seq) == UNTOUCHED, "a stale write changed the reactions")
    written = await react(host, session_id, seq, EMOJI[0], 0, "first")
    await react_error(host, session_id, seq, EMOJI[1], 0, "behind", "stale_revision")
    now = await state(host, session_id, seq)
    host.expect(now == written["reactions"], f"a stale write changed the reactions to {now}")


@USERHOST.case("reactions.idempotent")
async def idempotent(host: HostSession) -> None:
    """A retry of a retained request ID returns its receipt with replayed true and the current state, whatever
    its expected_revision, even after a later write (it restores nothing); the request ID with another emoji
    for the message gets request_id_conflict. Neither changes the reactions."""
    session_id, _, seq = await target(host)
    first = await react(host, session_id, seq, EMOJI[0], 0, "once")
    again = await react(host, session_id, seq, EMOJI[0], 0, "once")
    host.expect(
        again == {**first, "replayed": True}, f"the retry answered {again}, not the first write {first}"
    )
    later = await react(host, session_id, seq, EMOJI[1], 1, "later")
    late = await react(host, session_id, seq, EMOJI[0], 0, "once")
    host.expect(
        late == {**first, "reactions": later["reactions"], "replayed": True},
        f"a retry after a later write answered {late}: not its own receipt with the current state",
    )
    await react_error(host, session_id, seq, "🔥", 2, "once", "request_id_conflict")
    now = await state(host, session_id, seq)
    host.expect(now == later["reactions"], f"a retry or a conflict changed the reactions to {now}")


@USERHOST.case("reactions.receipts-retained")
async def receipts_retained(host: HostSession) -> None:
    """After 33 writes a message retains the receipts of its 32 newest: the second write's request ID still
    replays, and the first one's is revision-checked again, so its old expected_revision gets
    stale_revision."""
    session_id, _, seq = await target(host)
    count = USERHOST_MAX_REACTION_REQUEST_RECEIPTS + 1
    writes = [await react(host, session_id, seq, EMOJI[n % 2], n, f"write-{n}") for n in range(count)]
    retained = await react(host, session_id, seq, EMOJI[1], 1, "write-1")
    host.expect(
        retained == {**writes[1], "reactions": writes[-1]["reactions"], "replayed": True},
        f"the retry of the second of {count} writes (retained) answered {retained}",
    )
    await react_error(host, session_id, seq, EMOJI[0], 0, "write-0", "stale_revision")
    now = await state(host, session_id, seq)
    host.expect(now == writes[-1]["reactions"], f"the retries changed the reactions to {now}")


@USERHOST.case("reactions.eligibility")
async def eligibility(host: HostSession) -> None:
    """Only a saved assistant message is a reaction target: agents.reactions and agents.history.read say
    reaction_eligible false for a user message and true for the assistant message, and agents.react on the
    user message or on a sequence no message has gets not_reaction_target."""
    session_id, user_seq, seq = await target(host)
    found = {s["message_seq"]: s for s in await snapshots(host, session_id, [user_seq, seq])}
    host.expect(
        {n: s["reaction_eligible"] for n, s in found.items()} == {user_seq: False, seq: True},
        f"agents.reactions says {found} for the user message {user_seq} and the assistant message {seq}",
    )
    listed = {m["message_seq"]: m["reaction_eligible"] for m in await everything(host, session_id)}
    host.expect(
        (listed.get(user_seq), listed.get(seq)) == (False, True),
        f"agents.history.read says reaction_eligible {listed.get(user_seq)} for the user message and "
        f"{listed.get(seq)} for the assistant message",
    )
    unknown = max(listed) + 1000
    for number in (user_seq, unknown):
        await react_error(host, session_id, number, EMOJI[0], 0, f"not-{number}", "not_reaction_target")
    host.expect(await state(host, session_id, user_seq) == UNTOUCHED, "a refused write changed the reactions")


@USERHOST.case("reactions.read-order")
async def read_order(host: HostSession) -> None:
    """agents.reactions answers one snapshot per requested saved message in request order and leaves out a
    sequence that names no message."""
    session_id, user_seq, seq = await target(host)
    unknown = seq + 1000
    found = [s["message_seq"] for s in await snapshots(host, session_id, [seq, unknown, user_seq])]
    host.expect(
        found == [seq, user_seq],
        f"agents.reactions of [{seq}, {unknown} (no message), {user_seq}] answered the messages {found}",
    )


@USERHOST.case("reactions.one-emoji")
async def one_emoji(host: HostSession) -> None:
    """An emoji that is not exactly one Unicode emoji (plain letters, two emoji) gets invalid_params and
    changes nothing."""
    session_id, _, seq = await target(host)
    for number, text in enumerate(["ab", EMOJI[0] * 2]):
        await react_error(host, session_id, seq, text, 0, f"bad-{number}", "invalid_params")
    host.expect(await state(host, session_id, seq) == UNTOUCHED, "a refused emoji changed the reactions")


async def invalidation_of(connection: Connection, host: HostSession, seq: int) -> dict[str, Any] | None:
    """The first `plugin/client/invalidate` on `connection` naming `seq`, waiting up to the reply timeout."""
    deadline = asyncio.get_running_loop().time() + host.timeout
    while True:
        for message in connection.notifications:
            if message["method"] == INVALIDATE and seq in message["params"].get("message_seqs", []):
                params: dict[str, Any] = message["params"]
                return params
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0 or connection.closed.is_set():
            return None
        # Bounded, because a notice that lands between the scan and the wait sets no new arrival.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(connection.next_arrival(), min(left, POLL))


@USERHOST.case("reactions.invalidation")
async def invalidation(host: HostSession) -> None:
    """A reaction write sends another client of the graph a content-free plugin/client/invalidate: its graph
    generation, wuu.personal, topic reactions, the main session and the written message's sequence."""
    session_id, _, seq = await target(host)
    other = await host.connect()
    handshake = await host.initialize(on=other)
    await react(host, session_id, seq, EMOJI[0], 0, "noticed")
    notice = await invalidation_of(other, host, seq)
    host.expect(notice is not None, f"the other client got no {INVALIDATE} naming message {seq}")
    assert notice is not None
    wanted = {
        "graph_generation": handshake["graph_generation"],
        "plugin_id": PERSONAL,
        "topic": "reactions",
        "session_id": session_id,
    }
    got = {name: notice[name] for name in wanted}
    host.expect(got == wanted, f"the notice is {notice}, not of {wanted}")
