"""Cases of Personal approvals (spec/schema/userhost/approvals.schema.json): cards the owner allows once or
denies, stale decisions, rules (preview, save, ask first, pause), automatic review, refused actions, and the
notices and history messages of a card.

The spec gives a client no way to make an action: the host's agent proposes one in the main conversation.
The cases ask for one with the bundled stand-in's scripted intents (`/write PATH` + newline + content,
`/edit PATH` + old text + a line `---` + new text, `/run ARGV...`; a line `review: allow|deny|fail` in the
request scripts automatic review, and without one review is unsure), and skip when the host's agent makes
no card and no refusal of them. The files root is `{home}/user-spaces/<space>/<domain>/files`: the cases
read the effects there and prepare targets (symbolic and hard links, changed files) there themselves.
Executions run after `approvals.decide` answers: the cases reread the card with `approvals.list` until it
is final, within the reply timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ...outcomes import CaseFailed
from ..connection import Connection
from ..conversation import POLL, everything, exchange, poll
from ..personal import open_main, send
from ..session import PERSONAL, USER_SPACE, HostSession
from ..suite import USERHOST

LIST = "approvals.list"
DECIDE = "approvals.decide"
PREVIEW = "approvals.rules.preview"
SAVE = "approvals.rules.save"
RULES = "approvals.rules.list"
UPDATE = "approvals.rules.update"
DELETE = "approvals.rules.delete"
REVIEW_READ = "approvals.review.read"
REVIEW_SET = "approvals.review.set"
INVALIDATE = "plugin/client/invalidate"
FINAL = frozenset(
    {"succeeded", "failed", "unknown", "denied", "expired", "cancelled", "stale", "unauthorized"}
)
"""The final statuses of a card (`ApprovalStatus`)."""
STATUSES_OF_A_RUN = ("waiting", "approved", "running", "succeeded")
"""The statuses a card allowed once goes through, each one a change a notice tells."""
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
UNKNOWN_CARD = "card_" + "0" * 32
UNKNOWN_RULE = "rule_" + "0" * 32
APPEND = "sh -c 'echo ran >> {log}'"
"""A command that appends one line to `{log}` in the files root each time it runs."""


def canonical_digest(value: Any) -> str:
    """`sha256:` and the SHA-256 of the canonical JSON (RFC 8785) of `value`: for the objects of these cases
    (strings, integers, null), sorted keys without whitespace, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def files_root(host: HostSession) -> Path:
    """The Personal files root of the case's host."""
    return host.home / "user-spaces" / USER_SPACE / host.product_domain / "files"


def prepared(host: HostSession, path: str, content: str = "original\n") -> Path:
    """A file the case makes in the files root (its parents too)."""
    target = files_root(host) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return target


def runs_of(host: HostSession, log: str) -> int:
    """How many times an `APPEND` command for `log` has run."""
    target = files_root(host) / log
    return len(target.read_text(encoding="utf-8").splitlines()) if target.exists() else 0


