"""Kill -9 of the Personal host while the main agent corrects and forgets memories (row `userhost.memory.correct`).

The row drives one real `wuu-userhost serve` process of the Personal composition on one home, as the approval
and task rows do (tools/chaos/approval_kills.py: its real SQLite store, the deterministic stand-in agent, whose
memory intents `/remember TEXT`, `/recall [QUERY]`, `/correct MEMORY_ID TEXT` and `/forget MEMORY_ID` it answers
with the Memory service's result as is). At every point an owner saves a few memories; then two owners, on
connections of their own, send `/correct` and `/forget` requests (and a `/remember` each) while a third watches
the conversation, and the host is killed with SIGKILL after a seeded number of acknowledged sends. Every
process it ran must end with it, and a host restarted on the same home must keep what
spec/schema/userhost/memory.schema.json promises:

- every memory whose `remembered` reply was seen exists, saved once; a save in flight saved it once or not at all;
- every correction whose `corrected MEMORY_ID (version N): TEXT` reply was seen is version N of that memory,
  with that text unless the memory is forgotten since; no correction is there twice;
- a memory's versions run from 1 to its current version with none missing (a correction in flight is a whole
  new version or absent), each attributed to the main agent in the main conversation, answering the owner's
  message that asked for it;
- a memory whose `forgot` reply was seen is forgotten (and only one whose forget was sent is); a forgotten
  memory's versions have no text, no page of the memory tables in the store's file or its write-ahead log holds
  any of its texts (the conversation's own messages keep theirs: forgetting does not erase conversations), and
  `/recall` never lists it, while it lists every active memory of the point as its current version says.
"""

from __future__ import annotations

import asyncio
import random
import re
import secrets
import struct
import time
from collections import Counter
from functools import partial
from typing import Any

from wuu.host.userhost.client import UserHostClient

from .approval_kills import POLL_S, Problem, Space, call, check_store, row, until
from .campaign import Campaign
from .task_kills import Lane, Load, answer, kill_after, newest_seq, send, since

SAVES = 4
"""Memories saved (their replies seen) before the load."""
CORRECTIONS = 3
"""The most corrections the load asks of each saved memory."""
FORGET_CHANCE = 0.5
"""How likely the load forgets a saved memory (at a seeded place among the requests)."""
LANES = 2
MAX_RECALLED = 20
"""The most memories one `/recall` lists (spec/schema/userhost/memory.schema.json, `MemoryQueryArguments`)."""
REMEMBERED = re.compile(r"remembered (mem_[0-9a-f]+) \(version 1\): (.*)", re.DOTALL)
CORRECTED = re.compile(r"corrected (mem_[0-9a-f]+) \(version (\d+)\): (.*)", re.DOTALL)
FORGOT = re.compile(r"forgot (mem_[0-9a-f]+): ")
RECALLED = re.compile(r"(mem_[0-9a-f]+) v(\d+): (.*) \((saved|corrected) by main agent, message (\d+)\)")
MEMORY_TABLES = ("memories", "memory_versions")
"""The store's tables that hold memories: after a forget, none of their pages holds its texts."""
WAL_HEADER, FRAME_HEADER = 32, 24
"""The sizes of a write-ahead log's header and of each frame's header (the SQLite file format)."""


def text_for(point: int, memory: str, version: str) -> str:
    """A unique memory text of a kill point."""
    return f"pt{point}.{memory}.{version}-{secrets.token_hex(4)}"


# --- the store, read directly ---------------------------------------------------------------------


def memories(space: Space) -> dict[str, tuple[str, int, str | None]]:
    """Every memory of the store by ID: (status, current version, forgotten_at)."""
    return {
        memory_id: (status, version, forgotten_at)
        for memory_id, status, version, forgotten_at in space.rows(
            "SELECT memory_id, status, version, forgotten_at FROM memories"
        )
    }


