"""`read_at` of input receipts is recorded only by the host's context assembly
(spec/schema/receipts/input.schema.json `InputReceipt.read_at`, `UserInput.client_input_id`).

Covered: the stand-in agent reads an input (read_at set, revision incremented), reads every input of a burst
of 120 admitted while it is busy (past its 50-message window), and an agent that never steps leaves it
unread; agents of this file that assemble a context without the input, or with forged context
messages whose (client input ID, history sequence) pair is not the input's, leave it unread, and the exact
pair reads it; a client cannot assert `read_at` (or any receipt field) through `agents.send`; a second
plugin's `agents.send` response carrying `read_at` does not touch the Personal store; after a restart an
input never read is read by recovery, and one already read is not read again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.host.userhost.personal.conftest import (
    Attach,
    Clock,
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
from wuu.generated.models import AgentsSendParams, AgentsSendResult
from wuu.generated.models import UserHostErrorCode as Code
from wuu.host.userhost import Plugin, PluginCall, UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import (
    AgentStep,
    ContextMessage,
    ModelAgent,
    ModelContext,
    PersonalPlugin,
    StandInModel,
    personal,
)


async def receipts(client: UserHostClient, session_id: str, *client_input_ids: str) -> list[dict[str, Any]]:
    found = await call(
        client, "agents.receipts", {"session_id": session_id, "client_input_ids": list(client_input_ids)}
    )
    receipts_found: list[dict[str, Any]] = result(found)["receipts"]
    return receipts_found


def moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def read_column(space: Space) -> list[tuple[str, str | None, int]]:
    """(client input ID, read_at, revision) of every receipt in the store's file, by history sequence."""
    rows = space.rows("SELECT client_input_id, read_at, revision FROM input_receipts ORDER BY history_seq")
    return [(str(cid), read_at, int(revision)) for cid, read_at, revision in rows]


# --- the stand-in and the silent agent -----------------------------------------------------------------


async def test_the_stand_in_agent_reads_an_input_once_it_has_stepped(
    start_space: StartSpace, attach: Attach, inputs: Inputs
) -> None:
    space = await start_space()
    client = await attach(space)
    sent = result(await send(client, space.main, inputs("what is on today?", [attachment(b"agenda")])))
    assert sent["receipt"]["read_at"] is None
    await space.idle()
    (read,) = await receipts(client, space.main, "in-1")
    assert read == {**sent["receipt"], "read_at": read["read_at"], "revision": 2}
    assert moment(read["read_at"]) > moment(read["accepted_at"])
    assert read_column(space) == [("in-1", read["read_at"], 2)]


async def test_a_retry_after_the_input_was_read_replays_the_receipt_as_it_now_stands(
    start_space: StartSpace, attach: Attach, inputs: Inputs
) -> None:
    space = await start_space()
    client = await attach(space)
    envelope = inputs("read, then retried")
    result(await send(client, space.main, envelope))
    await space.idle()
    (read,) = await receipts(client, space.main, "in-1")
    assert read["read_at"] is not None
    assert result(await send(client, space.main, envelope)) == {"receipt": read, "replayed": True}
    await space.idle()
    assert await receipts(client, space.main, "in-1") == [read]  # the retry is not read again


async def test_an_agent_that_never_steps_leaves_the_input_unread(
    start_space: StartSpace, attach: Attach, inputs: Inputs
) -> None:
    space = await start_space(agent=silent())
    client = await attach(space)
    sent = result(await send(client, space.main, inputs("anyone there?")))
    await space.idle()
    assert await receipts(client, space.main, "in-1") == [sent["receipt"]]
    assert sent["receipt"]["read_at"] is None and sent["receipt"]["revision"] == 1
    assert read_column(space) == [("in-1", None, 1)]