async def reply_to(host: HostSession, session_id: str, text: str) -> dict[str, Any]:
    """Send `text`; the first assistant message after it that shows a card (`approval_id`) or says the call
    was refused. Skips when the host's agent makes neither within the reply timeout."""
    receipt = await send(host, text)
    user_seq = receipt["history_seq"]

    def found(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        mine = user_seq
        if mine is None:
            mine = next(
                (m["message_seq"] for m in messages if m["role"] == "user" and m["text"] == text), None
            )
        replies = [
            m
            for m in reversed(messages)
            if mine is not None
            and m["message_seq"] > mine
            and m["role"] == "assistant"
            and (m.get("approval_id") or m["text"].startswith("refused ("))
        ]
        return replies[0] if replies else None

    message = await poll(host, session_id, found)
    if message is None:
        host.skip(
            f"the host's agent made no card and no refusal of {text.splitlines()[0]!r} within the timeout"
        )
    assert isinstance(message, dict)
    return message


async def propose(host: HostSession, session_id: str, text: str) -> dict[str, Any]:
    """Send `text` and return the card the agent's tool call made, as `approvals.list` reads it once the
    host's policy has handled it."""
    message = await reply_to(host, session_id, text)
    host.expect(
        bool(message.get("approval_id")),
        f"the agent's call for {text.splitlines()[0]!r} was refused, not made a card: {message['text']!r}",
    )
    card = await read_card(host, session_id, message["approval_id"])
    host.expect(
        card["message_seq"] == message["message_seq"],
        f"card {card['card_id']} names the anchor {card['message_seq']}, but the message that shows it is "
        f"{message['message_seq']}",
    )
    host.expect(DIGEST.fullmatch(card["digest"]) is not None, f"the card's digest is {card['digest']!r}")
    # Policy (rules, then review) decides a card after it is saved and shown: once the agent has answered
    # the next message, the turn that made the card is over, and so is its policy.
    await exchange(host, session_id, f"Noted: {card['card_id']}")
    return await read_card(host, session_id, card["card_id"])


async def refused(host: HostSession, session_id: str, text: str, *codes: str) -> None:
    """Send `text`: the agent's call must be refused with one of `codes` (an action that breaks several
    refusal rules gets the code of any one of them), and no card made."""
    message = await reply_to(host, session_id, text)
    code = " or ".join(codes)
    host.expect(
        not message.get("approval_id") and message["text"].startswith(tuple(f"refused ({c})" for c in codes)),
        f"the agent's call for {text.splitlines()[0]!r} must be refused ({code}) without a card; the host "
        f"answered {message['text']!r} (approval_id {message.get('approval_id')})",
    )
    waiting = await listed(host, session_id)
    host.expect(waiting == [], f"a refused action made a card: {[c['card_id'] for c in waiting]}")
    shown = [m for m in await everything(host, session_id) if m.get("approval_id")]
    host.expect(shown == [], f"a refused action is shown as a card in the history: {shown}")


async def listed(host: HostSession, session_id: str, *card_ids: str) -> list[dict[str, Any]]:
    """`approvals.list`: the named cards, or (none named) the waiting ones."""
    params: dict[str, Any] = {"session_id": session_id}
    if card_ids:
        params["card_ids"] = list(card_ids)
    cards: list[dict[str, Any]] = (await host.call_ok(LIST, params))["cards"]
    return cards


async def read_card(host: HostSession, session_id: str, card_id: str) -> dict[str, Any]:
    [card] = await listed(host, session_id, card_id)
    host.expect(
        card["card_id"] == card_id, f"approvals.list of {card_id} answered the card {card['card_id']}"
    )
    return card


async def settled(host: HostSession, session_id: str, card_id: str) -> dict[str, Any]:
    """The card once its status is final; fails at the reply timeout."""
    deadline = asyncio.get_running_loop().time() + host.timeout
    while True:
        card = await read_card(host, session_id, card_id)
        if card["status"] in FINAL:
            return card
        if asyncio.get_running_loop().time() > deadline:
            raise CaseFailed(
                f"card {card_id} is still {card['status']} {host.timeout:g} s after it was approved"
            )
        await asyncio.sleep(POLL)


def decision(
    session_id: str, card: dict[str, Any], choice: str, request_id: str, **overrides: Any
) -> dict[str, Any]:
    """The params of `approvals.decide` of `card` as displayed (`overrides` replace fields)."""
    params = {
        "session_id": session_id,
        "card_id": card["card_id"],
        "digest": card["digest"],
        "expected_revision": card["revision"],
        "decision": choice,
        "request_id": request_id,
    }
    params.update(overrides)
    return params


async def decide(
    host: HostSession, session_id: str, card: dict[str, Any], choice: str, request_id: str
) -> dict[str, Any]:
    """The card `approvals.decide` answers."""
    params = decision(session_id, card, choice, request_id)
    result: dict[str, Any] = (await host.call_ok(DECIDE, params))["card"]
    host.expect(result["card_id"] == card["card_id"], f"{DECIDE} of {card['card_id']} answered {result}")
    return result


def expect_waiting(host: HostSession, card: dict[str, Any], what: str) -> None:
    host.expect(
        card["status"] == "waiting" and card.get("decision") is None and card.get("receipt") is None,
        f"{what}: card {card['card_id']} must wait for the owner, undecided; it is {card['status']} "
        f"(decision {card.get('decision')})",
    )


def expect_succeeded(host: HostSession, card: dict[str, Any], what: str) -> None:
    receipt = card.get("receipt")
    host.expect(card["status"] == "succeeded", f"{what}: card {card['card_id']} ended {card['status']}")
    host.expect(
        receipt is not None
        and (receipt["card_id"], receipt["digest"], receipt["outcome"], receipt["is_error"])
        == (card["card_id"], card["digest"], "succeeded", False),
        f"{what}: the receipt of card {card['card_id']} is {receipt}, not a success of its digest",
    )


def expect_decided_by(host: HostSession, card: dict[str, Any], by: str, verdict: str, what: str) -> None:
    made = card.get("decision") or {}
    host.expect(
        (made.get("by"), made.get("verdict")) == (by, verdict),
        f"{what}: card {card['card_id']} must be decided {verdict} by {by}; its decision is {made or None}",
    )


async def rule_from(
    host: HostSession, session_id: str, card: dict[str, Any], mode: str, request_id: str
) -> dict[str, Any]:
    """Preview the rule of `card` and save it in `mode`; the saved rule."""
    params = {
        "session_id": session_id,
        "card_id": card["card_id"],
        "digest": card["digest"],
        "expected_revision": card["revision"],
    }
    preview = (await host.call_ok(PREVIEW, params))["preview"]
    saved = {
        "session_id": session_id,
        "card_id": card["card_id"],
        "preview_digest": preview["preview_digest"],
        "mode": mode,
        "request_id": request_id,
    }
    rule: dict[str, Any] = (await host.call_ok(SAVE, saved))["rule"]
    return rule


async def update(host: HostSession, rule: dict[str, Any], request_id: str, **change: Any) -> dict[str, Any]:
    params = {"rule_id": rule["rule_id"], "expected_revision": rule["revision"], "request_id": request_id}
    updated: dict[str, Any] = (await host.call_ok(UPDATE, {**params, **change}))["rule"]
    return updated


# --- allow once, deny, stale decisions ------------------------------------------------------------


@USERHOST.case("approvals.allow-once", "approvals.decide-retry")
async def allow_once_writes_file(host: HostSession) -> None:
    """`/write notes/todo.txt` makes a waiting card with the file missing in its preview; allow once writes
    the file with the content, the card ends succeeded with a receipt of its digest, and a retried decision
    returns that card and receipt without writing again."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/write notes/todo.txt\nbuy milk\n")
    expect_waiting(host, card, "a card no rule or review handles")
    preview = card["preview"]
    host.expect(
        (preview["kind"], preview["path"], preview["operation"], preview["original"]["state"])
        == ("file", "notes/todo.txt", "write_file", "missing"),
        f"the preview of a write of a missing notes/todo.txt is {preview}",
    )
    target = files_root(host) / "notes" / "todo.txt"
    host.expect(not target.exists(), "the file was written before anyone allowed it")
    decided = await decide(host, session_id, card, "allow_once", "allow-todo")
    host.expect(decided["status"] not in ("waiting", "denied"), f"allow once answered the card {decided}")
    done = await settled(host, session_id, card["card_id"])
    expect_succeeded(host, done, "allow once")
    expect_decided_by(host, done, "owner", "allow", "allow once")
    host.expect(
        target.read_text("utf-8") == "buy milk\n", "the allowed write did not give the file its content"
    )
    target.write_text("changed by the owner\n", encoding="utf-8")
    again = await decide(host, session_id, card, "allow_once", "allow-todo")
    host.expect(
        again["status"] == "succeeded" and again.get("receipt") == done["receipt"],
        f"the retried decision answered {again}, not the card as it stands with its saved receipt",
    )
    later = await settled(host, session_id, card["card_id"])
    host.expect(later == done, f"the retried decision changed the card: {later}")
    host.expect(
        target.read_text("utf-8") == "changed by the owner\n", "the retried decision wrote the file again"
    )


@USERHOST.case("approvals.allow-once", "approvals.decide-retry")
async def allow_once_runs_command_once(host: HostSession) -> None:
    """`/run` of a command that appends a line to a file, allowed once, runs once: one line, a succeeded card
    whose receipt has exit code 0; the retried decision (same request ID) runs nothing; another identical
    request makes a new card that waits."""
    session_id = await open_main(host)
    command = "/run " + APPEND.format(log="ran.log")
    card = await propose(host, session_id, command)
    expect_waiting(host, card, "a command no rule or review handles")
    host.expect(card["preview"]["kind"] == "command", f"the preview of a command is {card['preview']}")
    host.expect(runs_of(host, "ran.log") == 0, "the command ran before anyone allowed it")
    await decide(host, session_id, card, "allow_once", "allow-run")
    done = await settled(host, session_id, card["card_id"])
    expect_succeeded(host, done, "allow once")
    host.expect(
        done["receipt"].get("exit_code") == 0, f"the receipt of a command that ran is {done['receipt']}"
    )
    again = await decide(host, session_id, card, "allow_once", "allow-run")
    host.expect(again.get("receipt") == done["receipt"], f"the retried decision answered {again}")
    second = await propose(host, session_id, command)
    host.expect(second["card_id"] != card["card_id"], "a new identical request got the earlier card")
    expect_waiting(host, second, "allow once saves no rule: the next identical command")
    host.expect(runs_of(host, "ran.log") == 1, f"the command ran {runs_of(host, 'ran.log')} times, not once")


@USERHOST.case("approvals.deny")
async def denied_command_never_runs(host: HostSession) -> None:
    """A denied command ends denied by the owner, without a receipt, and never runs, and a later decision of
    the card gets stale_revision."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/run " + APPEND.format(log="denied.log"))
    decided = await decide(host, session_id, card, "deny", "deny-run")
    host.expect(decided["status"] == "denied", f"a denial answered the card {decided['status']}")
    done = await settled(host, session_id, card["card_id"])
    host.expect(
        done["status"] == "denied" and done.get("receipt") is None,
        f"the denied card is {done['status']} with receipt {done.get('receipt')}",
    )
    expect_decided_by(host, done, "owner", "deny", "a denial")
    await host.call_error(DECIDE, decision(session_id, card, "allow_once", "allow-denied"), "stale_revision")
    host.expect(runs_of(host, "denied.log") == 0, "the denied command ran")


