"""Kill -9 of the Personal host while it runs background tasks under grants (rows `userhost.tasks.grant`,
`userhost.tasks.dispatch`, `userhost.tasks.completion`).

Each row drives one real `wuu-userhost serve` process of the Personal composition on one home, as the approval
rows do (tools/chaos/approval_kills.py: its real SQLite store, its real native worker, the deterministic
stand-in agent). Owners on the Unix socket, a local transport whose inputs may start tasks, send
`/task INSTRUCTIONS` requests: the stand-in starts a task and says `started task TASK under grant GRANT (…)`; the
task's own stand-in turns its instructions (`/write PATH` + newline + content, `/run ARGV...`) into one card of
the main conversation, which waits for the owner because the stand-in reviewer is unsure. At every point the
host is killed with SIGKILL at a seeded moment, every process it ran must end with it, and a host restarted on
the same home must keep what spec/schema/userhost/tasks.schema.json and
spec/schema/receipts/task_delivery.schema.json promise:

- grant: one owner sends `/task /write …` requests while another revokes grants of tasks started before (and
  of some of the new ones, once their start is told), and the kill lands after a seeded number of
  acknowledged sends or revocations. Every task has exactly one grant, the one its `started task` reply
  named (a task whose start was cut before that reply counts too); an acknowledged revocation is still there
  as acknowledged; a retried revocation answers the grant revoked; and once allowed, a card of a revoked
  grant's task ends `unauthorized` with nothing written, while the others write their files.
- dispatch: the owner allows the cards of tasks whose `/run` appends its tag to a file and sleeps, and the kill
  lands while a seeded one of them runs. Its card was claimed before it ran; after the restart it is `unknown`,
  its command never runs again (the tags are counted) and its task fails (`Outcome unknown: …`, run
  `unknown`); a card approved but not claimed at the kill runs once after the restart, under a lease its
  grant's provider issued after the restart (a fresh check).
- completion: the owner allows the cards of `/write` tasks and the kill lands after a seeded number of the
  tasks' replies were delivered. Every task whose card succeeded ends completed, every other one failed, each with
  exactly one delivery; a reply delivered before the kill stays where it was, one submitted and not delivered
  stays submitted with nothing in the conversation (its outcome is unknown: never sent twice), and every other
  one is delivered once.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shlex
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from wuu.host.userhost.client import ConnectionLost, UserHostClient

from .approval_kills import (
    FINAL,
    KILL_JITTER_S,
    MARKS,
    POLL_S,
    RUN_SLEEP_S,
    STEP_S,
    Problem,
    Space,
    call,
    cards,
    check_marks,
    check_store,
    decision,
    marks,
    row,
    until,
)
from .campaign import Campaign

TASKS_BEFORE = 3
"""grant: tasks started (and waiting for the owner) before the load, whose grants the load revokes."""
TASKS_DURING = 3
"""grant: tasks the load asks for."""
RUN_TASKS = 3
DONE_TASKS = 4
COMPLETION_JITTER_S = 0.03
"""completion: the kill lands up to this long after the reply it waits for: while the next ones complete."""
STARTED = re.compile(r"started task (task_[0-9a-f]+) under grant (\S+) \(until ")
TASK_FINAL = FINAL | {"unauthorized"}
ENDS = {
    "succeeded": (("completed", "succeeded"), "result", "Done"),
    "unknown": (("failed", "unknown"), "failure", "Outcome unknown"),
}
"""How a task whose one card ended so ends: its status and run's, its reply's kind and the headline of its line
(a task whose card ended otherwise fails, run `failed`, its line `Not done`)."""


# --- talking to the main agent -------------------------------------------------------------------


async def send(space: Space, client: UserHostClient, client_input_id: str, text: str) -> dict[str, Any]:
    """Send `text` to the main agent; its acknowledged receipt."""
    user_input = {"client_input_id": client_input_id, "request_id": f"req-{client_input_id}", "text": text}
    receipt: dict[str, Any] = (
        await call(client, "agents.send", {"session_id": space.main}, user_input=user_input)
    )["receipt"]
    return receipt


async def since(space: Space, client: UserHostClient, seq: int) -> list[dict[str, Any]]:
    """The visible messages of the main conversation after history sequence `seq`, oldest first."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"session_id": space.main, "page_size": 100}
    while True:
        page = (await call(client, "agents.history.read", params))["messages"]
        newer = [message for message in page if message["message_seq"] > seq]
        found += newer
        if len(newer) < len(page) or len(page) < 100:
            return sorted(found, key=lambda message: int(message["message_seq"]))
        params["before_seq"] = min(message["message_seq"] for message in page)


