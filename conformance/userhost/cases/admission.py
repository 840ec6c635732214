"""Cases of input admission (`agents.send`, `agents.receipts`): the main session, the receipt a submission
gets, replays and conflicts by request and client input ID, and `read_at`, which no client can set."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..personal import (
    SEND,
    attachment,
    content,
    expect_not_admitted,
    history,
    open_main,
    receipts,
    send,
    send_error,
    send_input,
    sha256_hex,
    submit,
    user_input,
)
from ..session import PERSONAL, RECEIPTS, HostSession
from ..suite import USERHOST

OTHER_SESSION = "conformance-not-the-main-session"
BOUND = ("receipt_id", "session_id", "plugin_id", "client_input_id", "request_id", "text_sha256")
"""Receipt fields fixed at admission: a later read of the receipt has the same values."""
BOUND_LATER = ("attachments", "created_at", "accepted", "accepted_at")


def expect_same_receipt(
    host: HostSession, later: Mapping[str, Any], first: Mapping[str, Any], what: str
) -> None:
    """Fail unless `later` is `first` as it may since stand: the same bound fields, a revision no older,
    the same history place once in history, and a new revision for any field that changed."""
    for name in (*BOUND, *BOUND_LATER):
        host.expect(later[name] == first[name], f"{what}: {name} is {later[name]!r}, not {first[name]!r}")
    host.expect(
        later["revision"] >= first["revision"],
        f"{what}: revision {later['revision']} is older than {first['revision']}",
    )
    if first["in_history"]:
        host.expect(
            later["in_history"] and later["history_seq"] == first["history_seq"],
            f"{what}: the input left its history place {first['history_seq']}",
        )
    changed = [name for name in ("in_history", "history_seq", "read_at") if later[name] != first[name]]
    host.expect(
        not changed or later["revision"] > first["revision"],
        f"{what}: {', '.join(changed)} changed without a new revision",
    )


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [message["text"] for message in messages if message["role"] == "user"]


async def expect_user_texts(host: HostSession, expected: list[str], what: str) -> None:
    """Fail unless the user messages of the history are `expected`, newest first (when the host serves
    agents.history.read: the receipts are then all there is to see)."""
    messages = await history(host)
    if messages is not None:
        texts = user_texts(messages)
        host.expect(texts == expected, f"{what}: the history's user messages are {texts}, not {expected}")


@USERHOST.case("admission.main-session")
async def main_session(host: HostSession) -> None:
    """agents.main_session answers the same ID twice and on a second client; agents.send and agents.receipts
    naming another session get not_found, and that input is not admitted."""
    main = await open_main(host)
    host.expect(await host.main_session() == main, "agents.main_session named another session the 2nd time")
    if host.has_socket:
        other = await host.client()
        again = await host.main_session(on=other)
        host.expect(again == main, f"a second client's agents.main_session is {again!r}, not {main!r}")
    envelope = user_input("sent to another session")
    await send_error(host, envelope, "not_found", session_id=OTHER_SESSION)
    params = {"session_id": OTHER_SESSION, "client_input_ids": [envelope["client_input_id"]]}
    await host.call_error("agents.receipts", params, "not_found")
    await expect_not_admitted(host, envelope, "an input sent to another session")


@USERHOST.case("admission.receipt")
async def receipt(host: HostSession) -> None:
    """A send with multibyte text and two attachments answers replayed false and a receipt that names the
    main session, wuu.personal, both IDs, the text's SHA-256 and the attachments' metadata in order, is
    accepted with read_at null, and is in the history at history_seq with that text and metadata."""
    main = await open_main(host)
    text = "Grüße, 世界 😀"
    files = [
        attachment(b"the first file", "first.txt", "text/plain"),
        attachment(content(1000, 1), "second.bin", "application/octet-stream"),
    ]
    envelope = user_input(text, files)
    sent = await send_input(host, envelope)
    host.expect(sent["replayed"] is False, "a new submission answered replayed true")
    got = sent["receipt"]
    expected = {
        "session_id": main,
        "plugin_id": PERSONAL,
        "client_input_id": envelope["client_input_id"],
        "request_id": envelope["request_id"],
        "text_sha256": sha256_hex(text.encode("utf-8")),
    }
    for name, value in expected.items():
        host.expect(got[name] == value, f"the receipt's {name} is {got[name]!r}, not {value!r}")
    bound = [(a["filename"], a["media_type"], a["size"], a["sha256"]) for a in got["attachments"]]
    submitted = [(a["filename"], a["media_type"], a["size"], a["sha256"]) for a in files]
    host.expect(bound == submitted, f"the receipt binds the attachments {bound}, not {submitted}")
    ids = [a["attachment_id"] for a in got["attachments"]]
    host.expect(len(set(ids)) == len(ids), f"two attachments have the same attachment_id: {ids}")
    host.expect(got["accepted"] is True and got["accepted_at"] is not None, "the receipt is not accepted")
    host.expect(got["read_at"] is None, f"a new submission's receipt is already read: {got['read_at']}")
    if not got["in_history"]:
        host.expect(got["history_seq"] is None, "a receipt not in history has a history_seq")
        return
    host.expect(got["history_seq"] is not None, "a receipt in history has no history_seq")
    messages = await history(host)
    if messages is not None:
        found = [m for m in messages if m["message_seq"] == got["history_seq"]]
        host.expect(found, f"the history has no message at the receipt's history_seq {got['history_seq']}")
        message = found[0]
        host.expect(
            (message["role"], message["text"]) == ("user", text),
            f"the message at history_seq is {message['role']} {message['text']!r}, not the user's text",
        )
        host.expect(
            message["attachments"] == got["attachments"],
            "the history's attachment metadata differs from the receipt's",
        )
    second = await send(host, "a second input")
    host.expect(second["receipt_id"] != got["receipt_id"], "two inputs got the same receipt_id")
    host.expect(second["attachments"] == [], f"an input without attachments binds {second['attachments']}")


@USERHOST.case("admission.replay")
async def replay(host: HostSession) -> None:
    """The same send again, and again on a second client, answers the first receipt with replayed true,
    and the history holds the input once."""
    await open_main(host)
    text = "sent once, answered thrice"
    envelope = user_input(text, [attachment(b"replayed bytes", "replay.txt")])
    first = await send_input(host, envelope)
    host.expect(first["replayed"] is False, "the first submission answered replayed true")
    clients = [host.main, await host.client()] if host.has_socket else [host.main]
    for number, client in enumerate(clients, 1):
        again = await send_input(host, envelope, on=client)
        host.expect(again["replayed"] is True, f"retry {number} answered replayed false")
        expect_same_receipt(host, again["receipt"], first["receipt"], f"retry {number}'s receipt")
    messages = await history(host)
    if messages is not None:
        count = user_texts(messages).count(text)
        host.expect(count == 1, f"the history holds the replayed input {count} times")
    stored = await receipts(host, envelope["client_input_id"])
    host.expect(len(stored) == 1, f"agents.receipts found {len(stored)} receipts of one input")


@USERHOST.case("admission.request-id-conflict")
async def request_id_conflict(host: HostSession) -> None:
    """The request ID of an admitted input sent with another client input ID, another text, or another
    attachment list gets request_id_conflict each time, and none of them is admitted."""
    await open_main(host)
    first = user_input("the original", [attachment(b"original bytes")])
    await send_input(host, first)
    same = {"request_id": first["request_id"]}
    others = [
        user_input("the original", first["attachments"], **same),  # another client_input_id
        user_input("another text", first["attachments"], client_input_id=first["client_input_id"], **same),
        user_input(
            "the original", [attachment(b"other bytes")], client_input_id=first["client_input_id"], **same
        ),
        user_input("the original", client_input_id=first["client_input_id"], **same),  # no attachments
    ]
    for other in others:
        await send_error(host, other, "request_id_conflict")
    found = await receipts(host, others[0]["client_input_id"])
    host.expect(found == [], "a conflicting input with a new client input ID has a receipt")
    await expect_user_texts(host, ["the original"], "after the conflicts")
    stored = await receipts(host, first["client_input_id"])
    attachments = [a["sha256"] for a in stored[0]["attachments"]] if stored else []
    host.expect(
        attachments == [first["attachments"][0]["sha256"]], "the original receipt's attachments changed"
    )


@USERHOST.case("admission.client-input-conflict")
async def client_input_conflict(host: HostSession) -> None:
    """A new request ID with the client input ID of an admitted input (another text, then the same text)
    gets invalid_params with field user_input.client_input_id; the first receipt stays as it was."""
    await open_main(host)
    first = user_input("the first input")
    admitted = (await send_input(host, first))["receipt"]
    shared = {"client_input_id": first["client_input_id"]}
    for text in ("a second input", "the first input"):
        again = user_input(text, **shared)
        await send_error(host, again, "invalid_params", field="user_input.client_input_id")
    stored = await receipts(host, first["client_input_id"])
    host.expect(len(stored) == 1, f"agents.receipts found {len(stored)} receipts of one client input ID")
    expect_same_receipt(host, stored[0], admitted, "the first input's receipt")
    await expect_user_texts(host, ["the first input"], "after the refusals")


@USERHOST.case("admission.read-at-not-settable")
async def read_at_not_settable(host: HostSession) -> None:
    """read_at or a receipt in user_input, and read_at in the send params, get invalid_params naming the
    field and admit nothing; the same IDs sent plainly then make a new receipt with read_at null."""
    main = await open_main(host)
    when = "2026-01-01T00:00:00Z"
    plain = user_input("claims to be read")
    ids = {"client_input_id": plain["client_input_id"], "request_id": plain["request_id"]}
    claims = [
        (user_input(plain["text"], **ids, read_at=when), {"session_id": main}, "user_input.read_at"),
        (
            user_input(plain["text"], **ids, receipt={"read_at": when}),
            {"session_id": main},
            "user_input.receipt",
        ),
        (plain, {"session_id": main, "read_at": when}, "params.read_at"),
    ]
    for envelope, params, field in claims:
        message = await host.call("agents.send", params, user_input=envelope)
        host.expect_error(message, "invalid_params", f"agents.send with {field}", field)
    await expect_not_admitted(host, plain, "an input that claimed read_at")
    sent = await send_input(host, plain)
    host.expect(sent["replayed"] is False, "after the refusals, the plain send answered replayed true")
    host.expect(
        sent["receipt"]["read_at"] is None, f"the new receipt's read_at is {sent['receipt']['read_at']}"
    )


@USERHOST.case("admission.receipts-read")
async def receipts_read(host: HostSession) -> None:
    """agents.receipts of (second, unknown, first) answers the second's and the first's receipts in that
    order, each the send's receipt at the same or a later revision; on another client too."""
    await open_main(host)
    first = await send(host, "first of two")
    second = await send(host, "second of two")
    asked = [second["client_input_id"], "conformance-never-sent", first["client_input_id"]]
    clients = [host.main, await host.client()] if host.has_socket else [host.main]
    for client in clients:
        found = await receipts(host, *asked, on=client)
        named = [r["client_input_id"] for r in found]
        host.expect(named == asked[::2], f"agents.receipts of {asked} answered the receipts of {named}")
        expect_same_receipt(host, found[0], second, "the second input's receipt")
        expect_same_receipt(host, found[1], first, "the first input's receipt")


