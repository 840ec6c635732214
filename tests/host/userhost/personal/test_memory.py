"""The Personal Memory service (host/userhost/personal/memory.py, spec/schema/userhost/memory.schema.json).

Covered, on a real SQLite store: a save is version 1 attributed to its agent; a correction is a new version
with its own attribution and leaves the earlier one as it was; a query matches the current text of active
memories case-insensitively, the most recently changed first, at most 20; forgetting NULLs every version's
text and leaves neither text in the store's files (the database and its log, read as bytes), and a forgotten
memory is never listed, corrected or forgotten again; a forget cut by a kill before its checkpoint leaves no
text once the store opens again; refusals say why and change nothing; memories survive a reopen of the store.
Through the host's main agent (the stand-in's `/remember`, `/recall`, `/correct`, `/forget`): the conversation
shows each result, attributed to the user message it answers; a host of the `coding` product domain of the
same home and user space sees none of the Personal memories, and they none of its.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from wuu.generated.models import MemoryAuthor, MemoryStatus
from wuu.host.userhost import UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import PersonalPlugin, personal
from wuu.host.userhost.personal.memory import MemoryService
from wuu.host.userhost.personal.memory_ledger import Attribution
from wuu.host.userhost.personal.model_agent import main_tools, task_tools
from wuu.host.userhost.personal.sqlite.store import STORE_FILE, SqliteSessionDomain

from .conftest import Attach, Clock, Space, main_session, result, send

MAIN = Attribution.main_agent("main-session", 7)
TASK = Attribution.task("task-1", "task-session", None)
UNKNOWN = "mem_" + "0" * 32
SENT = itertools.count(1)
SAVED = re.compile(r"remembered (mem_[0-9a-f]{32}) \(version 1\): (.*)", re.DOTALL)


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[SqliteSessionDomain]:
    """The bundled store on a file of its own."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    opened = await SqliteSessionDomain.open(state, "local", "personal", clock())
    yield opened
    await opened.close()


@pytest.fixture
def memory(store: SqliteSessionDomain, clock: Clock) -> MemoryService:
    return MemoryService(store.memory_ledger(), clock)


async def saved(memory: MemoryService, text: str, attribution: Attribution = MAIN) -> str:
    """Save `text`; the new memory's ID, read from what the agent is told."""
    told = await memory.call("memory_save", {"text": text}, attribution)
    match = SAVED.fullmatch(told)
    assert match is not None and match.group(2) == text, told
    return match.group(1)


def store_bytes(store: SqliteSessionDomain) -> bytes:
    """Everything the store's files hold: the database and its write-ahead log."""
    path = store.database.path
    return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())


async def test_a_save_is_version_1_attributed_to_its_agent(memory: MemoryService, clock: Clock) -> None:
    memory_id = await saved(memory, "My sister is called Ana.")
    record = await memory.ledger.record(memory_id)
    assert (record.status, record.version, record.text) == (
        MemoryStatus.ACTIVE,
        1,
        "My sister is called Ana.",
    )
    [version] = record.versions
    assert version.attribution.by == MemoryAuthor.MAIN_AGENT
    assert (version.attribution.session_id, version.attribution.message_seq) == ("main-session", 7)
    assert version.attribution.task_id is None and version.created_at.startswith("2026-03-01T12:00:00.")


async def test_a_correction_is_a_new_version_and_keeps_the_earlier_one(memory: MemoryService) -> None:
    memory_id = await saved(memory, "My sister is called Ana.")
    before = (await memory.ledger.record(memory_id)).versions[0]
    told = await memory.call("memory_correct", {"memory_id": memory_id, "text": "My sister is Anna."}, TASK)
    assert told == f"corrected {memory_id} (version 2): My sister is Anna."
    record = await memory.ledger.record(memory_id)
    assert (record.version, record.text) == (2, "My sister is Anna.")
    assert record.versions[0] == before  # text, attribution and time as they were
    second = record.versions[1].attribution
    assert (second.by, second.task_id, second.session_id, second.message_seq) == (
        MemoryAuthor.TASK,
        "task-1",
        "task-session",
        None,
    )
    assert await memory.call("memory_query", {"query": "sister"}, MAIN) == (
        f"{memory_id} v2: My sister is Anna. (corrected by task task-1)"
    )


