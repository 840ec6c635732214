"""Message reactions of the Personal main conversation, over the real Unix socket on the real SQLite store.

Covers `agents.react` (set, replace, clear, the emoji rule, `expected_revision`, retries of retained request
receipts and their 32-receipt window, reaction targets), `agents.reactions` (its limits and order), the
content-free `plugin/client/invalidate` notices and their best-effort delivery, reactions across a restart,
the main agent's `react_to_message` (`AgentStep.react`) and the bounded reaction snapshot a step sees.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.helpers import DEADLINE
from tests.host.userhost.personal.conftest import Clock, Space, StartSpace, error, result
from wuu.generated import validators
from wuu.generated.catalog import USERHOST_PROTOCOL_VERSION
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UnixServer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.personal import PLUGIN_ID, AgentStep, ReactionChange
from wuu.worker.framing import Frame

Code = UserHostErrorCode
INPUTS = itertools.count(1)
"""Numbers the inputs the tests send (their client input and request IDs)."""
INVALIDATE_KEYS = set(validators.bundle()["$defs"]["PluginClientInvalidateParams"]["properties"])
"""The keys of a `plugin/client/invalidate` notice, as the spec lists them."""
REACTION_ROWS = "SELECT session_id, message_seq, owner, agent, revision FROM reactions ORDER BY message_seq"
RECEIPT_ROWS = (
    "SELECT request_id, session_id, message_seq, actor, emoji, expected_revision, revision, applied_at "
    "FROM reaction_receipts ORDER BY id"
)


# --- a scripted agent -------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What one step of the agent was given."""

    pending: list[str]
    reactions: tuple[ReactionChange, ...]


def long_answer(number: int) -> str:
    return f"answer {number}: " + "a long explanation of the plan " * 12


@dataclass
class ScriptedAgent:
    """A custom agent acting on the commands its waiting inputs carry:

    `reply N` saves N assistant messages `answer 1` .. `answer N` (the last one long when N is 30);
    `say TEXT` saves one assistant message TEXT; `react SEQ EMOJI` and `unreact SEQ` react as the agent
    (`react_to_message`), recording the state, or the code of a refusal; `reason` saves a hidden reasoning
    and a tool record. Every step assembles its context, except one whose only input is `hold`."""

    steps: list[Seen] = field(default_factory=list)
    reacted: list[dict[str, Any]] = field(default_factory=list)
    refused: list[tuple[int, UserHostErrorCode]] = field(default_factory=list)
    records: list[int] = field(default_factory=list)

    async def step(self, step: AgentStep) -> None:
        self.steps.append(Seen([message.text for message in step.pending], step.reactions))
        if [message.text for message in step.pending] != ["hold"]:
            await step.assemble(step.history)
        for message in step.pending:
            match message.text.split(" "):
                case ["reply", count]:
                    total = int(count)
                    for number in range(1, total + 1):
                        last_long = number == total == 30
                        await step.reply(long_answer(number) if last_long else f"answer {number}")
                case ["say", *_]:
                    await step.reply(message.text.removeprefix("say "))
                case ["react", seq, emoji]:
                    await self._react(step, int(seq), emoji)
                case ["unreact", seq]:
                    await self._react(step, int(seq), None)
                case ["reason"]:
                    self.records.append(await step.record("reasoning", "thinking about the plan"))
                    self.records.append(await step.record("tool", "search(plan)"))
                case _:
                    pass

    async def _react(self, step: AgentStep, seq: int, emoji: str | None) -> None:
        try:
            self.reacted.append((await step.react(seq, emoji)).to_wire())
        except UserHostError as refusal:
            self.refused.append((seq, refusal.code))


@pytest.fixture
def agent() -> ScriptedAgent:
    return ScriptedAgent()


@pytest.fixture
async def space(start_space: StartSpace, agent: ScriptedAgent) -> Space:
    """The Personal host of these tests, with the scripted agent (the conftest's clients connect to it)."""
    return await start_space(agent=agent)


# --- a raw NDJSON client ------------------------------------------------------------------------------------


class Requester(Protocol):
    async def request(self, method: str, params: dict[str, Any]) -> Frame: ...


