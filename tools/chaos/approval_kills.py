"""Kill -9 of the Personal host while it handles approvals (rows `userhost.approvals.decide`,
`userhost.approvals.execution`, `userhost.approvals.rules`).

Each row drives one real `wuu-userhost serve` process of the Personal composition on one home: its store is a
real SQLite file, approved actions run through its real native worker, and its agent is the deterministic
stand-in (`/write PATH` + newline + content and `/run ARGV...` become cards, which wait for the owner because
the stand-in reviewer is unsure). At every point the host is killed with SIGKILL at a seeded moment, every
process it ran must end with it, and a host restarted on the same home must show what
spec/schema/userhost/approvals.schema.json promises:

- decide: owners decide cards on two connections and the kill lands after a seeded number of acknowledgements.
  An acknowledged decision is saved as acknowledged; one in flight is saved whole or not at all (the card
  waits, or carries that decision); a retry with the same request ID settles it either way. An allowed write
  then runs once (the file holds its content) unless its claim was cut by the kill (`unknown`); a denied one
  never writes.
- execution: approved `/run`s of a slow command that appends its tag to a file run one at a time, and the kill
  lands while a seeded one of them runs (its tag is in the file). Its card was claimed (`running`) before it
  ran; after the restart it is `unknown` with an unknown receipt and its command never runs again (the tags
  are counted); a card approved but not claimed at the kill runs exactly once after the restart.
- rules: owners save previewed rules on two connections and the kill lands after a seeded number of
  acknowledgements. Every acknowledged rule is there; a retry with the same request ID returns the same rule
  and never adds one; no card was decided by a save; and a saved rule handles the next identical action.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shlex
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wuu.host.userhost.client import ConnectionLost, UserHostClient
from wuu.host.userhost.personal import PLUGIN_ID

from .campaign import Campaign, Context, Outcome, leftover_processes, reap_leftovers, traceback_in

FULL_POINTS = 20
"""Kill points per row at scale 1."""
STEP_S = 30.0
"""How long any one step may take: a host to serve or exit, a card to appear or settle, processes to end."""
POLL_S = 0.02
OWNERS = 2
"""Owner connections that decide cards or save rules at once."""
DECIDE_CARDS = 8
RULE_CARDS = 6
RUN_CARDS = 3
RUN_SLEEP_S = 0.4
"""How long each `/run` command sleeps after it appended its tag: the moment a kill finds it running."""
KILL_JITTER_S = 0.004
"""The kill lands up to this long after the acknowledgement it waits for: within the next call."""
MARKS = "runs.log"
"""The file of the files root every `/run` appends its tag to."""
FINAL = frozenset({"succeeded", "failed", "unknown", "denied", "expired", "cancelled", "stale"})


class Problem(Exception):
    """A point's check failed; the message says what was seen."""