def newest_seq(space: Space) -> int:
    """The history sequence of the main conversation's newest message, hidden ones included."""
    (seq,) = space.rows("SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = ?", space.main)[0]
    return int(seq)


async def answer(space: Space, client: UserHostClient, receipt: dict[str, Any], opening: str) -> str:
    """The main agent's first message after the input of `receipt` that starts with one of `opening`'s
    alternatives (a regular expression): its text."""
    pattern = re.compile(opening)

    async def said() -> str | None:
        for message in await since(space, client, receipt["history_seq"]):
            if message["role"] == "assistant" and pattern.match(message["text"]):
                return str(message["text"])
        return None

    found: str = await until(said, f"no answer to {receipt['client_input_id']}")
    return found


async def start_task(space: Space, client: UserHostClient, key: str, instructions: str) -> tuple[str, str]:
    """Ask the main agent for a task with these instructions; the task and grant its reply named."""
    receipt = await send(space, client, f"{key}-{time.monotonic_ns()}", f"/task {instructions}")
    said = await answer(space, client, receipt, "started task|refused")
    started = STARTED.match(said)
    if started is None:
        raise Problem(f"the task {key} did not start: {said}")
    return started.group(1), started.group(2)


async def task_card(space: Space, client: UserHostClient, task_id: str) -> dict[str, Any]:
    """The one card of the task, once the task's agent step is over (its review, if any, is recorded)."""

    async def made() -> list[str] | None:
        run = space.rows("SELECT run_status FROM task_dispatches WHERE task_id = ?", task_id)
        if not run or run[0][0] in ("queued", "running"):
            return None
        return [row[0] for row in space.rows("SELECT card_id FROM approval_cards WHERE task_id = ?", task_id)]

    ids: list[str] = await until(made, f"task {task_id} made no card")
    if len(ids) != 1:
        raise Problem(f"task {task_id} made {len(ids)} cards: {ids}")
    return (await cards(space, client, ids))[ids[0]]


async def allow(space: Space, client: UserHostClient, card: dict[str, Any]) -> None:
    """The owner allows the waiting card once."""
    params = decision(space, card, "allow_once", f"allow-{card['card_id']}")
    status = (await call(client, "approvals.decide", params))["card"]["status"]
    if status in ("waiting", "denied"):
        raise Problem(f"allowing card {card['card_id']} left it {status}")