class Wire:
    """A client of the host's socket that writes and reads raw NDJSON lines, one request at a time, and
    keeps every notification it reads, exactly as it came."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = 0
        self.notices: list[dict[str, Any]] = []
        self.generation = -1

    @classmethod
    async def open(cls, path: Path) -> Wire:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=2**22)
        wire = cls(reader, writer)
        initialized = await wire.request(
            "initialize",
            {"protocol_version": USERHOST_PROTOCOL_VERSION, "client_info": {"name": "wire", "version": "1"}},
        )
        wire.generation = initialized["result"]["graph_generation"]
        return wire

    async def request(self, method: str, params: dict[str, Any]) -> Frame:
        self._ids += 1
        frame = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        self._writer.write(json.dumps(frame).encode() + b"\n")
        await self._writer.drain()
        while True:
            line = await asyncio.wait_for(self._reader.readline(), DEADLINE)
            assert line, "the host closed the connection"
            message: dict[str, Any] = json.loads(line)
            if "id" not in message:
                self.notices.append(message)
            elif message["id"] == self._ids:
                return message
            else:
                raise AssertionError(f"unexpected message {message}")

    async def received(self) -> list[dict[str, Any]]:
        """The notifications sent before a request made now is answered (every one the host sent this
        client before this call), taken from the list."""
        await self.request("plugin/client/request", plugin_request("agents.main_session", {}))
        found, self.notices = self.notices, []
        return found

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


@pytest.fixture
async def stack(start_space: StartSpace) -> AsyncIterator[AsyncExitStack]:
    """Closes what a test opened (servers, wires) before its hosts are closed."""
    async with AsyncExitStack() as opened:
        yield opened


Serve = Callable[[Space, int], Awaitable[list[Wire]]]


@pytest.fixture
def serve(stack: AsyncExitStack, run_dir: Path) -> Serve:
    """Serves a space on a socket of its own and opens `count` initialized wires to it."""
    served = 0

    async def start(space: Space, count: int) -> list[Wire]:
        nonlocal served
        served += 1
        unix = await UnixServer.start(space.host, run_dir / f"r{served}.sock")
        stack.push_async_callback(unix.close)
        wires = []
        for _ in range(count):
            wire = await Wire.open(unix.path)
            stack.push_async_callback(wire.close)
            wires.append(wire)
        return wires

    return start


# --- calls --------------------------------------------------------------------------------------------------


def plugin_request(method: str, params: dict[str, Any], user_input: Any = None) -> dict[str, Any]:
    request: dict[str, Any] = {"plugin_id": PLUGIN_ID, "method": method, "params": params}
    if user_input is not None:
        request["user_input"] = user_input
    return request


async def plugin(client: Requester, method: str, params: dict[str, Any], user_input: Any = None) -> Frame:
    return await client.request("plugin/client/request", plugin_request(method, params, user_input))


async def react(
    client: Requester, session: str, seq: int, emoji: str | None, expected: int, request_id: str
) -> Frame:
    params = {
        "session_id": session,
        "message_seq": seq,
        "emoji": emoji,
        "expected_revision": expected,
        "request_id": request_id,
    }
    return await plugin(client, "agents.react", params)


async def reactions(client: Requester, session: str, seqs: list[int]) -> Frame:
    return await plugin(client, "agents.reactions", {"session_id": session, "message_seqs": seqs})


async def history(client: Requester, session: str) -> list[dict[str, Any]]:
    page = result(await plugin(client, "agents.history.read", {"session_id": session, "page_size": 100}))
    messages: list[dict[str, Any]] = page["messages"]
    return messages


async def say(client: Requester, space: Space, text: str) -> None:
    """Send one input and wait until the agent's steps are done."""
    made = next(INPUTS)
    user_input = {"client_input_id": f"in-{made}", "request_id": f"send-{made}", "text": text}
    sent = await plugin(client, "agents.send", {"session_id": space.main}, user_input)
    assert result(sent)["replayed"] is False
    await space.idle()


def at(clock: Clock, moment: datetime) -> str:
    """Hold the clock at `moment`; the RFC 3339 text the store writes for it."""
    clock.now, clock.step = moment, timedelta(0)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def execute(space: Space, sql: str, *arguments: Any) -> None:
    """Change the store's file on a connection of the test's own, while the host runs."""
    with closing(sqlite3.connect(space.database, timeout=10)) as connection, connection:
        connection.execute(sql, arguments)


def receipt(
    request_id: str,
    session: str,
    seq: int,
    emoji: str | None,
    expected: int,
    revision: int,
    applied_at: str,
    actor: str = "owner",
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "session_id": session,
        "message_seq": seq,
        "actor": actor,
        "emoji": emoji,
        "expected_revision": expected,
        "revision": revision,
        "applied_at": applied_at,
    }


SCOTLAND = "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
"""A flag tag sequence: 7 code points, 28 UTF-8 bytes, one emoji."""
T1 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)
T2 = datetime(2026, 3, 2, 9, 5, 0, 250000, tzinfo=UTC)
T3 = datetime(2026, 3, 2, 10, 0, 1, tzinfo=UTC)


# --- the owner's writes -------------------------------------------------------------------------------------