async def input_card(host: HostSession, session_id: str, process_id: str, line: str) -> dict[str, Any]:
    """`/input` of `line` to `process_id`: its card, waiting for the owner with a process_write preview."""
    card = await propose(host, session_id, f"/input {process_id} {line}")
    expect_waiting(host, card, "input to an interactive process")
    preview = card["preview"]
    host.expect(
        (preview["kind"], preview["process_id"], preview["data"])
        == ("process_write", process_id, line + "\n"),
        f"the preview of input {line!r} to {process_id} is {preview}",
    )
    return card


@USERHOST.case("approvals.interactive-input", "approvals.input-cancelled")
async def interactive_input_is_its_own_card(host: HostSession) -> None:
    """A process that reads one line and appends it to a file, allowed once, is named by its receipt. Two
    inputs to it then each wait for the owner, and no rule can handle them. The first, allowed, reaches the
    process, which then ends; the second is cancelled and never written."""
    session_id = await open_main(host)
    program = "sh -c 'read line; echo \"$line\" >> input.log'"
    start = await propose(host, session_id, f"/start {program}")
    expect_waiting(host, start, "a process no rule or review handles")
    await decide(host, session_id, start, "allow_once", "allow-start")
    started = await settled(host, session_id, start["card_id"])
    expect_succeeded(host, started, "allow once of a process_start")
    process_id = started["receipt"].get("process_id")
    host.expect(bool(process_id), f"the receipt of a started process names none: {started['receipt']}")
    first = await input_card(host, session_id, process_id, "first")
    second = await input_card(host, session_id, process_id, "second")
    host.expect(
        first["preview"]["argv"] == ["sh", "-c", 'read line; echo "$line" >> input.log'],
        (f"the preview of input names the process's argv as {first['preview']['argv']}"),
    )
    params = {"session_id": session_id, "card_id": first["card_id"], "digest": first["digest"]}
    await host.call_error(PREVIEW, {**params, "expected_revision": first["revision"]}, "invalid_params")
    await decide(host, session_id, first, "allow_once", "allow-first-input")
    expect_succeeded(host, await settled(host, session_id, first["card_id"]), "allowed input")
    log = files_root(host) / "input.log"
    deadline = asyncio.get_running_loop().time() + host.timeout
    while not log.exists() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(POLL)
    host.expect(log.exists() and log.read_text() == "first\n", "the allowed input did not reach the process")
    cancelled = await settled(host, session_id, second["card_id"])
    host.expect(
        cancelled["status"] == "cancelled" and cancelled.get("receipt") is None,
        f"input waiting for a process that ended is {cancelled['status']} (receipt {cancelled.get('receipt')})",
    )
    await host.call_error(
        DECIDE, decision(session_id, second, "allow_once", "allow-second"), "stale_revision"
    )
    host.expect(log.read_text() == "first\n", f"input for an ended process was written: {log.read_text()!r}")