@dataclass
class Space:
    """One home and the `wuu-userhost serve` process that serves it now (restarted after each kill)."""

    home: Path
    socket: Path
    log: Path
    process: asyncio.subprocess.Process | None = None
    clients: list[UserHostClient] = field(default_factory=list)
    main: str = ""

    @property
    def files(self) -> Path:
        return self.home / "user-spaces" / "local" / "personal" / "files"

    @property
    def database(self) -> Path:
        return self.home / "user-spaces" / "local" / "personal" / "state" / "personal.sqlite"

    def rows(self, sql: str, *arguments: Any) -> list[tuple[Any, ...]]:
        """Rows of the store's file, read on a connection of the campaign's own."""
        connection = sqlite3.connect(self.database)
        try:
            return connection.execute(sql, arguments).fetchall()
        finally:
            connection.close()

    async def start(self) -> UserHostClient:
        """Start the host and return an initialized client once it serves."""
        with open(self.log, "ab") as stderr:
            self.process = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "wuu.host.userhost", "serve", "--user-space", "local"),
                *("--product-domain", "personal", "--composition-profile", "personal"),
                *("--home", str(self.home), "--listen", f"unix:{self.socket}"),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
            )
        client = await self.connect()
        self.main = (await call(client, "agents.main_session", {}))["session_id"]
        return client

    async def connect(self) -> UserHostClient:
        """Another initialized client of the serving host, polling its socket until it answers."""
        process = self.process
        assert process is not None
        deadline = time.monotonic() + STEP_S
        while True:
            if process.returncode is not None:
                raise Problem(f"the host exited {process.returncode}: {self.tail()}")
            try:
                client = await UserHostClient.connect_unix(self.socket)
            except (FileNotFoundError, ConnectionRefusedError):
                client = None
            if client is not None:
                try:
                    await asyncio.wait_for(client.initialize(), 5)
                except (ConnectionLost, OSError, TimeoutError):
                    with contextlib.suppress(OSError):
                        await client.close(timeout=1)
                else:
                    self.clients.append(client)
                    return client
            if time.monotonic() > deadline:
                raise Problem(f"the host did not serve within {STEP_S:g} s: {self.tail()}")
            await asyncio.sleep(POLL_S)

    async def kill(self) -> None:
        """SIGKILL the host; wait until it and every process it ran (its worker, its commands) are gone."""
        process = self.process
        assert process is not None
        if process.returncode is not None:
            raise Problem(f"the host exited {process.returncode} before the kill: {self.tail()}")
        process.send_signal(signal.SIGKILL)
        await process.wait()
        await self.close_clients()
        deadline = time.monotonic() + STEP_S
        while leftover_processes(self.home):
            if time.monotonic() > deadline:
                left = reap_leftovers(self.home)
                raise Problem(f"processes of the killed host outlived it by {STEP_S:g} s: {'; '.join(left)}")
            await asyncio.sleep(POLL_S)

    async def stop(self) -> list[str]:
        """SIGTERM the host; what went wrong (it did not exit 0, a traceback, a process left behind)."""
        failures = []
        await self.close_clients()
        process = self.process
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(process.wait(), STEP_S)
            except TimeoutError:
                process.kill()
                code = await process.wait()
            if code != 0:
                failures.append(f"the host exited {code} after SIGTERM: {self.tail()}")
        if self.log.exists() and (trace := traceback_in(self.log.read_text(errors="replace"))) is not None:
            failures.append(f"the host's stderr has a traceback: {trace}")
        failures += [f"a process was left behind: {item}" for item in reap_leftovers(self.home)]
        return failures

    async def close_clients(self) -> None:
        for client in self.clients:
            with contextlib.suppress(OSError, ConnectionLost):
                await client.close(timeout=2)
        self.clients.clear()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-600:] if self.log.exists() else "(no stderr)"