async def settled(space: Space, client: UserHostClient, card_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The named cards once each is final (`unauthorized` is, for a task's card)."""

    async def final() -> dict[str, dict[str, Any]] | None:
        now = await cards(space, client, card_ids)
        return now if all(card["status"] in TASK_FINAL for card in now.values()) else None

    found: dict[str, dict[str, Any]] = await until(final, f"cards {card_ids} did not settle")
    return found


def known(space: Space, table: str, column: str) -> set[str]:
    """The IDs in a table of the store now."""
    return {row[0] for row in space.rows(f"SELECT {column} FROM {table}")}


# --- the tasks' end --------------------------------------------------------------------------------


def deliveries(space: Space, task_ids: list[str]) -> dict[str, tuple[Any, ...]]:
    """The tasks' delivery receipts by ID: (task_id, kind, status, turn_id, history_seq, text)."""
    placeholders = ",".join("?" * len(task_ids))
    return {
        found[0]: found[1:]
        for found in space.rows(
            "SELECT delivery_id, task_id, kind, status, turn_id, history_seq, text FROM task_deliveries "
            f"WHERE task_id IN ({placeholders})",
            *task_ids,
        )
    }


async def check_ends(
    space: Space,
    client: UserHostClient,
    start_seq: int,
    task_cards: dict[str, dict[str, Any]],
    at_kill: dict[str, tuple[Any, ...]],
) -> Counter[str]:
    """Every task (by ID, with its settled card) has ended as its card says, with exactly one reply delivery;
    a delivery keeps what it had at the kill (`at_kill`, by ID) and none is in the conversation twice. The
    tasks' deliveries by status."""
    task_ids = sorted(task_cards)

    async def over() -> dict[str, tuple[Any, ...]] | None:
        states = space.rows(
            f"SELECT count(*) FROM tasks WHERE task_id IN ({','.join('?' * len(task_ids))}) "
            "AND status IN ('completed', 'failed')",
            *task_ids,
        )
        found = deliveries(space, task_ids)
        # A reply submitted before the kill stays submitted; one submitted since is being delivered now.
        moving = [
            key
            for key, state in found.items()
            if state[2] == "pending" or (state[2] == "submitted" and at_kill.get(key, ())[2:4] != state[2:4])
        ]
        return None if states[0][0] != len(task_ids) or moving else found

    found: dict[str, tuple[Any, ...]] = await until(over, f"the tasks {task_ids} did not end and reply")
    history = await since(space, client, start_seq)
    for task_id, card in task_cards.items():
        status, summary = card["status"], card["summary"]
        ((task_status,),) = space.rows("SELECT status FROM tasks WHERE task_id = ?", task_id)
        ((run,),) = space.rows("SELECT run_status FROM task_dispatches WHERE task_id = ?", task_id)
        wanted, kind_wanted, headline = ENDS.get(status, (("failed", "failed"), "failure", "Not done"))
        if (task_status, run) != wanted:
            raise Problem(f"task {task_id}, its card {status}, is {task_status} with run {run}, not {wanted}")
        mine = {key: value for key, value in found.items() if value[0] == task_id}
        if len(mine) != 1:
            raise Problem(f"task {task_id} has {len(mine)} reply deliveries: {sorted(mine)}")
        [(delivery_id, (_, kind, state, turn_id, seq, text))] = mine.items()
        reply = f"{headline}: {summary} ({status})"
        if (kind, text) != (kind_wanted, reply):
            raise Problem(f"task {task_id}'s delivery is a {kind} of {text!r}, not {reply!r}")
        shown = [message["message_seq"] for message in history if message["text"] == text]
        before = at_kill.get(delivery_id)
        if state == "delivered":
            if shown != [seq]:
                raise Problem(
                    f"the reply of task {task_id}, delivered at {seq}, is in the conversation at {shown}"
                )
            if before is not None and before[2] == "delivered" and before[4] != seq:
                raise Problem(
                    f"the reply of task {task_id} moved from {before[4]} to {seq} after the restart"
                )
        elif state == "submitted":
            if before is None or before[2:4] != ("submitted", turn_id):
                raise Problem(f"the reply of task {task_id} is submitted, but was {before} at the kill")
            if shown:
                raise Problem(f"the reply of task {task_id} is submitted, yet in the conversation at {shown}")
        else:
            raise Problem(f"the reply of task {task_id} is {state}")
    return Counter(value[2] for value in found.values())


# --- calls under a kill --------------------------------------------------------------------------


@dataclass
class Load:
    """What the owners sent and what the host acknowledged before the kill, by key."""

    total: int
    target: int
    sent: dict[str, Any] = field(default_factory=dict)
    acknowledged: dict[str, Any] = field(default_factory=dict)
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def ack(self, key: str, result: Any) -> None:
        self.acknowledged[key] = result
        if len(self.acknowledged) >= self.target:
            self.reached.set()


Lane = Callable[[UserHostClient, Load], Awaitable[None]]
"""One owner's calls, on a client of its own: it records each call in the load as sent, then acknowledged."""


async def kill_after(space: Space, lanes: list[Lane], total: int, rng: random.Random) -> Load:
    """Run the lanes and SIGKILL the host a seeded moment after a seeded number of acknowledgements (fewer
    than the `total` calls: a call is always left); what was sent and acknowledged by then."""
    load = Load(total, rng.randrange(total))
    if load.target == 0:
        load.reached.set()
    clients = [await space.connect() for _ in lanes]
    runs = [asyncio.ensure_future(lane(client, load)) for client, lane in zip(clients, lanes, strict=True)]
    waiter = asyncio.ensure_future(load.reached.wait())
    try:
        pending: set[asyncio.Future[Any]] = {waiter, *runs}
        while not load.reached.is_set():
            done, pending = await asyncio.wait(pending, timeout=STEP_S, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise Problem(f"{load.target} acknowledgements did not come within {STEP_S:g} s")
            for run in done:
                if run is not waiter and run.exception() is not None:
                    raise Problem(f"an owner's call failed before the kill: {run.exception()!r}")
    except Problem:
        for task in [waiter, *runs]:
            task.cancel()
        await asyncio.gather(waiter, *runs, return_exceptions=True)
        raise
    await asyncio.sleep(rng.uniform(0, KILL_JITTER_S))  # the moment of the kill, not a wait for anything
    await space.kill()
    for outcome in await asyncio.gather(*runs, return_exceptions=True):
        if outcome is not None and not isinstance(outcome, ConnectionLost):
            raise Problem(f"an owner's call failed before the kill: {outcome!r}")
    return load


# --- grant ---------------------------------------------------------------------------------------


async def grant_point(
    space: Space, client: UserHostClient, point: int, rng: random.Random
) -> tuple[UserHostClient, str]:
    start_seq = newest_seq(space)
    tasks_before, grants_before = known(space, "tasks", "task_id"), known(space, "native_grants", "grant_id")
    seen: dict[str, str] = {}
    """The tasks whose `started task` reply an owner saw, with the grant it named."""
    for n in range(TASKS_BEFORE):
        task_id, grant_id = await start_task(
            space, client, f"g{point}b{n}", f"/write notes/g{point}-b{n}.txt\nb{n}\n"
        )
        seen[task_id] = grant_id
        await task_card(space, client, task_id)
    revoking = rng.sample(sorted(seen.values()), rng.randint(1, TASKS_BEFORE))
    keys = [f"g{point}d{n}-{time.monotonic_ns()}" for n in range(TASKS_DURING)]
    requests = {key: f"/task /write notes/g{point}-d{n}.txt\nd{n}\n" for n, key in enumerate(keys)}
    revoking_later = [key for key in keys if rng.random() < 0.5]
    """The requests whose task's grant is revoked as soon as its start is told."""
    told: dict[str, str] = {}
    """The grant each request's task was started under, as told."""
    asked: list[str] = []
    """The grants whose revocation was sent."""

    async def sends(owner: UserHostClient, load: Load) -> None:
        for client_input_id, text in requests.items():
            load.sent[client_input_id] = text
            receipt = await send(space, owner, client_input_id, text)
            load.ack(client_input_id, receipt)
            started = STARTED.match(await answer(space, owner, receipt, "started task|refused"))
            if started is None:
                raise Problem(f"the task of {client_input_id} did not start")
            seen[started.group(1)] = told[client_input_id] = started.group(2)

    async def revokes(owner: UserHostClient, load: Load) -> None:
        for grant_id in revoking:
            await revoke(owner, load, grant_id)
        for key in revoking_later:
            while key not in told:  # each poll is a call: it fails when the host is killed
                await call(owner, "tasks.grants.list", {})
                await asyncio.sleep(POLL_S)
            await revoke(owner, load, told[key])

    async def revoke(owner: UserHostClient, load: Load, grant_id: str) -> None:
        asked.append(grant_id)
        load.sent[grant_id] = grant_id
        grant = (await call(owner, "tasks.grants.revoke", {"grant_id": grant_id}))["grant"]
        if grant["status"] != "revoked":
            raise Problem(f"revoking {grant_id} answered it {grant['status']}")
        load.ack(grant_id, grant)

    total = len(requests) + len(revoking) + len(revoking_later)
    load = await kill_after(space, [sends, revokes], total, rng)
    client = await space.start()
    listed = {grant["grant_id"]: grant for grant in (await call(client, "tasks.grants.list", {}))["grants"]}
    for grant_id in asked:
        acknowledged = load.acknowledged.get(grant_id)
        if acknowledged is not None and listed.get(grant_id) != acknowledged:
            raise Problem(
                f"the acknowledged revocation of {grant_id} is lost: the grant is {listed.get(grant_id)}"
            )
    landed = sum(listed.get(g, {}).get("status") == "revoked" for g in asked if g not in load.acknowledged)
    # Every request the host admitted is answered (or was cut while the agent read it): once each is read, an
    # input sent after them is answered after them.
    admitted = [key for key in requests if key in load.sent]
    if admitted:

        async def read() -> bool | None:
            found = (
                await call(
                    client, "agents.receipts", {"session_id": space.main, "client_input_ids": admitted}
                )
            )["receipts"]
            return True if all(receipt.get("read_at") for receipt in found) else None

        await until(read, "the requests admitted before the kill were not read")
    synced = await send(space, client, f"sync-{time.monotonic_ns()}", f"sync {point}")
    await answer(space, client, synced, re.escape(f"Received: sync {point}"))
    replies = {m["text"] for m in await since(space, client, start_seq) if m["role"] == "assistant"}
    for text in replies:
        started = STARTED.match(text)
        if started is not None and seen.setdefault(started.group(1), started.group(2)) != started.group(2):
            raise Problem(f"task {started.group(1)} was started under two grants: {text}")
    tasks = known(space, "tasks", "task_id") - tasks_before
    if unknown_tasks := sorted(set(seen) - tasks):
        raise Problem(f"tasks whose start was told do not exist: {unknown_tasks}")
    for task_id in tasks:
        held = [g for (g,) in space.rows("SELECT grant_id FROM native_grants WHERE task_id = ?", task_id)]
        ((dispatched,),) = space.rows("SELECT grant_id FROM task_dispatches WHERE task_id = ?", task_id)
        if held != [dispatched] or seen.get(task_id, dispatched) != dispatched:
            raise Problem(
                f"task {task_id} runs under {dispatched}, was told {seen.get(task_id)}, holds {held}"
            )
    doubled = space.rows("SELECT task_id, count(*) FROM native_grants GROUP BY task_id HAVING count(*) > 1")
    if doubled:
        raise Problem(f"tasks with two grants: {doubled}")
    orphans = (
        known(space, "native_grants", "grant_id")
        - grants_before
        - {g for (g,) in space.rows("SELECT grant_id FROM task_dispatches")}
    )
    for grant_id in asked:
        again = (await call(client, "tasks.grants.revoke", {"grant_id": grant_id}))["grant"]
        acknowledged = load.acknowledged.get(grant_id)
        if again["status"] != "revoked" or (acknowledged is not None and again != acknowledged):
            raise Problem(f"a retried revocation of {grant_id} answered {again}, acknowledged {acknowledged}")
    revoked = {task for task, grant in seen.items() if grant in asked}
    task_cards = {}
    for task_id in sorted(tasks):
        card = await task_card(space, client, task_id)
        if card["status"] != "waiting":
            raise Problem(f"task {task_id}'s card ran without the owner: {card['status']}")
        await allow(space, client, card)
        task_cards[task_id] = card
    final = await settled(space, client, [card["card_id"] for card in task_cards.values()])
    for task_id, card in task_cards.items():
        now, path = final[card["card_id"]], space.files / card["action"]["path"]
        task_cards[task_id] = now
        if task_id in revoked:
            if now["status"] != "unauthorized" or now.get("receipt") is not None or path.exists():
                raise Problem(
                    f"the card of {task_id}, its grant revoked, is {now['status']}; written: {path.exists()}"
                )
        elif now["status"] != "succeeded" or path.read_text() != card["action"]["content"]:
            raise Problem(f"the card of {task_id}, its grant active, is {now['status']}")
    ended = await check_ends(space, client, start_seq, task_cards, {})
    check_store(space)
    silent = len(tasks - set(seen))
    return client, (
        f"killed after {len(load.acknowledged)} of {load.total} sends and revocations acknowledged, "
        f"{len(load.sent) - len(load.acknowledged)} in flight ({landed} revocations saved); {len(tasks)} tasks "
        f"({silent} never told started), {len(revoked)} revoked, {len(orphans)} grants without a task; "
        f"replies {dict(sorted(ended.items()))}"
    )


# --- dispatch ------------------------------------------------------------------------------------


async def dispatch_point(
    space: Space, client: UserHostClient, point: int, rng: random.Random
) -> tuple[UserHostClient, str]:
    start_seq = newest_seq(space)
    tags = [f"t{point}-{n}" for n in range(RUN_TASKS)]
    by_tag: dict[str, dict[str, Any]] = {}
    task_of: dict[str, str] = {}
    for tag in tags:
        argv = ["sh", "-c", f"echo {tag} >> {MARKS}; sleep {RUN_SLEEP_S}"]
        task_id, _ = await start_task(space, client, tag, f"/run {shlex.join(argv)}")
        by_tag[tag], task_of[tag] = await task_card(space, client, task_id), task_id
    for card in by_tag.values():
        await allow(space, client, card)
    victim = rng.choice(tags)

    async def started() -> bool | None:
        return True if victim in marks(space) else None

    await until(started, f"the task /run {victim} did not run")
    await asyncio.sleep(rng.uniform(0, RUN_SLEEP_S / 2))
    await space.kill()
    killed = datetime.now(UTC)
    replies_at_kill = deliveries(space, sorted(task_of.values()))
    ids = {tag: card["card_id"] for tag, card in by_tag.items()}
    at_kill = dict(
        space.rows(
            f"SELECT card_id, status FROM approval_cards WHERE card_id IN ({','.join('?' * len(ids))})",
            *ids.values(),
        )
    )
    if at_kill[ids[victim]] != "running":
        raise Problem(
            f"the task /run {victim} ran, but its card was {at_kill[ids[victim]]}: no claim before the effect"
        )
    before = marks(space)
    client = await space.start()
    final = await settled(space, client, list(ids.values()))
    after = marks(space)
    for tag, card_id in ids.items():
        card, was = final[card_id], at_kill[card_id]
        ran_before, ran = before.count(tag), after.count(tag)
        if was == "running":
            receipt = card.get("receipt") or {}
            if (
                card["status"] != "unknown"
                or receipt.get("outcome") != "unknown"
                or receipt.get("finished_at")
            ):
                raise Problem(f"/run {tag}, running at the kill, is {card['status']} with receipt {receipt}")
            if ran != ran_before:
                raise Problem(f"/run {tag}, running at the kill, ran again: {ran_before} then {ran} lines")
        elif was == "approved":
            if card["status"] != "succeeded" or ran != 1:
                raise Problem(f"/run {tag}, approved at the kill, is {card['status']} and ran {ran} times")
            check_fresh_lease(space, card_id, task_of[tag], killed)
        elif was != "succeeded" or ran != 1:
            raise Problem(f"/run {tag} was {was} at the kill and ran {ran} times")
    check_marks(space)
    ended = await check_ends(
        space, client, start_seq, {task_of[tag]: final[ids[tag]] for tag in tags}, replies_at_kill
    )
    check_store(space)
    return (
        client,
        f"cards at the kill {dict(sorted(Counter(at_kill.values()).items()))}; replies {dict(sorted(ended.items()))}",
    )


def check_fresh_lease(space: Space, card_id: str, task_id: str, killed: datetime) -> None:
    """The card's execution claim names a lease of its task's grant that the provider issued after the kill
    (a fresh check, not one saved before) and released with the effect's outcome."""
    ((lease,),) = space.rows("SELECT lease FROM approval_cards WHERE card_id = ?", card_id)
    ((grant_id,),) = space.rows("SELECT grant_id FROM task_dispatches WHERE task_id = ?", task_id)
    named = json.loads(lease) if lease else {}
    found = space.rows(
        "SELECT grant_id, acquired_at, outcome FROM native_leases WHERE lease_id = ? AND card_id = ?",
        named.get("lease_id"),
        card_id,
    )
    if (
        not found
        or found[0][0] != grant_id
        or datetime.fromisoformat(found[0][1]) <= killed
        or found[0][2] != "succeeded"
    ):
        raise Problem(
            f"card {card_id}, approved at the kill, ran under lease {named} ({found}), not a fresh one of {grant_id}"
        )


# --- completion ----------------------------------------------------------------------------------


async def completion_point(
    space: Space, client: UserHostClient, point: int, rng: random.Random
) -> tuple[UserHostClient, str]:
    start_seq = newest_seq(space)
    task_cards: dict[str, dict[str, Any]] = {}
    for n in range(DONE_TASKS):
        task_id, _ = await start_task(
            space, client, f"c{point}-{n}", f"/write notes/c{point}-{n}.txt\nc{n}\n"
        )
        task_cards[task_id] = await task_card(space, client, task_id)
    target = rng.randrange(DONE_TASKS)
    for card in task_cards.values():
        await allow(space, client, card)

    async def replied() -> bool | None:
        # The store, read directly, tells a delivery the moment it commits: a client's history page later.
        delivered = [
            state for state in deliveries(space, sorted(task_cards)).values() if state[2] == "delivered"
        ]
        return True if len(delivered) >= target else None

    await until(replied, f"{target} task replies did not come")
    # The moment of the kill, not a wait for anything.
    await asyncio.sleep(rng.uniform(0, COMPLETION_JITTER_S))
    await space.kill()
    at_kill = deliveries(space, sorted(task_cards))
    client = await space.start()
    final = await settled(space, client, [card["card_id"] for card in task_cards.values()])
    task_cards = {task_id: final[card["card_id"]] for task_id, card in task_cards.items()}
    for card in task_cards.values():
        path = space.files / card["action"]["path"]
        if card["status"] == "succeeded" and path.read_text() != card["action"]["content"]:
            raise Problem(f"the card of {path} succeeded but the file does not hold its content")
        if card["status"] not in ("succeeded", "unknown"):
            raise Problem(f"the allowed card of {path} ended {card['status']}")
    ended = await check_ends(space, client, start_seq, task_cards, at_kill)
    check_store(space)
    was = Counter(state[2] for state in at_kill.values())
    if len(at_kill) < DONE_TASKS:
        was["none"] = DONE_TASKS - len(at_kill)
    return (
        client,
        f"killed after {target} replies; deliveries at the kill {dict(sorted(was.items()))}, "
        f"then {dict(sorted(ended.items()))}",
    )


CAMPAIGNS: list[Campaign] = [
    row("userhost.tasks.grant", grant_point),
    row("userhost.tasks.dispatch", dispatch_point),
    row("userhost.tasks.completion", completion_point),
]