async def expect_history(host: HostSession, session_id: str, card: dict[str, Any]) -> None:
    """The history shows the card's anchor and, after it, the outcome of the card that ran (waits for the
    outcome message)."""

    def outcome(messages: list[dict[str, Any]]) -> bool:
        return any(
            m.get("approval_id") == card["card_id"] and m["message_seq"] > card["message_seq"]
            for m in messages
        )

    await poll(host, session_id, outcome)
    about = [m for m in await everything(host, session_id) if m.get("approval_id") == card["card_id"]]
    anchors = [m for m in about if m["message_seq"] == card["message_seq"]]
    host.expect(
        len(anchors) == 1 and anchors[0]["role"] == "assistant",
        f"no assistant message at the card's anchor {card['message_seq']} has approval_id {card['card_id']}",
    )
    later = [m for m in about if m["message_seq"] > card["message_seq"]]
    host.expect(
        bool(later) and all(m["role"] == "assistant" for m in later),
        f"no assistant message after the anchor reports the {card['status']} card's outcome: {about}",
    )


@USERHOST.case("approvals.allow-once", "approvals.history")
async def allowed_write_in_history(host: HostSession) -> None:
    """The history shows the card of an allowed write at its anchor and its outcome after it, both with the
    card's approval_id."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/write history.txt\nseen\n")
    await decide(host, session_id, card, "allow_once", "allow-history")
    done = await settled(host, session_id, card["card_id"])
    expect_succeeded(host, done, "allow once")
    await expect_history(host, session_id, done)


@USERHOST.case("approvals.stale-revision")
async def stale_digest_or_revision(host: HostSession) -> None:
    """A decision naming another digest, or another revision, gets stale_revision and nothing runs; once the
    card is decided, a new decision at its old revision gets stale_revision too."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/run " + APPEND.format(log="stale.log"))
    other = "sha256:" + ("1" if card["digest"][-1] != "1" else "2") * 64
    await host.call_error(
        DECIDE, decision(session_id, card, "allow_once", "stale-1", digest=other), "stale_revision"
    )
    bumped = decision(session_id, card, "allow_once", "stale-2", expected_revision=card["revision"] + 1)
    await host.call_error(DECIDE, bumped, "stale_revision")
    still = await read_card(host, session_id, card["card_id"])
    host.expect(still == card, f"refused decisions changed the card: {still}")
    host.expect(runs_of(host, "stale.log") == 0, "a refused decision ran the command")
    await decide(host, session_id, card, "deny", "stale-3")
    await host.call_error(DECIDE, decision(session_id, card, "allow_once", "stale-4"), "stale_revision")
    host.expect(runs_of(host, "stale.log") == 0, "a decision of a denied card ran the command")


@USERHOST.case("approvals.stale-precondition")
async def changed_file_is_not_written(host: HostSession) -> None:
    """A write of an existing file whose content changes after the card was made (the preview showed the
    original) ends stale when allowed, and the file keeps the changed content."""
    session_id = await open_main(host)
    target = prepared(host, "plan.txt", "first draft\n")
    card = await propose(host, session_id, "/write plan.txt\nfrom the agent\n")
    original = card["preview"]["original"]
    host.expect(
        (original["state"], original.get("text")) == ("text", "first draft\n"),
        f"the preview of a small text original is {original}",
    )
    target.write_text("second draft\n", encoding="utf-8")
    await decide(host, session_id, card, "allow_once", "allow-changed")
    done = await settled(host, session_id, card["card_id"])
    host.expect(done["status"] == "stale", f"the card of a file changed since is {done['status']}, not stale")
    host.expect(
        target.read_text("utf-8") == "second draft\n", "the host wrote over a file changed since the card"
    )


# --- rules ----------------------------------------------------------------------------------------