async def call(client: UserHostClient, method: str, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One plugin method's result; Problem on an error response (ConnectionLost when the host is gone)."""
    response = await client.request(
        "plugin/client/request", {"plugin_id": PLUGIN_ID, "method": method, "params": params, **extra}
    )
    if "result" not in response:
        raise Problem(f"{method} {json.dumps(params)[:300]} failed: {response.get('error')}")
    result: dict[str, Any] = response["result"]["result"]
    return result


async def until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll `check` until it returns something other than None; Problem naming `what` at the deadline."""
    deadline = time.monotonic() + STEP_S
    while (found := await check()) is None:
        if time.monotonic() > deadline:
            raise Problem(f"{what} within {STEP_S:g} s")
        await asyncio.sleep(POLL_S)
    return found


async def cards(space: Space, client: UserHostClient, card_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The named cards as they are now, by ID."""
    found = await call(client, "approvals.list", {"session_id": space.main, "card_ids": card_ids})
    return {card["card_id"]: card for card in found["cards"]}


def action_key(action: dict[str, Any]) -> str:
    """What tells a point's actions apart: a write's path, a command's argv."""
    return str(action["path"]) if "path" in action else shlex.join(action["argv"])


async def propose(space: Space, client: UserHostClient, texts: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Send each text (by the key of the action it asks for) to the main agent and return the waiting cards
    it made, by key, once automatic review (on in a new space) has left each to the owner. One text at a
    time: the agent answers the newest input of a step, so inputs sent together would make one card."""
    made: dict[str, dict[str, Any]] = {}
    for key, text in texts.items():
        client_input_id = f"in-{time.monotonic_ns()}"
        user_input = {
            "client_input_id": client_input_id,
            "request_id": f"req-{client_input_id}",
            "text": text,
        }
        await call(client, "agents.send", {"session_id": space.main}, user_input=user_input)

        async def waiting(key: str = key) -> dict[str, Any] | None:
            listed = (await call(client, "approvals.list", {"session_id": space.main}))["cards"]
            return next((c for c in listed if action_key(c["action"]) == key and "review" in c), None)

        made[key] = await until(waiting, f"no waiting card for {key}")
    return made


async def settled(space: Space, client: UserHostClient, card_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The named cards once each is final."""

    async def final() -> dict[str, dict[str, Any]] | None:
        now = await cards(space, client, card_ids)
        return now if all(card["status"] in FINAL for card in now.values()) else None

    found: dict[str, dict[str, Any]] = await until(final, f"cards {card_ids} did not settle")
    return found


async def deny_waiting(space: Space, client: UserHostClient, found: list[dict[str, Any]]) -> None:
    """Deny the cards of a point that still wait, so that the next point's cards are listed among few."""
    now = await cards(space, client, [card["card_id"] for card in found])
    for card in now.values():
        if card["status"] == "waiting":
            params = decision(space, card, "deny", f"cleanup-{card['card_id']}")
            denied = (await call(client, "approvals.decide", params))["card"]
            if denied["status"] != "denied":
                raise Problem(f"denying waiting card {card['card_id']} left it {denied['status']}")


def decision(space: Space, card: dict[str, Any], choice: str, request_id: str) -> dict[str, Any]:
    return {
        "session_id": space.main,
        "card_id": card["card_id"],
        "digest": card["digest"],
        "expected_revision": card["revision"],
        "decision": choice,
        "request_id": request_id,
    }


def check_store(space: Space) -> None:
    """The store's file is sound; in the history, no card has more than its anchor and one outcome message,
    and a card with a receipt has both (its receipt and its outcome are saved together, an unknown one too)."""
    if space.rows("PRAGMA integrity_check") != [("ok",)]:
        raise Problem("the store's integrity check failed")
    crowded = space.rows(
        "SELECT approval_id, count(*) FROM messages WHERE approval_id IS NOT NULL "
        "GROUP BY approval_id HAVING count(*) > 2"
    )
    if crowded:
        raise Problem(f"cards with more than an anchor and one outcome message: {crowded}")
    untold = space.rows(
        "SELECT card_id, status FROM approval_cards WHERE status IN ('succeeded', 'failed', 'unknown') "
        "AND (SELECT count(*) FROM messages WHERE approval_id = card_id) != 2"
    )
    if untold:
        raise Problem(f"cards with a receipt but without their anchor and outcome message: {untold}")


# --- calls under a kill --------------------------------------------------------------------------


@dataclass
class Step:
    """One owner call of a load."""

    key: str
    method: str
    params: dict[str, Any]


@dataclass
class Tally:
    """What the owners sent and what the host acknowledged before the kill, by step key."""

    total: int
    """The steps of the load."""
    sent: dict[str, Step] = field(default_factory=dict)
    acknowledged: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def in_flight(self) -> dict[str, Step]:
        return {key: step for key, step in self.sent.items() if key not in self.acknowledged}

    def told(self, calls: str, landed: int) -> str:
        """The kill's moment for the log: how many of the `calls` were acknowledged, how many were in flight,
        and how many of those the restarted host had saved (`landed`)."""
        acknowledged, in_flight = len(self.acknowledged), len(self.in_flight)
        return (
            f"killed after {acknowledged} of {self.total} {calls} acknowledged, {in_flight} in flight "
            f"({landed} saved)"
        )


async def under_kill(space: Space, lanes: list[list[Step]], rng: random.Random) -> Tally:
    """Run each lane's steps in order on a client of its own and SIGKILL the host a seeded moment after a
    seeded number of acknowledgements (fewer than the steps: a call is always left); what was sent and
    acknowledged by then."""
    tally = Tally(total=sum(len(lane) for lane in lanes))
    target = rng.randrange(tally.total)
    reached = asyncio.Event()
    if target == 0:
        reached.set()
    clients = [await space.connect() for _ in lanes]

    async def run(client: UserHostClient, lane: list[Step]) -> None:
        for step in lane:
            tally.sent[step.key] = step
            tally.acknowledged[step.key] = await call(client, step.method, step.params)
            if len(tally.acknowledged) >= target:
                reached.set()

    loads = [asyncio.ensure_future(run(client, lane)) for client, lane in zip(clients, lanes, strict=True)]
    waiter = asyncio.ensure_future(reached.wait())
    try:
        pending: set[asyncio.Future[Any]] = {waiter, *loads}
        while not reached.is_set():
            done, pending = await asyncio.wait(pending, timeout=STEP_S, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise Problem(f"{target} acknowledgements did not come within {STEP_S:g} s")
            for load in done:
                if load is not waiter and load.exception() is not None:
                    raise Problem(f"an owner's call failed before the kill: {load.exception()!r}")
    except Problem:
        for task in [waiter, *loads]:
            task.cancel()
        await asyncio.gather(waiter, *loads, return_exceptions=True)
        raise
    await asyncio.sleep(rng.uniform(0, KILL_JITTER_S))  # the moment of the kill, not a wait for anything
    await space.kill()
    for outcome in await asyncio.gather(*loads, return_exceptions=True):
        if outcome is not None and not isinstance(outcome, ConnectionLost):
            raise Problem(f"an owner's call failed before the kill: {outcome!r}")
    return tally


def lanes_of(steps: list[Step]) -> list[list[Step]]:
    return [steps[index::OWNERS] for index in range(OWNERS)]


# --- decide ------------------------------------------------------------------------------------


def decided(card: dict[str, Any], choice: str) -> bool:
    """Whether the card carries the owner's `choice` (and so no longer waits)."""
    made = card.get("decision") or {}
    verdict = "allow" if choice == "allow_once" else "deny"
    return card["status"] != "waiting" and made.get("by") == "owner" and made.get("verdict") == verdict


async def decide_point(
    space: Space, client: UserHostClient, point: int, rng: random.Random
) -> tuple[UserHostClient, str]:
    contents = {f"d{point}/{n}.txt": f"point {point} card {n}\n" for n in range(DECIDE_CARDS)}
    made = await propose(space, client, {path: f"/write {path}\n{text}" for path, text in contents.items()})
    choices = {path: rng.choice(("allow_once", "deny")) for path in made}
    steps = [
        Step(path, "approvals.decide", decision(space, card, choices[path], f"decide-{card['card_id']}"))
        for path, card in made.items()
    ]
    tally = await under_kill(space, lanes_of(steps), rng)
    client = await space.start()
    ids = [card["card_id"] for card in made.values()]
    now = await cards(space, client, ids)
    for path, card in made.items():
        found = now[card["card_id"]]
        if path in tally.acknowledged and not decided(found, choices[path]):
            raise Problem(f"the acknowledged {choices[path]} of {path} is lost: the card is {found}")
        if path in tally.in_flight and not (found["status"] == "waiting" or decided(found, choices[path])):
            raise Problem(f"the {choices[path]} of {path} in flight was half saved: the card is {found}")
        if path not in tally.sent and found["status"] != "waiting":
            raise Problem(f"the card of {path} was never decided but is {found['status']}")
    landed = sum(now[made[path]["card_id"]]["status"] != "waiting" for path in tally.in_flight)
    for path, step in tally.sent.items():
        again = (await call(client, step.method, step.params))["card"]
        if not decided(again, choices[path]):
            raise Problem(f"a retry of the {choices[path]} of {path} left the card {again}")
    final = await settled(space, client, [made[path]["card_id"] for path in tally.sent])
    for path in tally.sent:
        card, target = final[made[path]["card_id"]], space.files / path
        if choices[path] == "deny":
            if card["status"] != "denied" or target.exists():
                raise Problem(
                    f"the denied write of {path} is {card['status']}, its file exists: {target.exists()}"
                )
        elif card["status"] == "succeeded":
            if not target.is_file() or target.read_text() != contents[path]:
                raise Problem(f"the allowed write of {path} succeeded but the file does not hold its content")
        elif card["status"] != "unknown" or card["receipt"]["outcome"] != "unknown":
            raise Problem(f"the allowed write of {path} ended {card['status']}: {card.get('receipt')}")
    await deny_waiting(space, client, list(made.values()))
    for path in made:
        if path not in tally.sent and (space.files / path).exists():
            raise Problem(f"the write of {path} ran without a decision")
    check_store(space)
    ended = Counter(card["status"] for card in final.values())
    return client, f"{tally.told('decisions', landed)}; then {dict(sorted(ended.items()))}"


# --- execution ---------------------------------------------------------------------------------


def marks(space: Space) -> list[str]:
    path = space.files / MARKS
    return path.read_text().splitlines() if path.exists() else []


async def execution_point(
    space: Space, client: UserHostClient, point: int, rng: random.Random
) -> tuple[UserHostClient, str]:
    tags = [f"p{point}-{n}" for n in range(RUN_CARDS)]
    argvs = {tag: ["sh", "-c", f"echo {tag} >> {MARKS}; sleep {RUN_SLEEP_S}"] for tag in tags}
    made = await propose(
        space, client, {shlex.join(argv): f"/run {shlex.join(argv)}" for argv in argvs.values()}
    )
    by_tag = {tag: made[shlex.join(argv)] for tag, argv in argvs.items()}
    for tag, card in by_tag.items():
        decided_card = await call(
            client, "approvals.decide", decision(space, card, "allow_once", f"run-{tag}")
        )
        if decided_card["card"]["status"] not in ("approved", "running", "succeeded"):
            raise Problem(f"allowing /run {tag} left its card {decided_card['card']}")
    # The kill lands while a seeded command sleeps: it has appended its tag, so its claim is saved; the
    # commands before it are done, the ones after it approved and not claimed yet.
    victim = rng.choice(tags)

    async def started() -> bool | None:
        return True if victim in marks(space) else None

    await until(started, f"/run {victim} did not run")
    await asyncio.sleep(rng.uniform(0, RUN_SLEEP_S / 2))
    await space.kill()
    ids = {tag: card["card_id"] for tag, card in by_tag.items()}
    at_kill = dict(
        space.rows(
            f"SELECT card_id, status FROM approval_cards WHERE card_id IN ({','.join('?' * len(ids))})",
            *ids.values(),
        )
    )
    if at_kill[ids[victim]] != "running":
        raise Problem(
            f"/run {victim} ran, but its card was {at_kill[ids[victim]]}: no claim before the effect"
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
            if ran != ran_before or ran > 1:
                raise Problem(f"/run {tag}, running at the kill, ran again: {ran_before} then {ran} lines")
        elif was in ("approved", "succeeded"):
            if card["status"] != "succeeded" or ran != 1:
                raise Problem(f"/run {tag}, {was} at the kill, is {card['status']} and ran {ran} times")
        else:
            raise Problem(f"/run {tag} was {was} at the kill")
    check_marks(space)
    check_store(space)
    return client, f"at the kill {dict(sorted(Counter(at_kill.values()).items()))}"


def check_marks(space: Space) -> None:
    """No `/run` of the row so far ran twice."""
    lines = marks(space)
    twice = sorted({tag for tag in lines if lines.count(tag) > 1})
    if twice:
        raise Problem(f"commands ran more than once: {twice}")


# --- rules -------------------------------------------------------------------------------------


def canonical(rule: dict[str, Any]) -> str:
    return json.dumps([rule["kind"], rule["match"]], sort_keys=True)


async def rules_point(
    space: Space, client: UserHostClient, point: int, rng: random.Random
) -> tuple[UserHostClient, str]:
    made = await propose(
        space,
        client,
        {f"r{point}/{n}.txt": f"/write r{point}/{n}.txt\nfirst {n}\n" for n in range(RULE_CARDS)},
    )
    steps = []
    for path, card in made.items():
        params = {key: card[key] for key in ("card_id", "digest")} | {"expected_revision": card["revision"]}
        preview = (await call(client, "approvals.rules.preview", {"session_id": space.main, **params}))[
            "preview"
        ]
        save = {
            "session_id": space.main,
            "card_id": card["card_id"],
            "preview_digest": preview["preview_digest"],
            "mode": rng.choice(("automatic", "ask_first")),
            "request_id": f"save-{card['card_id']}",
        }
        steps.append(Step(path, "approvals.rules.save", save))
    tally = await under_kill(space, lanes_of(steps), rng)
    client = await space.start()
    listed = (await call(client, "approvals.rules.list", {}))["rules"]
    by_id = {rule["rule_id"]: rule for rule in listed}
    for path, saved in tally.acknowledged.items():
        rule = saved["rule"]
        if by_id.get(rule["rule_id"]) != rule:
            raise Problem(f"the acknowledged rule for {path} is {by_id.get(rule['rule_id'])}, not {rule}")
    before = {canonical(rule): rule["rule_id"] for rule in listed}
    landed = sum(path in {rule["match"].get("path") for rule in listed} for path in tally.in_flight)
    for path, step in tally.sent.items():
        rule = (await call(client, step.method, step.params))["rule"]
        acknowledged = tally.acknowledged.get(path)
        first = acknowledged["rule"]["rule_id"] if acknowledged else before.get(canonical(rule))
        if first is not None and rule["rule_id"] != first:
            raise Problem(f"a retry of the rule save for {path} returned {rule['rule_id']}, not {first}")
        if (rule["match"].get("path"), rule["mode"], rule["source_card_id"]) != (
            path,
            step.params["mode"],
            step.params["card_id"],
        ):
            raise Problem(f"a retry of the rule save for {path} returned {rule}")
    listed = (await call(client, "approvals.rules.list", {}))["rules"]
    matches = [canonical(rule) for rule in listed]
    if len(matches) != len(set(matches)):
        raise Problem(f"two rules have the same match: {sorted(m for m in matches if matches.count(m) > 1)}")
    ruled = {rule["match"].get("path"): rule for rule in listed}
    if unsent := sorted(path for path in made if path not in tally.sent and path in ruled):
        raise Problem(f"rules nobody saved: {unsent}")
    now = await cards(space, client, [card["card_id"] for card in made.values()])
    for path, card in made.items():
        if (
            now[card["card_id"]]["status"] != "waiting"
            or now[card["card_id"]]["revision"] != card["revision"]
        ):
            raise Problem(f"saving a rule decided the card of {path}: {now[card['card_id']]}")
    cleanup = list(made.values())
    if tally.sent:
        path = rng.choice(sorted(tally.sent))
        cleanup.append(await next_action(space, client, path, ruled[path]))
    await deny_waiting(space, client, cleanup)
    check_store(space)
    return client, tally.told("rule saves", landed)


async def next_action(
    space: Space, client: UserHostClient, path: str, rule: dict[str, Any]
) -> dict[str, Any]:
    """Ask for `path`'s write again: the rule saved before the kill handles it (automatic: written at once;
    asking first: waits for the owner). The new card."""
    known = {row[0] for row in space.rows("SELECT card_id FROM approval_cards")}
    content = f"second write of {path}\n"
    client_input_id = f"again-{time.monotonic_ns()}"
    user_input = {
        "client_input_id": client_input_id,
        "request_id": f"req-{client_input_id}",
        "text": f"/write {path}\n{content}",
    }
    await call(client, "agents.send", {"session_id": space.main}, user_input=user_input)

    async def new_card() -> str | None:
        ids = {row[0] for row in space.rows("SELECT card_id FROM approval_cards")} - known
        return ids.pop() if ids else None

    card_id = await until(new_card, f"no card for the second write of {path}")
    if rule["mode"] == "ask_first":
        [card] = (await cards(space, client, [card_id])).values()
        if card["status"] != "waiting" or "decision" in card:
            raise Problem(f"an ask-first rule for {path} let its next write be {card['status']}")
        return card
    card = (await settled(space, client, [card_id]))[card_id]
    made = card.get("decision") or {}
    if (made.get("by"), made.get("rule_id"), card["status"]) != ("rule", rule["rule_id"], "succeeded"):
        raise Problem(
            f"the automatic rule {rule['rule_id']} for {path} did not handle its next write: {card}"
        )
    if (space.files / path).read_text() != content:
        raise Problem(f"the write of {path} by rule {rule['rule_id']} did not write its content")
    return card


# --- the rows ----------------------------------------------------------------------------------

Point = Callable[[Space, UserHostClient, int, random.Random], Awaitable[tuple[UserHostClient, str]]]
"""One kill point of a row: given the serving host and a client of it, the host restarted after the kill, a
client of it, and what the point saw (a line of the log)."""


def row(name: str, point: Point) -> Campaign:
    """A row that runs `point` at every kill point on one home and host (restarted by each point)."""

    async def run(context: Context) -> Outcome:
        rng = random.Random(f"{name} {context.seed}")  # rows of one seed draw apart
        sockets = Path(tempfile.mkdtemp(prefix="uha-"))  # short: a socket path has at most 107 bytes
        home = context.workdir / "home"
        home.mkdir(mode=0o700)
        space = Space(home, sockets / "host.sock", context.workdir / "host.log")
        outcome = Outcome()
        try:
            client = await space.start()
            for number in range(context.size(FULL_POINTS)):
                client, seen = await point(space, client, number, rng)
                context.log(f"{name} point {number}: {seen}")
                outcome.runs += 1
        except Problem as problem:
            outcome.failures.append(f"point {outcome.runs}: {problem}")
        finally:
            outcome.failures += await space.stop()
            shutil.rmtree(sockets, ignore_errors=True)
        outcome.failures = [f"{failure} (rerun: {context.rerun(name)})" for failure in outcome.failures]
        return outcome

    return Campaign(name, run)


CAMPAIGNS = [
    row("userhost.approvals.decide", decide_point),
    row("userhost.approvals.execution", execution_point),
    row("userhost.approvals.rules", rules_point),
]