async def test_owner_sets_replaces_and_clears_a_reaction(
    space: Space, client: Any, clock: Clock, agent: ScriptedAgent
) -> None:
    """Revision 1, 2, 3; each result, `agents.reactions`, history and the store's rows agree."""
    main = space.main
    await say(client, space, "say Here is the plan")
    stamps = [at(clock, T1), "", ""]
    first = result(await react(client, main, 2, "👍", 0, "set-1"))
    assert first == {
        "session_id": main,
        "message_seq": 2,
        "reactions": {"owner": "👍", "revision": 1},
        "receipt": receipt("set-1", main, 2, "👍", 0, 1, stamps[0]),
        "replayed": False,
    }
    assert result(await reactions(client, main, [2])) == {
        "session_id": main,
        "messages": [
            {"message_seq": 2, "reaction_eligible": True, "reactions": {"owner": "👍", "revision": 1}}
        ],
    }
    stamps[1] = at(clock, T2)
    second = result(await react(client, main, 2, "🎉", 1, "set-2"))
    assert second == {
        "session_id": main,
        "message_seq": 2,
        "reactions": {"owner": "🎉", "revision": 2},
        "receipt": receipt("set-2", main, 2, "🎉", 1, 2, stamps[1]),
        "replayed": False,
    }
    stamps[2] = at(clock, T3)
    third = result(await react(client, main, 2, None, 2, "set-3"))
    assert third == {
        "session_id": main,
        "message_seq": 2,
        "reactions": {"revision": 3},
        "receipt": receipt("set-3", main, 2, None, 2, 3, stamps[2]),
        "replayed": False,
    }
    assert result(await reactions(client, main, [2, 1])) == {
        "session_id": main,
        "messages": [
            {"message_seq": 2, "reaction_eligible": True, "reactions": {"revision": 3}},
            {"message_seq": 1, "reaction_eligible": False, "reactions": {"revision": 0}},
        ],
    }
    assert [
        (m["message_seq"], m["role"], m["text"], m["reaction_eligible"], m["reactions"])
        for m in await history(client, main)
    ] == [
        (2, "assistant", "Here is the plan", True, {"revision": 3}),
        (1, "user", "say Here is the plan", False, {"revision": 0}),
    ]
    assert space.rows(REACTION_ROWS) == [(main, 2, None, None, 3)]
    assert space.rows(RECEIPT_ROWS) == [
        ("set-1", main, 2, "owner", "👍", 0, 1, stamps[0]),
        ("set-2", main, 2, "owner", "🎉", 1, 2, stamps[1]),
        ("set-3", main, 2, "owner", None, 2, 3, stamps[2]),
    ]
    # A reaction is not a conversation message, and it started no step of the agent.
    await space.idle()
    assert space.count("messages") == 2
    assert len(agent.steps) == 1


async def test_one_emoji_of_any_shape_is_accepted(space: Space, client: Any) -> None:
    main = space.main
    await say(client, space, "say Done")
    accepted = [
        "👍🏽",
        "👨\u200d👩\u200d👧\u200d👦",
        "🇵🇹",
        "1️⃣",
        "🏳️\u200d🌈",
        "❤️",
        SCOTLAND,
        "🧑🏿\u200d🤝\u200d🧑🏻",
    ]
    states = []
    for revision, emoji in enumerate(accepted):
        states.append(result(await react(client, main, 2, emoji, revision, f"ok-{revision}"))["reactions"])
    assert states == [{"owner": emoji, "revision": n + 1} for n, emoji in enumerate(accepted)]
    assert space.rows("SELECT emoji FROM reaction_receipts ORDER BY id") == [(emoji,) for emoji in accepted]


async def test_what_is_not_one_emoji_is_invalid_params(space: Space, client: Any) -> None:
    main = space.main
    await say(client, space, "say Done")
    refused = ["👍👍", "a", "👍 ", "", " 👍", "🇦", "ok"]
    found = []
    for n, emoji in enumerate(refused):
        failed = error(await react(client, main, 2, emoji, 0, f"bad-{n}"), Code.INVALID_PARAMS)
        found.append((emoji, failed["data"].get("field")))
    assert found == [(emoji, "params.emoji") for emoji in refused]
    assert space.count("reactions") == 0
    assert space.count("reaction_receipts") == 0
    assert result(await reactions(client, main, [2]))["messages"][0]["reactions"] == {"revision": 0}


async def test_a_stale_expected_revision_changes_nothing(space: Space, client: Any) -> None:
    main = space.main
    await say(client, space, "say Done")
    result(await react(client, main, 2, "👍", 0, "first"))
    rows = (space.rows(REACTION_ROWS), space.rows(RECEIPT_ROWS), space.count("reaction_locators"))
    for expected, request_id in [(0, "late-1"), (2, "late-2"), (9, "late-3")]:
        error(await react(client, main, 2, "🎉", expected, request_id), Code.STALE_REVISION)
    assert (space.rows(REACTION_ROWS), space.rows(RECEIPT_ROWS), space.count("reaction_locators")) == rows
    assert result(await reactions(client, main, [2]))["messages"][0]["reactions"] == {
        "owner": "👍",
        "revision": 1,
    }
    # A refused request left no receipt: the same request ID on the current revision is a new write.
    retried = result(await react(client, main, 2, "🎉", 1, "late-1"))
    assert (retried["reactions"], retried["replayed"]) == ({"owner": "🎉", "revision": 2}, False)


