"""Cases of background tasks under grants (spec/schema/userhost/tasks.schema.json): the grant a task started
over a local transport runs under, the task's cards in the main conversation, completion on the evidence of
its cards, revocation, and a retried input that must not start a second task.

The spec gives a client no way to start a task: the host's main agent does, with its `start_task` tool, while
it answers an admitted user input. The cases ask for one with the bundled stand-in's scripted intent
`/task TEXT` (TEXT is the task's first message: `/task /write PATH` + newline + content starts a task that
writes the file), and skip when the agent starts no task, or when the host selects no
`execution.authorization@1` provider (the call is refused `authorization_unavailable`). The suite reaches the
host over its stdio and a Unix socket, both local transports: every input of these cases carries the local
installation's authority, so the host's provider is asked for a grant it may issue. A task's reply is
recognized by what the owner reads in it: the summary of each card of the task with its final status in
parentheses (the reference host writes `Done: SUMMARY (succeeded)` and `Not done: SUMMARY (unauthorized)`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from ...outcomes import CaseFailed
from ..conversation import POLL, everything, exchange, poll
from ..personal import open_main, send_input, user_input
from ..session import HostSession
from ..suite import USERHOST
from .approvals import (
    decide,
    expect_succeeded,
    expect_waiting,
    files_root,
    read_card,
    settled,
)

GRANTS = "tasks.grants.list"
REVOKE = "tasks.grants.revoke"
UNKNOWN_GRANT = "grant_" + "0" * 32
CARD_LIFETIME = timedelta(minutes=30)
"""A task card's `expires_at` after its `created_at`."""
LONGEST_GRANT = timedelta(hours=24)
"""The longest a grant may last after it was issued."""
RESOURCE = "personal_files"
"""The resource of every Personal task's effects: the Personal files root."""


def instant(text: str) -> datetime:
    """An RFC 3339 timestamp of the spec (`T` and `Z` in either case)."""
    return datetime.fromisoformat(text.upper())


async def grants_of(host: HostSession) -> list[dict[str, Any]]:
    """`tasks.grants.list`: the space's grants, newest first."""
    grants: list[dict[str, Any]] = (await host.call_ok(GRANTS, {}))["grants"]
    return grants


async def new_grant(host: HostSession, known: set[str], reply: dict[str, Any], what: str) -> dict[str, Any]:
    """The one grant not among `known` once the agent has answered `reply` to the request `what`; skips when
    the agent started no task, or the host has no provider to ask."""
    said = reply["text"]
    if said.startswith("refused (authorization_unavailable)"):
        host.skip(f"the host selects no execution.authorization@1 provider: {what} was refused: {said!r}")
    host.expect(
        not said.startswith("refused ("),
        f"{what}, an input admitted over a local transport, was refused a task: {said!r}",
    )
    grants = [grant for grant in await grants_of(host) if grant["grant_id"] not in known]
    if not grants:
        host.skip(f"the host's agent started no task for {what}: it answered {said!r}")
    host.expect(len(grants) == 1, f"{what} was answered with {len(grants)} new grants: {grants}")
    return grants[0]


async def start_task(host: HostSession, session_id: str, instructions: str) -> dict[str, Any]:
    """Ask the agent for a task with `instructions`; the grant it runs under, as `tasks.grants.list` reads
    it."""
    known = {grant["grant_id"] for grant in await grants_of(host)}
    text = f"/task {instructions}"
    _, reply = await exchange(host, session_id, text)
    return await new_grant(host, known, reply, repr(text.splitlines()[0]))


async def task_card(host: HostSession, session_id: str, grant: dict[str, Any]) -> dict[str, Any]:
    """The one card the task of `grant` made, found through the message of the main conversation that shows
    it, as `approvals.list` reads it; skips when the task makes no card within the reply timeout."""
    seen: dict[str, dict[str, Any]] = {}
    deadline = asyncio.get_running_loop().time() + host.timeout
    while True:
        for message in await everything(host, session_id):
            card_id = message.get("approval_id")
            if card_id and card_id not in seen:
                seen[card_id] = await read_card(host, session_id, card_id)
        found = [card for card in seen.values() if card.get("task_id") == grant["task_id"]]
        if found or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(POLL)
    if not found:
        host.skip(f"task {grant['task_id']} showed no card in the main conversation within the timeout")
    host.expect(len(found) == 1, f"task {grant['task_id']} made {len(found)} cards, not the one it was asked")
    return found[0]