def versions(space: Space, memory_id: str) -> list[tuple[Any, ...]]:
    """The memory's versions, oldest first: (version, text, author, session_id, task_id, message_seq)."""
    return space.rows(
        "SELECT version, text, author, session_id, task_id, message_seq FROM memory_versions "
        "WHERE memory_id = ? ORDER BY version",
        memory_id,
    )


def user_message(space: Space, seq: int | None) -> str | None:
    """The text of the owner's message at `seq` of the main conversation, or None."""
    found = space.rows(
        "SELECT text FROM messages WHERE session_id = ? AND seq = ? AND role = 'user'", space.main, seq
    )
    return str(found[0][0]) if found else None


def memory_pages(space: Space) -> set[int]:
    """The pages of the memory tables and their indexes, as the store stands now."""
    names = [
        name
        for (name,) in space.rows("SELECT name FROM sqlite_schema WHERE tbl_name IN (?, ?)", *MEMORY_TABLES)
    ]
    placeholders = ",".join("?" * len(names))
    return {
        page for (page,) in space.rows(f"SELECT pageno FROM dbstat WHERE name IN ({placeholders})", *names)
    }


def pages_holding(space: Space, mark: bytes) -> set[int]:
    """The pages whose image in the store's file or in a frame of its write-ahead log holds `mark`."""
    ((size,),) = space.rows("PRAGMA page_size")
    found = set()
    data = space.database.read_bytes()
    for start in range(0, len(data), size):
        if mark in data[start : start + size]:
            found.add(start // size + 1)
    wal = space.database.with_name(space.database.name + "-wal")
    log = wal.read_bytes() if wal.exists() else b""
    for start in range(WAL_HEADER, len(log) - FRAME_HEADER, FRAME_HEADER + size):
        if mark in log[start + FRAME_HEADER : start + FRAME_HEADER + size]:
            found.add(struct.unpack(">I", log[start : start + 4])[0])
    return found


# --- the point ------------------------------------------------------------------------------------


async def remember(space: Space, client: UserHostClient, key: str, text: str) -> str:
    """Ask the main agent to remember `text`; the memory its reply named."""
    receipt = await send(space, client, f"{key}-{time.monotonic_ns()}", f"/remember {text}")
    said = REMEMBERED.fullmatch(await answer(space, client, receipt, "remembered|refused"))
    if said is None or said.group(2) != text:
        raise Problem(f"remembering {text!r} was answered {said}")
    return said.group(1)


async def all_read(space: Space, client: UserHostClient, keys: list[str]) -> bool | None:
    """True once the agent has read every admitted input of these client input IDs, else None."""
    found = (await call(client, "agents.receipts", {"session_id": space.main, "client_input_ids": keys}))[
        "receipts"
    ]
    return True if all(receipt.get("read_at") for receipt in found) else None


async def memory_point(
    space: Space, client: UserHostClient, point: int, rng: random.Random
) -> tuple[UserHostClient, str]:
    start_seq = newest_seq(space)
    known = set(memories(space))
    texts: dict[str, list[str]] = {}
    """Every text sent for each saved memory: its first, then its corrections."""
    for n in range(SAVES):
        first = text_for(point, f"m{n}", "v1")
        texts[await remember(space, client, f"s{point}-{n}", first)] = [first]
    requests: list[str] = []
    for memory_id in texts:
        for k in range(rng.randint(1, CORRECTIONS)):
            correction = text_for(point, memory_id[-6:], f"c{k}")
            texts[memory_id].append(correction)
            requests.append(f"/correct {memory_id} {correction}")
        if rng.random() < FORGET_CHANCE:
            requests.append(f"/forget {memory_id}")
    rng.shuffle(requests)  # a forget may come before a correction of its memory, which it then refuses
    saving = [text_for(point, f"new{lane}", "v1") for lane in range(LANES)]
    lanes: list[list[str]] = [[] for _ in range(LANES)]
    for request in requests:  # each in a seeded lane, in order there: two owners may act on one memory
        lanes[rng.randrange(LANES)].append(request)
    for lane, text in zip(lanes, saving, strict=True):
        lane.insert(rng.randint(0, len(lane)), f"/remember {text}")
    seen = {m["text"] for m in await since(space, client, start_seq) if m["role"] == "assistant"}
    """The agent's replies a client saw before the kill."""

    def owner(mine: list[str]) -> Lane:
        async def sends(connection: UserHostClient, load: Load) -> None:
            for text in mine:
                key = f"p{point}-{len(load.sent)}-{time.monotonic_ns()}"
                load.sent[key] = text
                receipt = await send(space, connection, key, text)
                load.ack(key, receipt)
                # One request at a time: the next is sent once the agent has read this one.
                await until(partial(all_read, space, connection, [key]), f"the request {text!r} was not read")

        return sends

    async def watch(connection: UserHostClient, load: Load) -> None:
        while True:  # each poll is a call: it fails when the host is killed
            seen.update(
                m["text"] for m in await since(space, connection, start_seq) if m["role"] == "assistant"
            )
            await asyncio.sleep(POLL_S)

    load = await kill_after(space, [*(owner(lane) for lane in lanes), watch], len(requests) + LANES, rng)
    client = await space.start()
    # Every request the host admitted is answered (or was cut while the agent read it): once each is read, an
    # input sent after them is answered after them.
    await until(
        partial(all_read, space, client, list(load.sent)), "the requests sent before the kill were not read"
    )
    synced = await send(space, client, f"sync-{time.monotonic_ns()}", f"sync {point}")
    await answer(space, client, synced, re.escape(f"Received: sync {point}"))
    saved, corrected, forgot, applied = check_memories(space, texts, seen, saving, known, load)
    await check_recall(space, client, texts, memories(space))
    check_store(space)
    statuses = Counter(status for memory_id, (status, _, _) in memories(space).items() if memory_id in texts)
    return client, (
        f"killed after {len(load.acknowledged)} of {load.total} sends acknowledged, "
        f"{len(load.sent) - len(load.acknowledged)} in flight; replies seen: {saved} remembered, "
        f"{corrected} corrected, {forgot} forgot; memories {dict(sorted(statuses.items()))}, "
        f"{applied} corrections ({applied - corrected} not told before the kill)"
    )


def check_memories(
    space: Space,
    texts: dict[str, list[str]],
    seen: set[str],
    saving: list[str],
    known: set[str],
    load: Load,
) -> tuple[int, int, int, int]:
    """The store after the restart keeps what the replies `seen` told, and each memory is whole: `texts` has
    every text sent for each saved memory (the memories of the load's `/remember`s of `saving` join it), `known`
    the memories before the point. How many saves, corrections and forgets were seen, and how many corrections
    the memories hold."""
    saved = {m.group(1): m.group(2) for said in seen if (m := REMEMBERED.fullmatch(said))}
    corrected = [
        (m.group(1), int(m.group(2)), m.group(3)) for said in seen if (m := CORRECTED.fullmatch(said))
    ]
    forgot = {m.group(1) for said in seen if (m := FORGOT.match(said))}
    stored = memories(space)
    new = set(stored) - known
    for text in saving:
        holding = [m for m in new if versions(space, m)[0][1] == text]
        if len(holding) > 1:
            raise Problem(f"{text!r} was saved {len(holding)} times: {holding}")
        if holding:
            texts[holding[0]] = [text]
    if unknown := sorted(new - set(texts)):
        raise Problem(f"memories nobody saved: {unknown}")
    for memory_id, text in saved.items():
        if memory_id not in texts or texts[memory_id][0] != text:
            raise Problem(f"the memory {memory_id} of the seen reply {text!r} is not there")
    forgets_sent = {t.split()[1] for t in load.sent.values() if t.startswith("/forget ")}
    applied: Counter[str] = Counter()
    owned = memory_pages(space)
    for memory_id, sent in texts.items():
        status, current, forgotten_at = stored[memory_id]
        found = versions(space, memory_id)
        if [v[0] for v in found] != list(range(1, len(found) + 1)) or current != len(found):
            raise Problem(f"{memory_id} is at version {current} with versions {[v[0] for v in found]}")
        for version, text, author, session_id, task_id, message_seq in found:
            asked = user_message(space, message_seq)
            intent = "/remember " if version == 1 else f"/correct {memory_id} "
            if (author, session_id, task_id) != ("main_agent", space.main, None) or asked is None:
                raise Problem(
                    f"{memory_id} v{version} is attributed to {author} {session_id} {task_id} {message_seq}"
                )
            if not asked.startswith(intent) or (text is not None and asked != intent + text):
                raise Problem(f"{memory_id} v{version} ({text!r}) answers message {message_seq}, {asked!r}")
            if text is not None and text not in sent:
                raise Problem(f"{memory_id} v{version} has a text nobody sent: {text!r}")
            if version > 1:
                applied[asked] += 1
        if status == "forgotten":
            if memory_id not in forgets_sent or forgotten_at is None or any(v[1] is not None for v in found):
                raise Problem(f"{memory_id} is forgotten (forget sent: {memory_id in forgets_sent}): {found}")
            for text in sent:
                if held := pages_holding(space, text.encode()) & owned:
                    raise Problem(f"forgotten {memory_id}'s text {text!r} is in memory pages {sorted(held)}")
        elif memory_id in forgot:
            raise Problem(f"the forget of {memory_id} was told, but it is {status}")
    if twice := sorted(asked for asked, count in applied.items() if count > 1):
        raise Problem(f"corrections applied twice: {twice}")
    for memory_id, version, text in corrected:
        kept = {v[0]: v for v in versions(space, memory_id)}.get(version)
        forgotten = stored[memory_id][0] == "forgotten"
        if (
            kept is None
            or user_message(space, kept[5]) != f"/correct {memory_id} {text}"
            or kept[1] != (None if forgotten else text)
        ):
            raise Problem(f"the seen correction of {memory_id} to v{version} {text!r} is {kept}")
    return len(saved), len(corrected), len(forgot), sum(applied.values())


async def check_recall(
    space: Space,
    client: UserHostClient,
    texts: dict[str, list[str]],
    stored: dict[str, tuple[str, int, str | None]],
) -> None:
    """`/recall` without a query (the `MAX_RECALLED` most recently changed memories) lists no forgotten memory,
    each one as its current version says, and every active memory of the point (`texts`), whose changes are the
    newest."""
    recalled = await send(space, client, f"recall-{time.monotonic_ns()}", "/recall")
    listed = await answer(space, client, recalled, "mem_|no memories match")
    lines = {}
    for line in [] if listed == "no memories match" else listed.splitlines():
        match = RECALLED.fullmatch(line)
        if match is None:
            raise Problem(f"/recall listed {line!r}")
        lines[match.group(1)] = match.groups()[1:]
    active = {memory_id for memory_id, (status, _, _) in stored.items() if status == "active"}
    if forgotten := sorted(set(lines) - active):
        raise Problem(f"/recall lists memories that are not active: {forgotten}")
    if len(lines) != min(len(active), MAX_RECALLED) or not active & set(texts) <= set(lines):
        raise Problem(f"/recall lists {sorted(lines)} of the {len(active)} active memories")
    for memory_id in lines:
        _, text, _, _, _, message_seq = versions(space, memory_id)[-1]
        current = stored[memory_id][1]
        wanted = (str(current), text, "saved" if current == 1 else "corrected", str(message_seq))
        if lines[memory_id] != wanted:
            raise Problem(f"/recall lists {memory_id} as {lines[memory_id]}, not {wanted}")


CAMPAIGNS: list[Campaign] = [row("userhost.memory.correct", memory_point)]