@USERHOST.case(
    "approvals.rule-preview-writes-nothing", "approvals.rule-save-decides-nothing", "approvals.list-waiting"
)
async def rule_decides_only_later_actions(host: HostSession) -> None:
    """The rule preview of a waiting write shows its exact path and operation and saves nothing; saving the
    rule decides neither that card nor another waiting one (approvals.list without card_ids reads both, oldest
    first); the next write to the path is approved by the rule and runs, and the two still wait."""
    session_id = await open_main(host)
    first = await propose(host, session_id, "/write notes/rule.txt\none\n")
    second = await propose(host, session_id, "/write notes/rule.txt\ntwo\n")
    params = {
        "session_id": session_id,
        "card_id": first["card_id"],
        "digest": first["digest"],
        "expected_revision": first["revision"],
    }
    preview = (await host.call_ok(PREVIEW, params))["preview"]
    host.expect(
        (preview["card_id"], preview["kind"], preview["match"])
        == (first["card_id"], "file", {"path": "notes/rule.txt", "operation": "write_file"}),
        f"the rule preview of a write of notes/rule.txt is {preview}",
    )
    host.expect((await host.call_ok(RULES, {}))["rules"] == [], "a rule preview saved a rule")
    host.expect(
        await listed(host, session_id) == [first, second],
        "approvals.list without card_ids must read the waiting cards, oldest first",
    )
    waiting = await listed(host, session_id, first["card_id"], second["card_id"])
    host.expect(waiting == [first, second], f"a rule preview changed the waiting cards: {waiting}")
    saved = {
        "session_id": session_id,
        "card_id": first["card_id"],
        "preview_digest": preview["preview_digest"],
        "mode": "automatic",
        "request_id": "save-rule",
    }
    rule = (await host.call_ok(SAVE, saved))["rule"]
    host.expect(
        (rule["kind"], rule["match"], rule["mode"], rule["paused"], rule["source_card_id"])
        == ("file", preview["match"], "automatic", False, first["card_id"]),
        f"the saved rule is {rule}, not the previewed one",
    )
    waiting = await listed(host, session_id, first["card_id"], second["card_id"])
    host.expect(waiting == [first, second], f"saving a rule decided waiting cards: {waiting}")
    host.expect(not (files_root(host) / "notes" / "rule.txt").exists(), "saving a rule wrote the file")
    third = await propose(host, session_id, "/write notes/rule.txt\nthree\n")
    expect_decided_by(host, third, "rule", "allow", "the next write to the rule's path")
    host.expect(
        third["decision"].get("rule_id") == rule["rule_id"], f"the rule's card names {third['decision']}"
    )
    expect_succeeded(host, await settled(host, session_id, third["card_id"]), "a write approved by a rule")
    host.expect(
        (files_root(host) / "notes" / "rule.txt").read_text("utf-8") == "three\n",
        "the rule's write is missing",
    )
    waiting = await listed(host, session_id)
    host.expect(
        [c["card_id"] for c in waiting] == [first["card_id"], second["card_id"]],
        f"a rule's approval decided earlier cards: {waiting}",
    )


@USERHOST.case("approvals.ask-first-wins")
async def ask_first_wins(host: HostSession) -> None:
    """A rule switched to ask_first makes the next write to its path wait for the owner, even when
    automatic review would allow it (`review: allow` in the request), and the write does not happen."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/write asked.txt\none\n")
    rule = await rule_from(host, session_id, card, "automatic", "save-asked")
    switched = await update(host, rule, "ask-first", mode="ask_first")
    host.expect(
        (switched["mode"], switched["paused"], switched["revision"])
        == ("ask_first", False, rule["revision"] + 1),
        f"the switched rule is {switched}",
    )
    next_card = await propose(host, session_id, "/write asked.txt\nreview: allow\n")
    expect_waiting(host, next_card, "a write an ask_first rule matches, that review would allow")
    host.expect(not (files_root(host) / "asked.txt").exists(), "a write an ask_first rule matches ran")


@USERHOST.case("approvals.paused-rule")
async def paused_rule_handles_nothing(host: HostSession) -> None:
    """A paused automatic rule handles nothing: the next matching command waits for the owner; once the
    rule is resumed, the next one is approved by it and runs."""
    session_id = await open_main(host)
    command = "/run " + APPEND.format(log="paused.log")
    card = await propose(host, session_id, command)
    rule = await rule_from(host, session_id, card, "automatic", "save-paused")
    paused = await update(host, rule, "pause", paused=True)
    host.expect(paused["paused"] is True, f"the paused rule is {paused}")
    waiting = await propose(host, session_id, command)
    expect_waiting(host, waiting, "a command only a paused rule matches")
    host.expect(runs_of(host, "paused.log") == 0, "a command only a paused rule matches ran")
    await update(host, paused, "resume", paused=False)
    handled = await propose(host, session_id, command)
    expect_decided_by(host, handled, "rule", "allow", "a command the resumed rule matches")
    expect_succeeded(
        host, await settled(host, session_id, handled["card_id"]), "a command approved by a rule"
    )
    host.expect(
        runs_of(host, "paused.log") == 1, f"the command ran {runs_of(host, 'paused.log')} times, not once"
    )


@USERHOST.case("approvals.rule-deleted", "approvals.rule-revision")
async def deleted_rule_handles_nothing(host: HostSession) -> None:
    """Rule updates and deletions name the rule's current revision, else stale_revision; an update that
    changes nothing keeps the revision; a deletion retried with its request ID answers the rule again, and
    the deleted rule is gone: it handles no later identical write and an update of it gets not_found."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/write deleted.txt\none\n")
    rule = await rule_from(host, session_id, card, "automatic", "save-deleted")
    stale = {"rule_id": rule["rule_id"], "expected_revision": rule["revision"] + 1}
    await host.call_error(UPDATE, {**stale, "paused": True, "request_id": "stale-update"}, "stale_revision")
    await host.call_error(DELETE, {**stale, "request_id": "stale-delete"}, "stale_revision")
    same = await update(host, rule, "no-change", mode="automatic", paused=False)
    host.expect(
        same == rule, f"an update that changes nothing answered {same}, not the rule as it was {rule}"
    )
    deletion = {"rule_id": rule["rule_id"], "expected_revision": rule["revision"], "request_id": "delete"}
    for attempt in ("the deletion", "the retried deletion"):
        deleted = await host.call_ok(DELETE, deletion)
        host.expect(deleted == {"rule_id": rule["rule_id"]}, f"{attempt} answered {deleted}")
    host.expect((await host.call_ok(RULES, {}))["rules"] == [], "the deleted rule is still listed")
    gone = {"rule_id": rule["rule_id"], "expected_revision": rule["revision"], "request_id": "update-deleted"}
    await host.call_error(UPDATE, {**gone, "paused": True}, "not_found")
    later = await propose(host, session_id, "/write deleted.txt\ntwo\n")
    expect_waiting(host, later, "a write only a deleted rule matched")
    host.expect(not (files_root(host) / "deleted.txt").exists(), "a deleted rule approved a write")