@USERHOST.case("admission.empty-text")
async def empty_text(host: HostSession) -> None:
    """Empty text with attachments absent or empty gets invalid_params with field user_input.text and is
    not admitted; empty text with one attachment is admitted."""
    await open_main(host)
    no_files: list[dict[str, Any]] = []
    for attachments in (None, no_files):
        envelope = user_input("", attachments)
        await send_error(host, envelope, "invalid_params", field="user_input.text")
        found = await receipts(host, envelope["client_input_id"])
        host.expect(found == [], "an empty input without attachments was admitted")
    await expect_user_texts(host, [], "after refusing empty inputs")
    admitted = await send(host, "", [attachment(b"only a file")])
    host.expect(admitted["text_sha256"] == sha256_hex(b""), "empty text's text_sha256 is not SHA-256 of b''")


@USERHOST.case("admission.receipts-off")
async def receipts_off(host: HostSession) -> None:
    """On a host whose composition leaves out wuu.client-input-receipts, a send and its retry get
    input_receipts_unavailable and admit nothing. Skipped on a host that admits the input: its composition
    selects the observer (every other admission case checks that host)."""
    await open_main(host)
    envelope = user_input("sent without the receipts observer")
    message = await submit(host, envelope)
    if host.unserved(SEND, message):
        host.needs(SEND)
    if "result" in message:
        host.skip(
            f"the host admitted the input: its composition selects {RECEIPTS}, and this case checks one without it"
        )
    host.expect_error(message, "input_receipts_unavailable", SEND)
    host.expect_error(await submit(host, envelope), "input_receipts_unavailable", SEND)
    await expect_not_admitted(host, envelope, "the input sent without the receipts observer")