async def test_concurrent_writes_on_one_revision_one_wins(space: Space, serve: Serve) -> None:
    """Two clients write on revision 0 at once: one is saved, the other is stale; two sends of one
    request at once are one write and its replay."""
    first, second, third = await serve(space, 3)
    main = space.main
    await say(first, space, "say Done")
    outcomes = await asyncio.gather(
        react(first, main, 2, "👍", 0, "c-1"), react(second, main, 2, "🎉", 0, "c-2")
    )
    won = [o for o in outcomes if "result" in o]
    lost = [o for o in outcomes if "error" in o]
    assert (len(won), len(lost)) == (1, 1)
    assert lost[0]["error"]["data"] == {"code": "stale_revision"}
    winner = result(won[0])
    assert winner["reactions"]["revision"] == 1
    assert space.rows(REACTION_ROWS) == [(main, 2, winner["reactions"]["owner"], None, 1)]
    same = await asyncio.gather(react(second, main, 2, "🔥", 1, "c-3"), react(third, main, 2, "🔥", 1, "c-3"))
    pairs = sorted((result(o)["replayed"], result(o)["reactions"]["revision"]) for o in same)
    assert pairs == [(False, 2), (True, 2)]
    assert result(same[0])["receipt"] == result(same[1])["receipt"]
    assert space.rows("SELECT request_id, revision FROM reaction_receipts ORDER BY id") == [
        (winner["receipt"]["request_id"], 1),
        ("c-3", 2),
    ]
    # One notice per saved write, to every client.
    assert [len(await wire.received()) for wire in (first, second, third)] == [2, 2, 2]


async def test_a_retry_returns_the_current_state_and_its_own_receipt(
    space: Space, serve: Serve, clock: Clock
) -> None:
    """Replayed whatever its expected_revision; no older feedback restored; no notice; a changed
    request (another emoji, another message) is a conflict."""
    (wire, watcher) = await serve(space, 2)
    main = space.main
    await say(wire, space, "say One")
    await say(wire, space, "say Two")
    stamp_a = at(clock, T1)
    first = result(await react(wire, main, 2, "👍", 0, "r-a"))
    at(clock, T2)
    result(await react(wire, main, 2, "❤️", 1, "r-b"))
    assert (len(await watcher.received()), len(await wire.received())) == (2, 2)
    rows = (space.rows(REACTION_ROWS), space.rows(RECEIPT_ROWS), space.count("reaction_locators"))
    at(clock, T3)
    replays = [result(await react(wire, main, 2, "👍", expected, "r-a")) for expected in (0, 2, 7)]
    assert (
        replays
        == [
            {
                "session_id": main,
                "message_seq": 2,
                "reactions": {"owner": "❤️", "revision": 2},
                "receipt": receipt("r-a", main, 2, "👍", 0, 1, stamp_a),
                "replayed": True,
            }
        ]
        * 3
    )
    assert replays[0]["receipt"] == first["receipt"]
    conflicts = [
        error(await react(wire, main, 2, "🎉", 2, "r-a"), Code.REQUEST_ID_CONFLICT)["data"],
        error(await react(wire, main, 2, None, 2, "r-a"), Code.REQUEST_ID_CONFLICT)["data"],
        error(await react(wire, main, 4, "👍", 0, "r-a"), Code.REQUEST_ID_CONFLICT)["data"],
    ]
    assert conflicts == [{"code": "request_id_conflict"}] * 3
    assert (space.rows(REACTION_ROWS), space.rows(RECEIPT_ROWS), space.count("reaction_locators")) == rows
    assert result(await reactions(wire, main, [2, 4]))["messages"] == [
        {"message_seq": 2, "reaction_eligible": True, "reactions": {"owner": "❤️", "revision": 2}},
        {"message_seq": 4, "reaction_eligible": True, "reactions": {"revision": 0}},
    ]
    assert await watcher.received() == []
    assert await wire.received() == []