@USERHOST.case("approvals.durable")
async def kept_across_a_kill(host: HostSession) -> None:
    """A waiting card, a denied card, a saved rule and the review setting, each acknowledged, are still there
    after the host is killed (SIGKILL) and started again on the same home: the waiting card can then be
    allowed once and runs, and the rule still handles the next identical write."""
    session_id = await open_main(host)
    waiting = await propose(host, session_id, "/write kept/waiting.txt\nkept\n")
    denied = await propose(host, session_id, "/write kept/denied.txt\nnever\n")
    denied = await decide(host, session_id, denied, "deny", "deny-kept")
    ruled = await propose(host, session_id, "/write kept/ruled.txt\none\n")
    rule = await rule_from(host, session_id, ruled, "automatic", "save-kept")
    params = {"automatic_review": False, "expected_revision": 0, "request_id": "review-kept"}
    settings = (await host.call_ok(REVIEW_SET, params))["settings"]
    await host.kill()
    await host.restart()
    again = await open_main(host)
    host.expect(again == session_id, f"after a kill the main session is {again!r}, not {session_id!r}")
    cards = await listed(host, session_id, waiting["card_id"], denied["card_id"])
    host.expect(cards == [waiting, denied], f"after a kill the cards read {cards}, not {[waiting, denied]}")
    rules = (await host.call_ok(RULES, {}))["rules"]
    host.expect(rules == [rule], f"after a kill the rules are {rules}, not {[rule]}")
    kept = (await host.call_ok(REVIEW_READ, {}))["settings"]
    host.expect(kept == settings, f"after a kill the review setting is {kept}, not {settings}")
    await decide(host, session_id, waiting, "allow_once", "allow-kept")
    expect_succeeded(host, await settled(host, session_id, waiting["card_id"]), "a card allowed after a kill")
    host.expect(
        (files_root(host) / "kept" / "waiting.txt").read_text("utf-8") == "kept\n",
        "the card allowed after a kill did not write its file",
    )
    later = await propose(host, session_id, "/write kept/ruled.txt\ntwo\n")
    expect_decided_by(host, later, "rule", "allow", "a write the rule saved before the kill matches")


# --- digests --------------------------------------------------------------------------------------


@USERHOST.case("approvals.action-digest", "approvals.preview-digest")
async def digests_are_canonical(host: HostSession) -> None:
    """A card's digest is the canonical digest of its action with the precondition (null for a missing
    file, the original's sha256 and size for an existing one) or, for a command, the resolved command; a
    rule preview's digest is the canonical digest of its kind and match."""
    session_id = await open_main(host)
    created = await propose(host, session_id, "/write fresh.txt\nnew\n")
    wanted = canonical_digest({"action": created["action"], "precondition": None})
    host.expect(created["digest"] == wanted, f"the digest of a write of a missing file is not {wanted}")
    original = b"kept\n"
    prepared(host, "kept.txt", original.decode())
    replaced = await propose(host, session_id, "/write kept.txt\nreplaced\n")
    precondition = {"sha256": hashlib.sha256(original).hexdigest(), "size": len(original)}
    wanted = canonical_digest({"action": replaced["action"], "precondition": precondition})
    host.expect(
        replaced["digest"] == wanted,
        f"the digest of a write of an existing file is not {wanted} ({precondition})",
    )
    command = await propose(host, session_id, "/run " + APPEND.format(log="digest.log"))
    resolved = command["preview"]["resolved_command"]
    wanted = canonical_digest({"action": command["action"], "resolved_command": resolved})
    host.expect(
        command["digest"] == wanted, f"the digest of a command resolved to {resolved} is not {wanted}"
    )
    params = {
        "session_id": session_id,
        "card_id": command["card_id"],
        "digest": command["digest"],
        "expected_revision": command["revision"],
    }
    preview = (await host.call_ok(PREVIEW, params))["preview"]
    wanted = canonical_digest({"kind": preview["kind"], "match": preview["match"]})
    host.expect(preview["preview_digest"] == wanted, f"the rule preview's digest is not {wanted}")
    host.expect(
        preview["match"]
        == {
            "argv": command["action"]["argv"],
            "resolved_command": resolved,
            "cwd": ".",
            "env": {},
            "permission_mode": "standard",
        },
        f"the rule preview of a command does not match its whole invocation: {preview['match']}",
    )


# --- automatic review -----------------------------------------------------------------------------