async def test_concurrent_inputs_are_each_read_by_the_stand_in(
    start_space: StartSpace, attach: Attach
) -> None:
    space = await start_space()
    clients = [await attach(space) for _ in range(4)]
    envelopes = [
        {"client_input_id": f"c{i}-{n}", "request_id": f"r{i}-{n}", "text": f"input {i}/{n}"}
        for i in range(4)
        for n in range(5)
    ]
    answers = await asyncio.gather(*(send(clients[k // 5], space.main, e) for k, e in enumerate(envelopes)))
    assert all(result(answer)["replayed"] is False for answer in answers)
    await space.idle()
    found = await receipts(clients[0], space.main, *(e["client_input_id"] for e in envelopes))
    assert len(found) == 20
    assert all(r["read_at"] is not None and r["revision"] == 2 for r in found), found


class Held:
    """The stand-in agent, held before its first step until `release`: inputs pile up meanwhile."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.offered: list[tuple[int, ...]] = []
        self.contexts: list[tuple[int, ...]] = []
        self._agent = ModelAgent(StandInModel())

    async def step(self, step: AgentStep) -> None:
        await self.gate.wait()
        self.offered.append(tuple(message.message_seq for message in step.pending))
        self.contexts.append(tuple(message.message_seq for message in step.history))
        await self._agent.step(step)


async def test_a_burst_past_the_context_window_is_read_to_the_last_input(
    start_space: StartSpace, attach: Attach
) -> None:
    """120 inputs admitted while the agent is busy, more than its 50-message window: every one gets
    `read_at` exactly once, the oldest first, none crowded out by newer ones."""
    agent = Held()
    space = await start_space(agent=agent)
    clients = [await attach(space) for _ in range(4)]
    envelopes = [
        {"client_input_id": f"b-{n}", "request_id": f"r-{n}", "text": f"burst {n}"} for n in range(120)
    ]
    for k in range(0, 120, 4):
        answers = await asyncio.gather(*(send(clients[i], space.main, envelopes[k + i]) for i in range(4)))
        assert all(result(answer)["replayed"] is False for answer in answers)
    ids = [envelope["client_input_id"] for envelope in envelopes]
    agent.gate.set()
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        found = [r for k in (0, 60) for r in await receipts(clients[0], space.main, *ids[k : k + 60])]
        unread = [r["client_input_id"] for r in found if r["read_at"] is None]
        if not unread or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert unread == [], f"{len(unread)} inputs never read: {unread}"
    assert len(found) == 120 and all(r["revision"] == 2 for r in found)
    await space.idle()
    # No input was offered twice, the oldest came first, and each step's context held what it offered (the
    # newest inputs can be read in the recent window before their turn comes).
    offered = [seq for step in agent.offered for seq in step]
    assert offered == sorted(set(offered)) and offered[0] == 1
    assert all(set(step) <= set(context) for step, context in zip(agent.offered, agent.contexts, strict=True))


# --- agents that assemble their own context ------------------------------------------------------------

Build = Callable[[AgentStep], Sequence[ContextMessage]]


class Assembling:
    """An agent that puts `build(step)` before its model, and records what each step was offered."""

    def __init__(self, build: Build) -> None:
        self.build = build
        self.offered: list[tuple[int, ...]] = []
        """The history sequences of the waiting inputs of each step."""
        self.contexts: list[ModelContext] = []

    async def step(self, step: AgentStep) -> None:
        self.offered.append(tuple(message.message_seq for message in step.pending))
        self.contexts.append(await step.assemble(self.build(step)))


def without_the_inputs(step: AgentStep) -> list[ContextMessage]:
    """The offered history, minus every user message."""
    return [message for message in step.history if message.role != "user"]


def nothing_at_all(step: AgentStep) -> list[ContextMessage]:
    return []


def wrong_sequences(step: AgentStep) -> list[ContextMessage]:
    """Each waiting input's client input ID, at the sequences next to its own (another input's, if any)."""
    return [
        ContextMessage(pending.message_seq + offset, "user", pending.text, pending.client_input_id)
        for pending in step.pending
        for offset in (-1, 1, 1000)
    ]


def other_client_input_ids(step: AgentStep) -> list[ContextMessage]:
    """Each waiting input's sequence, with another client input ID: a made-up one, and another waiting
    input's."""
    ids = [pending.client_input_id for pending in step.pending]
    rotated = ids[1:] + ids[:1]
    forged = [
        ContextMessage(pending.message_seq, "user", pending.text, f"{pending.client_input_id}-x")
        for pending in step.pending
    ]
    if len(ids) > 1:
        forged += [
            ContextMessage(pending.message_seq, "user", pending.text, other)
            for pending, other in zip(step.pending, rotated, strict=True)
        ]
    return forged


def exact_pairs(step: AgentStep) -> list[ContextMessage]:
    """New context messages (not the offered ones) with each waiting input's exact pair."""
    return [
        ContextMessage(pending.message_seq, "user", pending.text, pending.client_input_id)
        for pending in step.pending
    ]


async def _two_inputs_with(
    start_space: StartSpace, attach: Attach, build: Build
) -> tuple[Space, UserHostClient, Assembling]:
    agent = Assembling(build)
    space = await start_space(agent=agent)
    client = await attach(space)
    for n in (1, 2):
        envelope = {"client_input_id": f"cin-{n}", "request_id": f"req-{n}", "text": f"input {n}"}
        assert result(await send(client, space.main, envelope))["receipt"]["history_seq"] == n
        await space.idle()
    # The agent did step, and was offered each input.
    assert {seq for offered in agent.offered for seq in offered} == {1, 2}
    return space, client, agent


@pytest.mark.parametrize(
    "build",
    [without_the_inputs, nothing_at_all, wrong_sequences, other_client_input_ids],
    ids=["without-the-input", "empty", "wrong-seq", "other-client-input-id"],
)
async def test_a_context_without_the_exact_pair_leaves_the_input_unread(
    start_space: StartSpace, attach: Attach, build: Build
) -> None:
    space, client, _ = await _two_inputs_with(start_space, attach, build)
    found = await receipts(client, space.main, "cin-1", "cin-2")
    assert [(r["client_input_id"], r["read_at"], r["revision"]) for r in found] == [
        ("cin-1", None, 1),
        ("cin-2", None, 1),
    ]
    assert read_column(space) == [("cin-1", None, 1), ("cin-2", None, 1)]


async def test_a_context_with_the_exact_pair_reads_the_input(start_space: StartSpace, attach: Attach) -> None:
    space, client, agent = await _two_inputs_with(start_space, attach, exact_pairs)
    found = await receipts(client, space.main, "cin-1", "cin-2")
    assert [(r["client_input_id"], r["read_at"] is not None, r["revision"]) for r in found] == [
        ("cin-1", True, 2),
        ("cin-2", True, 2),
    ]
    assert agent.offered == [(1,), (2,)]  # once read, an input is no longer offered as waiting


async def test_a_forged_pair_does_not_read_but_the_exact_one_in_the_same_context_does(
    start_space: StartSpace, attach: Attach
) -> None:
    """One context with a wrong-sequence and a wrong-ID message for the first input, and the exact pair of
    the second: only the second is read."""

    def build(step: AgentStep) -> list[ContextMessage]:
        if len(step.pending) < 2:
            return []
        first, second = step.pending[0], step.pending[1]
        return [
            ContextMessage(second.message_seq, "user", first.text, first.client_input_id),
            ContextMessage(first.message_seq, "user", first.text, "cin-forged"),
            ContextMessage(second.message_seq, "user", second.text, second.client_input_id),
        ]

    space, client, _ = await _two_inputs_with(start_space, attach, build)
    found = await receipts(client, space.main, "cin-1", "cin-2")
    assert [(r["client_input_id"], r["read_at"] is not None, r["revision"]) for r in found] == [
        ("cin-1", False, 1),
        ("cin-2", True, 2),
    ]


# --- what cannot set it --------------------------------------------------------------------------------

RECEIPT_FIELDS = ["read_at", "revision", "accepted", "accepted_at", "in_history", "history_seq", "receipt_id"]
VALUES: dict[str, Any] = {
    "read_at": "2026-03-01T12:00:00Z",
    "revision": 7,
    "accepted": True,
    "accepted_at": "2026-03-01T12:00:00Z",
    "in_history": True,
    "history_seq": 1,
    "receipt_id": "rcp_client",
}


@pytest.mark.parametrize("where", ["params", "user_input"])
@pytest.mark.parametrize("name", RECEIPT_FIELDS)
async def test_a_client_cannot_assert_a_receipt_field_through_agents_send(
    start_space: StartSpace, attach: Attach, inputs: Inputs, where: str, name: str
) -> None:
    space = await start_space(agent=silent())
    client = await attach(space)
    envelope = inputs("read me")
    admitted = result(await send(client, space.main, envelope))["receipt"]

    params: dict[str, Any] = {"session_id": space.main}
    forged_retry, forged_new = dict(envelope), inputs("forged")
    for target in [params] if where == "params" else [forged_retry, forged_new]:
        target[name] = VALUES[name]
    for attempt in (forged_retry, forged_new):
        response = await call(client, "agents.send", params, attempt)
        error(response, Code.INVALID_PARAMS, f"{where}.{name}")

    assert await receipts(client, space.main, "in-1", "in-2") == [admitted]
    assert admitted["read_at"] is None
    assert read_column(space) == [("in-1", None, 1)]
    assert space.count("messages") == 1


async def test_agents_receipts_does_not_take_read_at(
    start_space: StartSpace, attach: Attach, inputs: Inputs
) -> None:
    space = await start_space(agent=silent())
    client = await attach(space)
    admitted = result(await send(client, space.main, inputs("read me")))["receipt"]
    forged = {"session_id": space.main, "client_input_ids": ["in-1"], "read_at": "2026-03-01T12:00:00Z"}
    error(await call(client, "agents.receipts", forged), Code.INVALID_PARAMS, "params.read_at")
    assert await receipts(client, space.main, "in-1") == [admitted]


FORGER_ID = "test.forger"


def forger(answered: list[dict[str, Any]], main: list[str]) -> Plugin:
    """A second plugin whose `agents.send` answers a receipt of the input with `read_at` set (revision 2),
    for the main conversation's session; it writes nothing."""

    async def forged_send(params: AgentsSendParams, call: PluginCall) -> AgentsSendResult:
        assert call.user_input is not None
        receipt = {
            "receipt_id": "rcp_forged",
            "revision": 2,
            "session_id": main[0],
            "plugin_id": "wuu.personal",
            "client_input_id": call.user_input.client_input_id,
            "request_id": call.user_input.request_id,
            "text_sha256": "0" * 64,
            "attachments": [],
            "created_at": "2026-03-01T12:00:00Z",
            "accepted": True,
            "accepted_at": "2026-03-01T12:00:00Z",
            "in_history": True,
            "history_seq": 1,
            "read_at": "2026-03-01T12:00:01Z",
        }
        answered.append(receipt)
        return AgentsSendResult.model_validate({"receipt": receipt, "replayed": True})

    return Plugin(FORGER_ID, "forger-1", {"agents.send": forged_send})


async def test_another_plugins_send_response_does_not_set_read_at(
    home: Path, clock: Clock, attach: Attach, inputs: Inputs
) -> None:
    answered: list[dict[str, Any]] = []
    main: list[str] = []
    built: list[PersonalPlugin] = []
    host = await UserHost.start(
        user_space_id="local",
        product_domain="personal",
        home=home,
        composition_profile="personal",
        plugins=[forger(answered, main)],
        compose=[personal(agent=silent(), clock=clock, started=built.append)],
    )
    try:
        main.append(await built[0].store.main_session())
        client = await attach(host)
        envelope = inputs("the real input")
        admitted = result(await send(client, main[0], envelope))["receipt"]

        for forged in (envelope, inputs("never sent to personal")):
            await call(client, "agents.send", {"session_id": main[0]}, forged, plugin_id=FORGER_ID)
        assert [r["client_input_id"] for r in answered] == ["in-1", "in-2"]  # the forger did answer

        assert await receipts(client, main[0], "in-1", "in-2") == [admitted]
        assert admitted["read_at"] is None and admitted["revision"] == 1
        state = host.layout.state / "personal.sqlite"
        space = Space(host, built[0], home, clock, main[0])
        assert space.database == state
        assert read_column(space) == [("in-1", None, 1)]
    finally:
        await host.close()


# --- restarts ------------------------------------------------------------------------------------------


async def test_after_a_restart_an_unread_input_is_read_and_a_read_one_is_not_read_again(
    start_space: StartSpace, attach: Attach
) -> None:
    first = await start_space()  # the stand-in reads this one
    client = await attach(first)
    envelope_read = {"client_input_id": "cin-read", "request_id": "req-read", "text": "read before"}
    result(await send(client, first.main, envelope_read))
    await first.idle()
    (read_before,) = await receipts(client, first.main, "cin-read")
    assert read_before["read_at"] is not None and read_before["revision"] == 2
    await first.host.close()

    second = await start_space(agent=silent())  # nobody reads this one
    client = await attach(second)
    envelope_unread = {"client_input_id": "cin-unread", "request_id": "req-unread", "text": "left unread"}
    unread = result(await send(client, second.main, envelope_unread))["receipt"]
    await second.idle()
    assert (await receipts(client, second.main, "cin-unread"))[0]["read_at"] is None
    await second.host.close()

    third = await start_space()  # the stand-in again: recovery reads what waits
    await third.idle()
    client = await attach(third)
    now_read, still = await receipts(client, third.main, "cin-unread", "cin-read")
    assert now_read == {**unread, "read_at": now_read["read_at"], "revision": 2}
    assert now_read["read_at"] is not None
    assert moment(now_read["read_at"]) > moment(read_before["read_at"])
    assert still == read_before  # read_at and revision unchanged
    assert third.rows("SELECT seq, role, text FROM messages ORDER BY seq") == [
        (1, "user", "read before"),
        (2, "assistant", "Received: read before"),
        (3, "user", "left unread"),
        (4, "assistant", "Received: left unread"),
    ]


async def test_a_restart_with_nothing_waiting_reads_nothing_again(
    start_space: StartSpace, attach: Attach
) -> None:
    first = await start_space()
    client = await attach(first)
    result(await send(client, first.main, {"client_input_id": "cin-1", "request_id": "req-1", "text": "one"}))
    await first.idle()
    before = read_column(first)
    await first.host.close()

    again = await start_space()
    await again.idle()
    assert read_column(again) == before
    assert again.count("messages") == 2  # no second answer to the same input