async def test_a_message_retains_its_32_newest_receipts(space: Space, client: Any) -> None:
    """After 33 writes the 1st receipt is gone and its retry is revision-checked; the 2nd..33rd replay;
    another message's receipts are not counted."""
    main = space.main
    await say(client, space, "say One")
    await say(client, space, "say Two")
    other = result(await react(client, main, 4, "🙂", 0, "other-1"))
    cycle = ["👍", "🎉", "❤️", "🔥", "😂"]
    written = [result(await react(client, main, 2, cycle[n % 5], n, f"w-{n + 1}")) for n in range(33)]
    assert [w["reactions"]["revision"] for w in written] == list(range(1, 34))
    current = {"owner": cycle[32 % 5], "revision": 33}
    assert space.rows("SELECT request_id FROM reaction_receipts WHERE message_seq = 2 ORDER BY id") == [
        (f"w-{n}",) for n in range(2, 34)
    ]
    assert space.rows("SELECT request_id FROM reaction_receipts WHERE message_seq = 4") == [("other-1",)]
    error(await react(client, main, 2, cycle[0], 0, "w-1"), Code.STALE_REVISION)
    replays = [result(await react(client, main, 2, cycle[n % 5], n, f"w-{n + 1}")) for n in range(1, 33)]
    assert [(r["replayed"], r["reactions"], r["receipt"]) for r in replays] == [
        (True, current, w["receipt"]) for w in written[1:]
    ]
    replayed_other = result(await react(client, main, 4, "🙂", 0, "other-1"))
    assert (replayed_other["replayed"], replayed_other["receipt"]) == (True, other["receipt"])
    assert space.rows(REACTION_ROWS) == [(main, 2, current["owner"], None, 33), (main, 4, "🙂", None, 1)]


# --- reaction targets ---------------------------------------------------------------------------------------


async def test_only_plain_saved_assistant_messages_of_the_main_conversation_are_targets(
    space: Space, client: Any, agent: ScriptedAgent
) -> None:
    main = space.main
    await say(client, space, "reply 6")  # 1 user, 2..7 assistant
    await say(client, space, "reason")  # 8 user, 9 reasoning, 10 tool record
    assert agent.records == [9, 10]
    for flag, seq in [("hidden", 3), ("truncated", 4), ("read_only", 5), ("background", 6)]:
        execute(space, f"UPDATE messages SET {flag} = 1 WHERE session_id = ? AND seq = ?", main, seq)
    codes = []
    for n, seq in enumerate([1, 8, 3, 4, 5, 6, 9, 10, 11, 999]):
        codes.append(
            (seq, error(await react(client, main, seq, "👍", 0, f"t-{n}"), Code.NOT_REACTION_TARGET))
        )
    assert [(seq, found["data"]) for seq, found in codes] == [
        (seq, {"code": "not_reaction_target"}) for seq, _ in codes
    ]
    assert result(await react(client, main, 7, "👍", 0, "t-ok"))["reactions"] == {
        "owner": "👍",
        "revision": 1,
    }
    snapshots = result(await reactions(client, main, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]))["messages"]
    assert [(s["message_seq"], s["reaction_eligible"], s["reactions"]) for s in snapshots] == [
        (1, False, {"revision": 0}),
        (2, True, {"revision": 0}),
        (3, False, {"revision": 0}),
        (4, False, {"revision": 0}),
        (5, False, {"revision": 0}),
        (6, False, {"revision": 0}),
        (7, True, {"owner": "👍", "revision": 1}),
        (8, False, {"revision": 0}),
        (9, False, {"revision": 0}),
        (10, False, {"revision": 0}),
    ]
    # History never shows the hidden message or the hidden records; the others it marks ineligible.
    assert [(m["message_seq"], m["role"], m["reaction_eligible"]) for m in await history(client, main)] == [
        (8, "user", False),
        (7, "assistant", True),
        (6, "assistant", False),
        (5, "assistant", False),
        (4, "assistant", False),
        (2, "assistant", True),
        (1, "user", False),
    ]
    assert space.rows(REACTION_ROWS) == [(main, 7, "👍", None, 1)]
    assert space.rows("SELECT request_id FROM reaction_receipts") == [("t-ok",)]


async def test_a_session_other_than_the_main_one_is_not_found(space: Space, client: Any) -> None:
    """Neither an unknown session nor another session of the store (a task's) is reacted to or read."""
    await say(client, space, "say Done")
    execute(space, "INSERT INTO sessions VALUES ('ses_task_1', 'task', '2026-03-01T12:00:00.000000Z')")
    execute(
        space,
        "INSERT INTO messages (session_id, seq, role, text, created_at) VALUES (?, 1, 'assistant', ?, ?)",
        "ses_task_1",
        "Task result",
        "2026-03-01T12:00:00.000000Z",
    )
    found = [
        error(await react(client, "ses_task_1", 1, "👍", 0, "x-1"), Code.NOT_FOUND)["data"],
        error(await react(client, "ses_nobody", 2, "👍", 0, "x-2"), Code.NOT_FOUND)["data"],
        error(await reactions(client, "ses_task_1", [1]), Code.NOT_FOUND)["data"],
        error(await reactions(client, "ses_nobody", [2]), Code.NOT_FOUND)["data"],
    ]
    assert found == [{"code": "not_found"}] * 4
    assert space.count("reactions") == 0
    assert space.count("reaction_receipts") == 0