def expect_task_card(host: HostSession, session_id: str, card: dict[str, Any], task_id: str) -> None:
    """`card` is a card of the main conversation from the task `task_id`, expiring 30 minutes after it was
    made, and waits for the owner."""
    host.expect(
        (card["session_id"], card["source"], card.get("task_id")) == (session_id, "task", task_id),
        f"the card of task {task_id} must be of the main conversation {session_id} with source task and the "
        f"task's ID; it is of {card['session_id']} with source {card['source']} and task_id "
        f"{card.get('task_id')}",
    )
    expires = card["expires_at"]
    host.expect(
        expires is not None and instant(expires) - instant(card["created_at"]) == CARD_LIFETIME,
        f"a task's card expires 30 minutes after its created_at {card['created_at']}; this one at {expires}",
    )
    expect_waiting(host, card, "a task's card no rule or review handles")


async def delivered(host: HostSession, session_id: str, card: dict[str, Any], status: str) -> None:
    """Wait for the task's reply in the main conversation: an assistant message after the card's anchor, not
    a card's own, that names the card's summary as `status`."""
    wanted = f"{card['summary']} ({status})"

    def replies(messages: list[dict[str, Any]]) -> list[str]:
        return [
            m["text"]
            for m in messages
            if m["role"] == "assistant"
            and m.get("approval_id") is None
            and m["message_seq"] > card["message_seq"]
            and card["summary"] in m["text"]
        ]

    if await poll(host, session_id, lambda messages: any(wanted in t for t in replies(messages))):
        return
    said = replies(await everything(host, session_id))
    raise CaseFailed(
        f"no reply of task {card['task_id']} naming {wanted!r} reached the main conversation within "
        f"{host.timeout:g} s; the replies naming its card say {said}"
    )


# --- the grant --------------------------------------------------------------------------------------


@USERHOST.case("tasks.grant-bound", "tasks.grant-finite", "tasks.local-authority")
async def local_task_gets_a_bounded_grant(host: HostSession) -> None:
    """A task started from an input sent over the host's stdio runs under an active grant of the local
    installation: bound to the task (its ID, a hidden session other than the main one), covering the action
    tool of the card it makes (write_file), the resource personal_files and the permission mode standard,
    issued now and expiring later, at most 24 hours after it was issued."""
    session_id = await open_main(host)
    before = datetime.now(UTC)
    grant = await start_task(host, session_id, "/write bounded.txt\nwithin bounds")
    card = await task_card(host, session_id, grant)
    host.expect(grant["status"] == "active", f"the grant of a task just started is {grant['status']}")
    host.expect(
        grant["session_id"] != session_id,
        f"grant {grant['grant_id']} names the main session {session_id}, not the task's hidden one",
    )
    tool = card["action"]["tool"]
    host.expect(
        tool in grant["tools"],
        f"task {grant['task_id']} made a {tool} card, but its grant covers only the tools {grant['tools']}",
    )
    bounds = {name: grant[name] for name in ("resources", "permission_mode")}
    host.expect(
        bounds == {"resources": [RESOURCE], "permission_mode": "standard"},
        f"a Personal task's grant must cover {RESOURCE} in standard; grant {grant['grant_id']} has {bounds}",
    )
    host.expect(
        grant["authority"] == {"kind": "local_installation"},
        f"a task started over stdio must carry the local installation's authority, not {grant['authority']}",
    )
    issued, expires = instant(grant["issued_at"]), instant(grant["expires_at"])
    host.expect(
        issued < expires <= issued + LONGEST_GRANT,
        f"a grant issued at {grant['issued_at']} must expire after it and within 24 hours; this one expires "
        f"at {grant['expires_at']}",
    )
    # The host runs on the suite's machine and clock; a minute allows for a clock step, not for a grant
    # issued before the case asked for its task.
    host.expect(
        expires > datetime.now(UTC) and issued >= before - timedelta(minutes=1),
        f"an active grant issued for a task started at {before.isoformat()} reads issued at "
        f"{grant['issued_at']} and expiring at {grant['expires_at']}",
    )


# --- the task's card and its completion -------------------------------------------------------------


@USERHOST.case("tasks.task-card", "tasks.completes-on-evidence")
async def allowed_task_card_completes_the_task(host: HostSession) -> None:
    """The task's write is a card of the main conversation with source task, the task's ID and an expiry 30
    minutes after its creation, waiting for the owner; allowed once, it writes the file once and succeeds,
    and the task's reply naming the card's summary as succeeded is delivered to the main conversation."""
    session_id = await open_main(host)
    grant = await start_task(host, session_id, "/write notes/later.txt\nbuy milk")
    card = await task_card(host, session_id, grant)
    expect_task_card(host, session_id, card, grant["task_id"])
    target = files_root(host) / "notes" / "later.txt"
    host.expect(not target.exists(), "the task's file was written before the owner allowed its card")
    await decide(host, session_id, card, "allow_once", "allow-task")
    done = await settled(host, session_id, card["card_id"])
    expect_succeeded(host, done, "a task's card allowed once")
    host.expect(target.read_text("utf-8") == "buy milk", "the task's allowed write did not write the file")
    await delivered(host, session_id, done, "succeeded")
    host.expect(target.read_text("utf-8") == "buy milk", "the task's file changed after its card ran")