async def test_a_query_matches_case_insensitively_the_newest_first_at_most_20(memory: MemoryService) -> None:
    ids = [await saved(memory, f"Trip {number} to Lisbon") for number in range(25)]
    street = await saved(memory, "Lives on Hauptstraße")
    lines = (await memory.call("memory_query", {"query": "LISBON"}, MAIN)).split("\n")
    assert lines == [
        f"{ids[n]} v1: Trip {n} to Lisbon (saved by main agent, message 7)" for n in range(24, 4, -1)
    ]
    # Unicode case folding: "ß" folds to "ss".
    assert (await memory.call("memory_query", {"query": "STRASSE"}, MAIN)).startswith(f"{street} v1: ")
    # A correction makes a memory the most recent; an empty query lists the most recent of all.
    await memory.call("memory_correct", {"memory_id": ids[0], "text": "Trip 0 to Porto"}, MAIN)
    everything = (await memory.call("memory_query", {"query": ""}, MAIN)).split("\n")
    assert len(everything) == 20
    assert everything[:2] == [
        f"{ids[0]} v2: Trip 0 to Porto (corrected by main agent, message 7)",
        f"{street} v1: Lives on Hauptstraße (saved by main agent, message 7)",
    ]
    # Only the current text matches.
    assert ids[0] not in await memory.call("memory_query", {"query": "0 to Lisbon"}, MAIN)
    assert await memory.call("memory_query", {"query": "Madrid"}, MAIN) == "no memories match"


async def test_forgetting_removes_every_version_s_text_from_the_store_s_files(
    memory: MemoryService, store: SqliteSessionDomain
) -> None:
    first = "passport number X-" + "7" * 3000  # longer than a page: it fills overflow pages
    second = "passport number Y-4242-corrected"
    kept = await saved(memory, "Likes green tea")
    memory_id = await saved(memory, first)
    await memory.call("memory_correct", {"memory_id": memory_id, "text": second}, MAIN)
    # An overflowing text is split over pages: its first bytes stand for it.
    marks = (first[:40].encode(), second.encode())
    held = store_bytes(store)
    assert all(mark in held for mark in marks)  # the check below can fail
    told = await memory.call("memory_forget", {"memory_id": memory_id}, MAIN)
    assert told == (
        f"forgot {memory_id}: its text is redacted; conversations, files and backups are not erased"
    )
    held = store_bytes(store)
    assert not any(mark in held for mark in marks)
    assert b"Likes green tea" in held  # the other memory is untouched
    with_texts = await store.database.read(
        lambda c: c.execute(
            "SELECT version, text FROM memory_versions WHERE memory_id = ?", (memory_id,)
        ).fetchall()
    )
    assert with_texts == [(1, None), (2, None)]
    record = await memory.ledger.record(memory_id)
    assert (record.status, record.version, record.text) == (MemoryStatus.FORGOTTEN, 2, None)
    assert [version.text for version in record.versions] == [None, None]
    assert [version.attribution.by for version in record.versions] == [MemoryAuthor.MAIN_AGENT] * 2
    assert record.forgotten_at is not None
    assert (await memory.ledger.record(kept)).text == "Likes green tea"