async def test_agents_reactions_limits_and_order(space: Space, client: Any) -> None:
    """At most 100 sequences, no repeats; unknown ones left out; request order kept."""
    main = space.main
    await say(client, space, "reply 2")  # 1 user, 2 and 3 assistant
    result(await react(client, main, 3, "🎉", 0, "o-1"))
    hundred = [3, 50, 1, 7, 2, *range(100, 195)]
    assert len(hundred) == 100
    assert result(await reactions(client, main, hundred)) == {
        "session_id": main,
        "messages": [
            {"message_seq": 3, "reaction_eligible": True, "reactions": {"owner": "🎉", "revision": 1}},
            {"message_seq": 1, "reaction_eligible": False, "reactions": {"revision": 0}},
            {"message_seq": 2, "reaction_eligible": True, "reactions": {"revision": 0}},
        ],
    }
    assert result(await reactions(client, main, [404])) == {"session_id": main, "messages": []}
    refused = [
        list(range(1, 102)),  # 101
        [2, 3, 2],  # a repeat
        [],
    ]
    fields = [error(await reactions(client, main, seqs), Code.INVALID_PARAMS)["data"] for seqs in refused]
    assert fields == [{"code": "invalid_params", "field": "params.message_seqs"}] * 3
    zero = error(await reactions(client, main, [0]), Code.INVALID_PARAMS)["data"]
    assert zero == {"code": "invalid_params", "field": "params.message_seqs.0"}


# --- invalidation -------------------------------------------------------------------------------------------


async def test_every_client_gets_one_content_free_notice_per_write(space: Space, serve: Serve) -> None:
    first, second, third = await serve(space, 3)
    main = space.main
    await say(first, space, "reply 2")
    assert [await wire.received() for wire in (first, second, third)] == [[], [], []]
    result(await react(second, main, 3, "🎉", 0, "n-1"))
    notice = {
        "jsonrpc": "2.0",
        "method": "plugin/client/invalidate",
        "params": {
            "graph_generation": first.generation,
            "plugin_id": PLUGIN_ID,
            "topic": "reactions",
            "session_id": main,
            "message_seqs": [3],
        },
    }
    received = [await wire.received() for wire in (first, second, third)]
    assert received == [[notice]] * 3
    assert set(received[0][0]["params"]) == INVALIDATE_KEYS
    # A refused write (stale, not a target) and a replay send nothing; a removal is a write like any other.
    error(await react(first, main, 3, "👍", 0, "n-2"), Code.STALE_REVISION)
    error(await react(first, main, 1, "👍", 0, "n-3"), Code.NOT_REACTION_TARGET)
    assert result(await react(third, main, 3, "🎉", 0, "n-1"))["replayed"] is True
    assert [await wire.received() for wire in (first, second, third)] == [[], [], []]
    result(await react(first, main, 3, None, 1, "n-4"))
    cleared = {**notice, "params": {**notice["params"], "message_seqs": [3]}}
    assert [await wire.received() for wire in (first, second, third)] == [[cleared]] * 3


async def test_a_failed_notice_does_not_undo_the_write(space: Space, serve: Serve, clock: Clock) -> None:
    (wire, watcher) = await serve(space, 2)
    main = space.main
    await say(wire, space, "say Done")
    tried: list[dict[str, Any]] = []

    def broken(params: Any) -> object:
        tried.append(params.to_wire())
        raise OSError("the invalidation service is down")

    space.plugin.notify = broken
    stamp = at(clock, T1)
    written = result(await react(wire, main, 2, "👍", 0, "b-1"))
    assert written == {
        "session_id": main,
        "message_seq": 2,
        "reactions": {"owner": "👍", "revision": 1},
        "receipt": receipt("b-1", main, 2, "👍", 0, 1, stamp),
        "replayed": False,
    }
    assert [t["message_seqs"] for t in tried] == [[2]]
    assert space.rows(REACTION_ROWS) == [(main, 2, "👍", None, 1)]
    assert space.rows(RECEIPT_ROWS) == [("b-1", main, 2, "owner", "👍", 0, 1, stamp)]
    assert result(await reactions(watcher, main, [2]))["messages"][0]["reactions"] == {
        "owner": "👍",
        "revision": 1,
    }
    assert result(await react(wire, main, 2, "🎉", 1, "b-2"))["reactions"] == {"owner": "🎉", "revision": 2}
    assert await watcher.received() == []


# --- restart ------------------------------------------------------------------------------------------------