@USERHOST.case("approvals.review-default-on", "approvals.review-allow")
async def review_allows(host: HostSession) -> None:
    """A new space has automatic review on (not explicit, revision 0); a write whose request review allows
    is approved by review and runs."""
    session_id = await open_main(host)
    settings = (await host.call_ok(REVIEW_READ, {}))["settings"]
    host.expect(
        settings == {"automatic_review": True, "explicit": False, "revision": 0},
        f"a new space's review setting is {settings}",
    )
    card = await propose(host, session_id, "/write reviewed.txt\nreview: allow\n")
    expect_decided_by(host, card, "review", "allow", "a write review allows")
    expect_succeeded(host, await settled(host, session_id, card["card_id"]), "a write approved by review")
    host.expect((files_root(host) / "reviewed.txt").exists(), "the write review allowed did not happen")


@USERHOST.case("approvals.review-deny")
async def review_denies(host: HostSession) -> None:
    """A command whose request review denies ends denied by review and never runs."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/run " + APPEND.format(log="reviewed.log") + "\nreview: deny")
    done = await settled(host, session_id, card["card_id"])
    host.expect(done["status"] == "denied", f"a command review denies ended {done['status']}")
    expect_decided_by(host, done, "review", "deny", "a command review denies")
    host.expect(runs_of(host, "reviewed.log") == 0, "a command review denied ran")


@USERHOST.case("approvals.review-unavailable")
async def review_unavailable_waits(host: HostSession) -> None:
    """When the reviewer fails (`review: fail`), the card waits for the owner with review verdict
    unavailable, and nothing runs."""
    session_id = await open_main(host)
    card = await propose(host, session_id, "/write failed-review.txt\nreview: fail\n")
    expect_waiting(host, card, "a write whose review failed")
    verdict = (card.get("review") or {}).get("verdict")
    host.expect(verdict == "unavailable", f"the review of a failed reviewer is {card.get('review')}")
    host.expect(not (files_root(host) / "failed-review.txt").exists(), "a write whose review failed ran")


@USERHOST.case("approvals.review-off")
async def review_off_waits(host: HostSession) -> None:
    """With automatic review set off (the setting is then explicit, at the next revision), a write whose
    request review would allow waits for the owner, unreviewed."""
    session_id = await open_main(host)
    params = {"automatic_review": False, "expected_revision": 0, "request_id": "review-off"}
    settings = (await host.call_ok(REVIEW_SET, params))["settings"]
    host.expect(
        settings == {"automatic_review": False, "explicit": True, "revision": 1},
        f"automatic review set off answered {settings}",
    )
    card = await propose(host, session_id, "/write unreviewed.txt\nreview: allow\n")
    expect_waiting(host, card, "a write with automatic review off")
    host.expect(card.get("review") is None, f"a card was reviewed with review off: {card.get('review')}")
    host.expect(not (files_root(host) / "unreviewed.txt").exists(), "a write with review off ran unapproved")


@USERHOST.case("approvals.review-set-stale")
async def review_set_at_a_stale_revision(host: HostSession) -> None:
    """approvals.review.set at a revision the setting is not at gets stale_revision, and the setting stays
    as it was."""
    await open_main(host)
    before = (await host.call_ok(REVIEW_READ, {}))["settings"]
    stale = {
        "automatic_review": False,
        "expected_revision": before["revision"] + 1,
        "request_id": "review-stale",
    }
    await host.call_error(REVIEW_SET, stale, "stale_revision")
    after = (await host.call_ok(REVIEW_READ, {}))["settings"]
    host.expect(after == before, f"a refused review.set changed the setting from {before} to {after}")


# --- refusals -------------------------------------------------------------------------------------


@USERHOST.case("approvals.refuse-symlink")
async def symlink_refused(host: HostSession) -> None:
    """A write whose target is a symbolic link (to a file in the files root) gets no card: the agent's call
    is refused with symlink, and the link's target keeps its content."""
    session_id = await open_main(host)
    target = prepared(host, "real.txt")
    (files_root(host) / "link.txt").symlink_to("real.txt")
    await refused(host, session_id, "/write link.txt\nthrough the link\n", "symlink")
    host.expect(
        target.read_text("utf-8") == "original\n", "a write through a symbolic link changed its target"
    )


@USERHOST.case("approvals.refuse-hard-link")
async def hard_link_refused(host: HostSession) -> None:
    """A write of a file with a second hard link gets no card: the agent's call is refused with
    multiple_links."""
    session_id = await open_main(host)
    target = prepared(host, "linked.txt")
    os.link(target, files_root(host) / "twin.txt")
    await refused(host, session_id, "/write linked.txt\nboth names\n", "multiple_links")
    host.expect(target.read_text("utf-8") == "original\n", "a write of a hard-linked file changed it")


@USERHOST.case("approvals.refuse-protected-path")
async def protected_path_refused(host: HostSession) -> None:
    """A write under the attachment store (`attachments/...`) gets no card: the agent's call is refused with
    protected_path."""
    session_id = await open_main(host)
    await refused(host, session_id, "/write attachments/planted.txt\nnot an attachment\n", "protected_path")
    host.expect(
        not (files_root(host) / "attachments" / "planted.txt").exists(),
        "a write into the attachment store ran",
    )


@USERHOST.case("approvals.refuse-missing-edit")
async def missing_edit_refused(host: HostSession) -> None:
    """An edit of a file that does not exist gets no card: the agent's call is refused with
    not_regular_file."""
    session_id = await open_main(host)
    await refused(host, session_id, "/edit missing.txt\nold\n---\nnew", "not_regular_file")