CUT_FORGET = """
import asyncio, os, signal, sys
from datetime import UTC, datetime
from pathlib import Path
from wuu.host.userhost.personal.memory_ledger import Attribution
from wuu.host.userhost.personal.sqlite import memory
from wuu.host.userhost.personal.sqlite.store import STORE_FILE, SqliteSessionDomain

async def main() -> None:
    now = datetime.now(UTC)
    store = await SqliteSessionDomain.open(Path(sys.argv[1]), "local", "personal", now)
    ledger = store.memory_ledger()
    saved = await ledger.save("mem_" + "1" * 32, sys.argv[2], Attribution.main_agent("main", 1), now)
    # The forget commits, and the host dies before the ledger's checkpoint that follows it: its writer
    # process first, so that it cannot close the file in order (which would checkpoint it) when the host ends.
    await store.database.write(memory.forget, saved.memory_id, now)
    writer = store.database._writer
    assert writer is not None
    writer.kill()
    await writer.wait()
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


async def test_a_forget_cut_before_its_checkpoint_leaves_no_text_once_the_store_opens(
    tmp_path: Path, clock: Clock
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    text = f"passport number Z-{secrets.token_hex(8)}"
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", CUT_FORGET, str(state), text)
    assert await child.wait() == -signal.SIGKILL
    log = state / f"{STORE_FILE}-wal"
    assert text.encode() in log.read_bytes()  # the check below can fail
    store = await SqliteSessionDomain.open(state, "local", "personal", clock())
    try:
        assert text.encode() not in store_bytes(store)
        record = await store.memory_ledger().record("mem_" + "1" * 32)
        assert (record.status, record.text) == (MemoryStatus.FORGOTTEN, None)
    finally:
        await store.close()


async def test_a_forgotten_memory_is_never_listed_corrected_or_forgotten_again(memory: MemoryService) -> None:
    memory_id = await saved(memory, "Allergic to peanuts")
    await memory.call("memory_forget", {"memory_id": memory_id}, MAIN)
    for query in ("", "peanuts", "ALLERGIC"):
        assert await memory.call("memory_query", {"query": query}, MAIN) == "no memories match"
    forgotten = f"refused (memory_forgotten): {memory_id} is forgotten"
    correct = {"memory_id": memory_id, "text": "Not allergic after all"}
    assert await memory.call("memory_correct", correct, MAIN) == forgotten
    assert await memory.call("memory_forget", {"memory_id": memory_id}, TASK) == forgotten
    record = await memory.ledger.record(memory_id)
    assert (record.version, len(record.versions)) == (1, 1)


@pytest.mark.parametrize(
    ("tool", "arguments", "told"),
    [
        (
            "memory_correct",
            {"memory_id": UNKNOWN, "text": "x"},
            f"refused (memory_not_found): no memory {UNKNOWN}",
        ),
        ("memory_forget", {"memory_id": UNKNOWN}, f"refused (memory_not_found): no memory {UNKNOWN}"),
        ("memory_save", {"text": "é" * 2049}, "refused (invalid_arguments): text: "),
        ("memory_save", {"text": ""}, "refused (invalid_arguments): text: "),
        ("memory_save", {}, "refused (invalid_arguments): arguments: "),
        ("memory_query", {"query": "q" * 257}, "refused (invalid_arguments): query: "),
        ("memory_forget", {"memory_id": "mem_XYZ"}, "refused (invalid_arguments): memory_id: "),
        ("memory_save", {"text": "x", "importance": 3}, "refused (invalid_arguments): arguments: "),
    ],
)
async def test_a_refused_call_says_why_and_changes_nothing(
    memory: MemoryService, tool: str, arguments: dict[str, Any], told: str
) -> None:
    assert (await memory.call(tool, arguments, MAIN)).startswith(told)
    assert await memory.call("memory_query", {"query": ""}, MAIN) == "no memories match"


async def test_the_largest_text_is_kept_exactly(memory: MemoryService) -> None:
    text = "é" * 2048  # 4,096 UTF-8 bytes
    memory_id = await saved(memory, text)
    assert (await memory.ledger.record(memory_id)).text == text


async def test_memories_survive_a_reopen(tmp_path: Path, clock: Clock) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    store = await SqliteSessionDomain.open(state, "local", "personal", clock())
    memory = MemoryService(store.memory_ledger(), clock)
    memory_id = await saved(memory, "Anniversary on 12 June")
    await memory.call("memory_correct", {"memory_id": memory_id, "text": "Anniversary on 14 June"}, TASK)
    before = await memory.ledger.record(memory_id)
    await store.close()
    reopened = await SqliteSessionDomain.open(state, "local", "personal", clock())
    try:
        assert await reopened.memory_ledger().record(memory_id) == before
    finally:
        await reopened.close()


# --- through the main agent ----------------------------------------------------------------------------


def test_the_main_agent_and_tasks_are_offered_the_memory_tools_with_the_spec_s_arguments() -> None:
    offered = {tool.name: tool.parameters for tool in main_tools()}
    assert {tool.name: tool.parameters for tool in task_tools()}.items() <= offered.items()
    correct = offered["memory_correct"]
    assert correct["required"] == ["memory_id", "text"] and correct["additionalProperties"] is False
    assert correct["properties"]["memory_id"]["pattern"] == "^mem_[0-9a-f]{32}$"
    assert correct["properties"]["text"]["maxLength"] == 4096
    assert offered["memory_save"]["required"] == ["text"]
    assert offered["memory_query"]["properties"]["query"]["maxLength"] == 256
    assert offered["memory_forget"]["required"] == ["memory_id"]


async def say(host: UserHost, plugin: PersonalPlugin, client: UserHostClient, text: str) -> tuple[int, str]:
    """Send `text` in the main conversation and wait for the agent: (the user message's sequence, the agent's
    reply after it)."""
    main = await main_session(client)
    number = next(SENT)
    envelope = {"client_input_id": f"in-{number}", "request_id": f"req-{number}", "text": text}
    seq = result(await send(client, main, envelope))["receipt"]["history_seq"]
    await plugin.agent.idle.wait()
    await host.wait_idle()
    store = plugin.store
    assert isinstance(store, SqliteSessionDomain)
    replies = await store.database.read(
        lambda c: c.execute(
            "SELECT text FROM messages WHERE session_id = ? AND role = 'assistant' AND kind = 'text' AND seq > ?"
            " ORDER BY seq",
            (main, seq),
        ).fetchall()
    )
    assert len(replies) == 1, replies
    return seq, str(replies[0][0])


async def test_the_main_agent_remembers_corrects_and_forgets_in_conversation(
    space: Space, client: UserHostClient
) -> None:
    seq, reply = await say(space.host, space.plugin, client, "/remember My sister is called Ana.")
    match = SAVED.fullmatch(reply)
    assert match is not None and match.group(2) == "My sister is called Ana.", reply
    memory_id = match.group(1)
    ledger = space.plugin.store.memory_ledger()
    attribution = (await ledger.record(memory_id)).versions[0].attribution
    assert (attribution.by, attribution.session_id, attribution.message_seq) == (
        MemoryAuthor.MAIN_AGENT,
        space.main,
        seq,
    )
    corrected_at, reply = await say(
        space.host, space.plugin, client, f"/correct {memory_id} My sister is Anna."
    )
    assert reply == f"corrected {memory_id} (version 2): My sister is Anna."
    _, reply = await say(space.host, space.plugin, client, "/recall SISTER")
    assert reply == f"{memory_id} v2: My sister is Anna. (corrected by main agent, message {corrected_at})"
    _, reply = await say(space.host, space.plugin, client, f"/forget {memory_id}")
    assert (
        reply == f"forgot {memory_id}: its text is redacted; conversations, files and backups are not erased"
    )
    _, reply = await say(space.host, space.plugin, client, "/recall sister")
    assert reply == "no memories match"
    _, reply = await say(space.host, space.plugin, client, f"/correct {memory_id} My sister is Ana again.")
    assert reply == f"refused (memory_forgotten): {memory_id} is forgotten"


@pytest.fixture
async def coding(home: Path, clock: Clock) -> AsyncIterator[tuple[UserHost, PersonalPlugin]]:
    """A host of the `coding` product domain of the test's home and user space, with the same composition."""
    plugins: list[PersonalPlugin] = []
    host = await UserHost.start(
        user_space_id="local",
        product_domain="coding",
        home=home,
        composition_profile="personal",
        compose=[personal(started=plugins.append, clock=clock)],
    )
    yield host, plugins[0]
    await host.close()


async def test_a_coding_host_of_the_same_space_sees_no_personal_memory(
    space: Space, client: UserHostClient, coding: tuple[UserHost, PersonalPlugin], attach: Attach
) -> None:
    _, reply = await say(space.host, space.plugin, client, "/remember Personal: my sister is Ana.")
    assert SAVED.fullmatch(reply), reply
    coding_host, coding_plugin = coding
    coding_client = await attach(coding_host)
    _, reply = await say(coding_host, coding_plugin, coding_client, "/recall")
    assert reply == "no memories match"
    _, reply = await say(coding_host, coding_plugin, coding_client, "/recall sister")
    assert reply == "no memories match"
    _, reply = await say(coding_host, coding_plugin, coding_client, "/remember Coding: tabs, not spaces.")
    assert SAVED.fullmatch(reply), reply
    _, reply = await say(space.host, space.plugin, client, "/recall")
    assert reply.startswith("mem_") and "Personal: my sister is Ana." in reply and "Coding" not in reply
    coding_memories = await coding_plugin.store.memory_ledger().query("", 20)
    assert [record.text for record in coding_memories] == ["Coding: tabs, not spaces."]