async def test_reactions_and_receipts_survive_a_restart(
    start_space: StartSpace, serve: Serve, clock: Clock
) -> None:
    before_agent = ScriptedAgent()
    space = await start_space(agent=before_agent)
    (wire,) = await serve(space, 1)
    main = space.main
    await say(wire, space, "reply 2")  # 1 user, 2 and 3 assistant
    await say(wire, space, "react 1 🙏")  # 4 user; the agent reacts to 1
    at(clock, T1)
    k1 = result(await react(wire, main, 2, "👍", 0, "k-1"))
    at(clock, T2)
    k2 = result(await react(wire, main, 2, "🎉", 1, "k-2"))
    at(clock, T3)
    k3 = result(await react(wire, main, 3, None, 0, "k-3"))
    seqs = [1, 2, 3, 4]
    snapshots = result(await reactions(wire, main, seqs))
    page = await history(wire, main)
    rows = (space.rows(REACTION_ROWS), space.rows(RECEIPT_ROWS))
    await wire.close()
    await space.host.close()

    after_agent = ScriptedAgent()
    again = await start_space(agent=after_agent)
    assert again.main == main
    (wire,) = await serve(again, 1)
    assert (again.rows(REACTION_ROWS), again.rows(RECEIPT_ROWS)) == rows
    assert rows[0] == [(main, 1, None, "🙏", 1), (main, 2, "🎉", None, 2), (main, 3, None, None, 1)]
    assert result(await reactions(wire, main, seqs)) == snapshots
    assert await history(wire, main) == page
    replays = [
        result(await react(wire, main, 2, "👍", 0, "k-1")),
        result(await react(wire, main, 2, "🎉", 1, "k-2")),
        result(await react(wire, main, 3, None, 0, "k-3")),
    ]
    assert [(r["replayed"], r["reactions"], r["receipt"]) for r in replays] == [
        (True, {"owner": "🎉", "revision": 2}, k1["receipt"]),
        (True, {"owner": "🎉", "revision": 2}, k2["receipt"]),
        (True, {"revision": 1}, k3["receipt"]),
    ]
    error(await react(wire, main, 2, "😂", 2, "k-1"), Code.REQUEST_ID_CONFLICT)
    assert result(await react(wire, main, 2, "😂", 2, "k-4"))["reactions"] == {"owner": "😂", "revision": 3}
    # The owner's changes made before the restart reach the agent's next step.
    await say(wire, again, "after restart")
    assert [(c.message_seq, c.owner, c.excerpt) for c in after_agent.steps[-1].reactions] == [
        (2, "😂", "answer 1"),
        (3, None, "answer 2"),
    ]


# --- the agent ----------------------------------------------------------------------------------------------


async def test_the_agent_reacts_to_user_messages_only(
    space: Space, client: Any, agent: ScriptedAgent
) -> None:
    main = space.main
    await say(client, space, "react 1 👍")  # 1: the agent reacts to this very input
    await say(client, space, "react 1 🎉")  # 2: and replaces its reaction
    await say(client, space, "say Sure")  # 3 user, 4 assistant
    await say(client, space, "react 4 👍")  # 5: an assistant message is not its target
    await say(client, space, "reason")  # 6 user, 7 and 8 hidden records
    await say(client, space, "react 7 👍")  # 9
    await say(client, space, "react 404 👍")  # 10
    await say(client, space, "unreact 1")  # 11: removes its reaction from 1
    assert agent.reacted == [{"agent": "👍", "revision": 1}, {"agent": "🎉", "revision": 2}, {"revision": 3}]
    assert agent.refused == [
        (4, Code.NOT_REACTION_TARGET),
        (7, Code.NOT_REACTION_TARGET),
        (404, Code.NOT_REACTION_TARGET),
    ]
    assert space.rows(REACTION_ROWS) == [(main, 1, None, None, 3)]
    receipts = space.rows(
        "SELECT request_id, message_seq, actor, emoji, expected_revision, revision FROM reaction_receipts "
        "ORDER BY id"
    )
    assert [row[1:] for row in receipts] == [
        (1, "agent", "👍", 0, 1),
        (1, "agent", "🎉", 1, 2),
        (1, "agent", None, 2, 3),
    ]
    assert all(row[0].startswith("agent-") for row in receipts) and len({row[0] for row in receipts}) == 3
    # The agent's own reactions are not owner feedback: no step is shown them.
    assert [seen.reactions for seen in agent.steps] == [()] * 8


async def test_the_agent_reaction_state_is_what_clients_read(
    space: Space, client: Any, agent: ScriptedAgent
) -> None:
    """The agent's emoji sits beside the owner's revision count, never in the owner's place."""
    main = space.main
    await say(client, space, "react 1 🙏")
    assert result(await reactions(client, main, [1]))["messages"] == [
        {"message_seq": 1, "reaction_eligible": False, "reactions": {"agent": "🙏", "revision": 1}}
    ]
    (user,) = [m for m in await history(client, main) if m["message_seq"] == 1]
    assert (user["role"], user["reaction_eligible"], user["reactions"]) == (
        "user",
        False,
        {"agent": "🙏", "revision": 1},
    )
    error(await react(client, main, 1, "👍", 1, "owner-on-user"), Code.NOT_REACTION_TARGET)
    assert space.rows(REACTION_ROWS) == [(main, 1, None, "🙏", 1)]