@USERHOST.case("approvals.refuse-sensitive-path")
async def sensitive_path_refused(host: HostSession) -> None:
    """A write of an environment file (`.env`) gets no card: the agent's call is refused with sensitive_path."""
    session_id = await open_main(host)
    await refused(host, session_id, "/write .env\nTOKEN=planted\n", "sensitive_path")
    host.expect(not (files_root(host) / ".env").exists(), "a write of a sensitive path ran")


@USERHOST.case("approvals.refuse-outside-root")
async def outside_root_refused(host: HostSession) -> None:
    """A write whose path climbs out of the files root (`../`), or is absolute, gets no card: the agent's call
    is refused with path_outside_root before the path pattern is checked."""
    session_id = await open_main(host)
    await refused(host, session_id, "/write ../escaped.txt\nout of the root\n", "path_outside_root")
    await refused(
        host,
        session_id,
        f"/write {files_root(host).parent / 'absolute.txt'}\nabsolute\n",
        "path_outside_root",
    )
    host.expect(not (files_root(host).parent / "absolute.txt").exists(), "an absolute write ran")
    host.expect(not (files_root(host).parent / "escaped.txt").exists(), "a write out of the files root ran")


# --- errors and notices ---------------------------------------------------------------------------


@USERHOST.case("approvals.request-id-conflict")
async def request_id_reused(host: HostSession) -> None:
    """A decision's request ID sent again for another card, or with another decision of its card, gets
    request_id_conflict; the other card keeps waiting and its command does not run."""
    session_id = await open_main(host)
    first = await propose(host, session_id, "/write conflict.txt\none\n")
    second = await propose(host, session_id, "/run " + APPEND.format(log="conflict.log"))
    await decide(host, session_id, first, "deny", "decision-1")
    await host.call_error(
        DECIDE, decision(session_id, second, "allow_once", "decision-1"), "request_id_conflict"
    )
    await host.call_error(
        DECIDE, decision(session_id, first, "allow_once", "decision-1"), "request_id_conflict"
    )
    still = await read_card(host, session_id, second["card_id"])
    host.expect(still == second, f"a conflicting request ID changed the other card: {still}")
    host.expect(runs_of(host, "conflict.log") == 0, "a conflicting request ID ran the other card's command")


@USERHOST.case("approvals.not-found")
async def unknown_card_or_rule(host: HostSession) -> None:
    """An unknown card (approvals.list by card_ids, approvals.decide) or rule (approvals.rules.update,
    approvals.rules.delete) gets not_found."""
    session_id = await open_main(host)
    await host.call_error(LIST, {"session_id": session_id, "card_ids": [UNKNOWN_CARD]}, "not_found")
    unknown = {"card_id": UNKNOWN_CARD, "digest": "sha256:" + "0" * 64, "expected_revision": 1}
    params = {"session_id": session_id, **unknown, "decision": "deny", "request_id": "unknown-1"}
    await host.call_error(DECIDE, params, "not_found")
    rule = {"rule_id": UNKNOWN_RULE, "expected_revision": 1}
    await host.call_error(UPDATE, {**rule, "paused": True, "request_id": "unknown-2"}, "not_found")
    await host.call_error(DELETE, {**rule, "request_id": "unknown-3"}, "not_found")


async def notices(connection: Connection, host: HostSession, seq: int, count: int) -> list[dict[str, Any]]:
    """The `approvals` notices on `connection` naming `seq`, once there are `count` (or at the timeout)."""
    deadline = asyncio.get_running_loop().time() + host.timeout
    while True:
        found = [
            m["params"]
            for m in connection.notifications
            if m["method"] == INVALIDATE
            and m["params"].get("topic") == "approvals"
            and seq in m["params"].get("message_seqs", [])
        ]
        left = deadline - asyncio.get_running_loop().time()
        if len(found) >= count or left <= 0 or connection.closed.is_set():
            return found
        # Bounded, because a notice that lands between the scan and the wait sets no new arrival.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(connection.next_arrival(), min(left, POLL))


@USERHOST.case("approvals.invalidation")
async def every_status_change_noticed(host: HostSession) -> None:
    """Another client of the graph gets a plugin/client/invalidate with topic approvals, wuu.personal, the
    main session and the card's anchor for the card's creation and for each of its status changes: at least
    one notice each for waiting, approved, running and succeeded."""
    session_id = await open_main(host)
    other = await host.connect()
    handshake = await host.initialize(on=other)
    card = await propose(host, session_id, "/write noticed.txt\nseen\n")
    await decide(host, session_id, card, "allow_once", "allow-noticed")
    done = await settled(host, session_id, card["card_id"])
    host.expect(done["status"] == "succeeded", f"the allowed write ended {done['status']}")
    found = await notices(other, host, card["message_seq"], len(STATUSES_OF_A_RUN))
    host.expect(
        len(found) >= len(STATUSES_OF_A_RUN),
        f"card {card['card_id']} went through {', '.join(STATUSES_OF_A_RUN)}, but the other client got "
        f"{len(found)} approvals notices naming its anchor {card['message_seq']}",
    )
    wanted = {
        "graph_generation": handshake["graph_generation"],
        "plugin_id": PERSONAL,
        "topic": "approvals",
        "session_id": session_id,
    }
    wrong = [notice for notice in found if {name: notice[name] for name in wanted} != wanted]
    host.expect(not wrong, f"approvals notices {wrong} are not of {wanted}")