# --- revocation -------------------------------------------------------------------------------------


@USERHOST.case("tasks.revoke", "tasks.revoked-unauthorized")
async def revoked_grant_authorizes_nothing(host: HostSession) -> None:
    """Revoking a waiting task's grant answers it revoked with its revoked_at, and so does tasks.grants.list;
    revoking it again answers it unchanged. The task's card, allowed once after that, ends unauthorized
    without a receipt, the file is not written, and the task's reply naming the card's summary as
    unauthorized is delivered to the main conversation."""
    session_id = await open_main(host)
    grant = await start_task(host, session_id, "/write notes/revoked.txt\nnever")
    card = await task_card(host, session_id, grant)
    expect_waiting(host, card, "a task's card no rule or review handles")
    revoked = (await host.call_ok(REVOKE, {"grant_id": grant["grant_id"]}))["grant"]
    unchanged = {name: value for name, value in grant.items() if name != "status"}
    host.expect(
        revoked["status"] == "revoked"
        and "revoked_at" in revoked
        and {name: revoked.get(name) for name in unchanged} == unchanged,
        f"{REVOKE} of the active grant {grant} answered {revoked}, not the grant revoked with its revoked_at",
    )
    host.expect(
        instant(revoked["revoked_at"]) >= instant(grant["issued_at"]),
        f"grant {grant['grant_id']} issued at {grant['issued_at']} reads revoked at {revoked['revoked_at']}",
    )
    again = (await host.call_ok(REVOKE, {"grant_id": grant["grant_id"]}))["grant"]
    host.expect(again == revoked, f"revoking the revoked grant again answered {again}, not {revoked}")
    listed = [g for g in await grants_of(host) if g["grant_id"] == grant["grant_id"]]
    host.expect(listed == [revoked], f"{GRANTS} reads the revoked grant as {listed}, not {revoked}")
    await decide(host, session_id, card, "allow_once", "allow-revoked")
    done = await settled(host, session_id, card["card_id"])
    host.expect(
        done["status"] == "unauthorized" and done.get("receipt") is None,
        f"the card of a task whose grant was revoked, allowed once, ended {done['status']} with receipt "
        f"{done.get('receipt')}, not unauthorized without one",
    )
    target = files_root(host) / "notes" / "revoked.txt"
    host.expect(not target.exists(), "the card of a task whose grant was revoked wrote its file")
    await delivered(host, session_id, done, "unauthorized")
    host.expect(not target.exists(), "the file of a task whose grant was revoked was written later")


@USERHOST.case("tasks.revoke-not-found")
async def unknown_grant_not_found(host: HostSession) -> None:
    """tasks.grants.revoke of a grant the host never issued gets not_found."""
    await open_main(host)
    await host.call_error(REVOKE, {"grant_id": UNKNOWN_GRANT}, "not_found")


# --- a retried input ----------------------------------------------------------------------------------


@USERHOST.case("tasks.start-once")
async def retried_input_starts_one_task(host: HostSession) -> None:
    """A `/task` input sent again with its request ID answers replayed true and starts no second task: once
    the agent has answered a later message, there is one grant and the task shows one card."""
    session_id = await open_main(host)
    known = {grant["grant_id"] for grant in await grants_of(host)}
    envelope = user_input("/task /write once.txt\nonly once")
    first = await send_input(host, envelope)
    host.expect(first["replayed"] is False, "the first submission of the /task input answered replayed true")
    again = await send_input(host, envelope)
    host.expect(
        again["replayed"] is True, "the retried /task input (same request ID) answered replayed false"
    )
    seq = first["receipt"]["history_seq"]

    def answered(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        mine = seq or next((m["message_seq"] for m in messages if m["text"] == envelope["text"]), None)
        replies = [m for m in messages if mine and m["message_seq"] > mine and m["role"] == "assistant"]
        return replies[-1] if replies else None

    reply = await poll(host, session_id, answered)
    if reply is None:
        host.skip("the host's agent did not answer the /task input within the timeout")
    grant = await new_grant(host, known, reply, "the retried /task input")
    card = await task_card(host, session_id, grant)
    # The agent answers inputs in turn: a second task started by the retry would have been started by now.
    await exchange(host, session_id, "Noted.")
    grants = [g["task_id"] for g in await grants_of(host) if g["grant_id"] not in known]
    host.expect(grants == [grant["task_id"]], f"the input sent twice started the tasks {grants}")
    shown = {m["approval_id"] for m in await everything(host, session_id) if m.get("approval_id")}
    host.expect(shown == {card["card_id"]}, f"the input sent twice shows the cards {sorted(shown)}")