async def test_the_agent_reaction_notifies_clients(space: Space, serve: Serve, agent: ScriptedAgent) -> None:
    """Seed 003: "A successful write emits a content-free reactions invalidation"; the agent's write is
    one (it increments the revision clients hold)."""
    (wire, watcher) = await serve(space, 2)
    await say(wire, space, "react 1 👍")
    assert agent.reacted == [{"agent": "👍", "revision": 1}]
    assert [n["params"] for n in await watcher.received()] == [
        {
            "graph_generation": watcher.generation,
            "plugin_id": PLUGIN_ID,
            "topic": "reactions",
            "session_id": space.main,
            "message_seqs": [1],
        }
    ]


# --- the snapshot of the agent's next step -------------------------------------------------------------------


async def test_the_next_step_sees_a_bounded_coalesced_snapshot(
    space: Space, client: Any, agent: ScriptedAgent
) -> None:
    main = space.main
    await say(client, space, "reply 30")  # 1 user, 2..31 assistant: `answer 1` .. `answer 30`
    assert len(agent.steps) == 1
    latest: dict[int, str | None] = {}  # message -> owner's emoji, in the order of their latest change
    revisions: dict[int, int] = {}

    async def owner(seq: int, emoji: str | None) -> None:
        revision = revisions.get(seq, 0)
        written = result(await react(client, main, seq, emoji, revision, f"s-{seq}-{revision}"))
        assert written["reactions"]["revision"] == revision + 1
        revisions[seq] = revision + 1
        latest.pop(seq, None)
        latest[seq] = emoji

    for seq in range(2, 32):
        await owner(seq, "👍")
    await owner(5, "🎉")
    await owner(5, "❤️")
    await owner(10, None)
    await owner(3, "🔥")
    await owner(31, "😂")
    # No write started a step, and none is a message.
    await space.idle()
    assert len(agent.steps) == 1
    assert space.count("messages") == 31

    await say(client, space, "look")  # step 2
    changes = agent.steps[1].reactions
    expected = list(reversed(latest))[:24]
    assert expected[:5] == [31, 3, 10, 5, 30]
    assert [(c.message_seq, c.owner) for c in changes] == [(seq, latest[seq]) for seq in expected]
    assert [c.excerpt for c in changes[1:]] == [f"answer {seq - 1}" for seq in expected[1:]]
    long = long_answer(30)
    assert long.startswith(changes[0].excerpt) and 0 < len(changes[0].excerpt) < len(long)
    assert len(changes[0].excerpt) <= 200
    # Step 2 assembled its context: the snapshot is superseded.
    await say(client, space, "again")  # step 3
    assert agent.steps[2].reactions == ()
    assert len(agent.steps) == 3


async def test_a_step_that_assembles_nothing_keeps_the_snapshot(
    space: Space, client: Any, agent: ScriptedAgent
) -> None:
    main = space.main
    await say(client, space, "reply 2")  # 1 user, 2 and 3 assistant
    result(await react(client, main, 3, "👀", 0, "h-1"))
    await say(client, space, "hold")  # step 2 assembles nothing
    await say(client, space, "next")  # step 3 (the held input still waits)
    await say(client, space, "last")  # step 4
    assert [(s.pending, [(c.message_seq, c.owner, c.excerpt) for c in s.reactions]) for s in agent.steps] == [
        (["reply 2"], []),
        (["hold"], [(3, "👀", "answer 2")]),
        (["hold", "next"], [(3, "👀", "answer 2")]),
        (["last"], []),
    ]


async def test_feedback_given_after_a_seen_snapshot_reaches_the_next_step(
    space: Space, client: Any, agent: ScriptedAgent
) -> None:
    """A change made after a step consumed the snapshot is new feedback for the following step."""
    main = space.main
    await say(client, space, "reply 2")  # 1 user, 2 and 3 assistant
    result(await react(client, main, 2, "👍", 0, "f-1"))
    result(await react(client, main, 3, "🎉", 0, "f-2"))
    await say(client, space, "look")  # step 2 sees both and assembles
    result(await react(client, main, 2, "😂", 1, "f-3"))
    await say(client, space, "and now")  # step 3
    assert [[(c.message_seq, c.owner) for c in s.reactions] for s in agent.steps] == [
        [],
        [(3, "🎉"), (2, "👍")],
        [(2, "😂")],
    ]
