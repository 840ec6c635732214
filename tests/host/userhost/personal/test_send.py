"""Input admission through `agents.send` with the host-owned `user_input` envelope
(spec/schema/userhost/personal.schema.json `AgentsSendParams`, `UserInput`; spec/schema/receipts/input.schema.json).

Covered: the exact durable receipt and what it stores (rows, attachment files); idempotence by business
request ID and `request_id_conflict`; the per-submission limits at and one past each boundary; attachment
content that does not match its declared size or digest; sessions that are not the main conversation; the
`user_input` envelope required or refused; the `wuu.client-input-receipts` observer disabled; a client input
ID reused under another request ID; concurrent senders; acknowledgement only once durable.

Every host here runs a silent agent (the module overrides the `space` fixture) so that receipts stay exactly
as admission wrote them: `read_at` null, revision 1.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.host.userhost.personal.conftest import (
    Attach,
    Clock,
    Connect,
    Inputs,
    Space,
    StartSpace,
    attachment,
    call,
    error,
    files_in,
    result,
    send,
    silent,
)
from wuu.generated.models import UserHostErrorCode as Code
from wuu.host.userhost import UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import PLUGIN_ID, PersonalPlugin, personal

MIB = 1024 * 1024
MAX_BYTES = 20 * MIB
"""The most decoded attachment bytes of one submission (20,971,520)."""
MAX_TEXT = 64_000
"""The most UTF-8 bytes of `user_input.text`."""

Stored = tuple[int, int, int, list[Path]]


@pytest.fixture
async def space(start_space: StartSpace) -> Space:
    """The host of this module: Personal with a silent agent (nothing reads the inputs)."""
    return await start_space(agent=silent())


def stored(space: Space) -> Stored:
    """What admission writes: receipt, message and attachment rows, and the files of the space."""
    return (
        space.count("input_receipts"),
        space.count("messages"),
        space.count("attachments"),
        files_in(space.files),
    )


NOTHING: Stored = (0, 0, 0, [])
"""What a refused send leaves in a fresh space."""


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def at(stamp: str) -> datetime:
    """An RFC 3339 timestamp of a receipt, as a moment."""
    return datetime.fromisoformat(stamp)


async def receipts(client: UserHostClient, space: Space, *client_input_ids: str) -> list[dict[str, Any]]:
    found = await call(
        client, "agents.receipts", {"session_id": space.main, "client_input_ids": list(client_input_ids)}
    )
    receipts_found: list[dict[str, Any]] = result(found)["receipts"]
    return receipts_found


# --- a successful send ---------------------------------------------------------------------------------


async def test_a_send_returns_the_exact_receipt_and_stores_row_message_and_files(
    space: Space, client: UserHostClient, clock: Clock
) -> None:
    clock.step = timedelta(0)  # every reading is the same moment: the receipt's times are exact
    contents = [b"second in name order", b"\x00\xff\x10 binary \x89PNG", b""]
    sent = [
        attachment(contents[0], "b-notes.txt"),
        attachment(contents[1], "a photo.png", "image/png"),
        attachment(contents[2], "empty.bin", "application/octet-stream"),
    ]
    text = "Plan the trip to Lisbon ✈ in May"
    envelope = {"client_input_id": "cin-1", "request_id": "req-1", "text": text, "attachments": sent}

    answer = result(await send(client, space.main, envelope))

    receipt = answer["receipt"]
    ids = [item["attachment_id"] for item in receipt["attachments"]]
    assert len(set(ids)) == 3 and all(isinstance(i, str) and i for i in ids)
    assert answer == {
        "receipt": {
            "receipt_id": receipt["receipt_id"],
            "revision": 1,
            "session_id": space.main,
            "plugin_id": PLUGIN_ID,
            "client_input_id": "cin-1",
            "request_id": "req-1",
            "text_sha256": sha(text.encode("utf-8")),
            "attachments": [
                {
                    "attachment_id": ids[index],
                    "filename": item["filename"],
                    "media_type": item["media_type"],
                    "size": len(contents[index]),
                    "sha256": sha(contents[index]),
                }
                for index, item in enumerate(sent)
            ],
            "created_at": receipt["created_at"],
            "accepted": True,
            "accepted_at": receipt["accepted_at"],
            "in_history": True,
            "history_seq": 1,
            "read_at": None,
        },
        "replayed": False,
    }
    assert at(receipt["created_at"]) == at(receipt["accepted_at"]) == clock.now
    assert isinstance(receipt["receipt_id"], str) and receipt["receipt_id"]

    rows = space.rows(
        "SELECT receipt_id, request_id, revision, session_id, plugin_id, client_input_id, text_sha256, "
        "history_seq, read_at FROM input_receipts"
    )
    assert rows == [
        (receipt["receipt_id"], "req-1", 1, space.main, PLUGIN_ID, "cin-1", sha(text.encode()), 1, None)
    ]
    assert space.rows("SELECT session_id, seq, role, kind, text FROM messages") == [
        (space.main, 1, "user", "text", text)
    ]
    files = space.rows(
        "SELECT attachment_id, receipt_id, position, message_seq, filename, media_type, size, sha256, file "
        "FROM attachments ORDER BY position"
    )
    assert [row[:8] for row in files] == [
        (ids[i], receipt["receipt_id"], i, 1, sent[i]["filename"], sent[i]["media_type"], len(c), sha(c))
        for i, c in enumerate(contents)
    ]
    paths = [Path(row[8]) for row in files]
    assert [path.read_bytes() for path in paths] == contents
    assert all(path.resolve().is_relative_to(space.files.resolve()) for path in paths)
    assert files_in(space.files) == sorted(paths)  # nothing else: no staged left-over


async def test_the_receipt_read_back_is_the_receipt_the_send_returned(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    sent = result(await send(client, space.main, inputs("hello", [attachment(b"x")])))
    assert await receipts(client, space, "in-1") == [sent["receipt"]]


# --- idempotence ---------------------------------------------------------------------------------------


async def test_a_retry_with_the_same_request_id_replays_the_receipt_on_any_connection(
    space: Space, connect: Connect
) -> None:
    first_client = await connect()
    envelope = {
        "client_input_id": "cin-1",
        "request_id": "req-1",
        "text": "the same input",
        "attachments": [attachment(b"one", "one.txt"), attachment(b"two", "two.txt")],
    }
    first = result(await send(first_client, space.main, envelope))
    before = stored(space)

    again = result(await send(first_client, space.main, envelope))
    second_client = await connect()
    elsewhere = result(await send(second_client, space.main, envelope))

    assert first["replayed"] is False
    assert again == elsewhere == {"receipt": first["receipt"], "replayed": True}
    assert stored(space) == before == (1, 1, 2, before[3])
    assert len(before[3]) == 2


async def test_a_retry_after_the_first_connection_closed_replays_the_receipt(
    space: Space, connect: Connect, inputs: Inputs
) -> None:
    envelope = inputs("sent before a reconnect", [attachment(b"kept")])
    first_client = await connect()
    first = result(await send(first_client, space.main, envelope))
    await first_client.close()
    before = stored(space)
    later = await connect()
    assert result(await send(later, space.main, envelope)) == {"receipt": first["receipt"], "replayed": True}
    assert stored(space) == before


def _other_text(envelope: dict[str, Any]) -> None:
    envelope["text"] = "the same input!"


def _decomposed_text(envelope: dict[str, Any]) -> None:
    envelope["text"] = "the same input, cafe\u0301"  # the first send says "café" precomposed


def _other_filename(envelope: dict[str, Any]) -> None:
    envelope["attachments"][0]["filename"] = "renamed.txt"


def _other_order(envelope: dict[str, Any]) -> None:
    envelope["attachments"].reverse()


def _other_media_type(envelope: dict[str, Any]) -> None:
    envelope["attachments"][1]["media_type"] = "text/markdown"


def _other_client_input_id(envelope: dict[str, Any]) -> None:
    envelope["client_input_id"] = "cin-other"


def _other_content(envelope: dict[str, Any]) -> None:
    envelope["attachments"][0] = attachment(b"ONE", "one.txt")


def _fewer_attachments(envelope: dict[str, Any]) -> None:
    envelope["attachments"].pop()


@pytest.mark.parametrize(
    "change",
    [
        _other_text,
        _decomposed_text,
        _other_filename,
        _other_order,
        _other_media_type,
        _other_client_input_id,
        _other_content,
        _fewer_attachments,
    ],
)
async def test_the_same_request_id_with_another_input_is_a_conflict_and_writes_nothing(
    space: Space, client: UserHostClient, change: Callable[[dict[str, Any]], None]
) -> None:
    def envelope() -> dict[str, Any]:
        return {
            "client_input_id": "cin-1",
            "request_id": "req-1",
            "text": "the same input, caf\u00e9",
            "attachments": [attachment(b"one", "one.txt"), attachment(b"two", "two.txt")],
        }

    first = result(await send(client, space.main, envelope()))
    before = stored(space)
    changed = envelope()
    change(changed)

    error(await send(client, space.main, changed), Code.REQUEST_ID_CONFLICT)

    assert stored(space) == before
    assert await receipts(client, space, "cin-1", "cin-other") == [first["receipt"]]


async def test_concurrent_duplicates_of_one_request_admit_it_once(space: Space, connect: Connect) -> None:
    """Two connections send the same request at the same moment, five times over: each request is admitted
    once, the other copy replays it, and no staged attachment file is left behind."""
    left, right = await connect(), await connect()
    envelopes = [
        {
            "client_input_id": f"dup-{n}",
            "request_id": f"dup-req-{n}",
            "text": f"duplicate {n}",
            "attachments": [attachment(f"bytes of {n}".encode(), f"{n}.txt")],
        }
        for n in range(5)
    ]
    pairs = await asyncio.gather(
        *(asyncio.gather(send(left, space.main, e), send(right, space.main, e)) for e in envelopes)
    )
    for one, other in pairs:
        answers = sorted([result(one), result(other)], key=lambda a: a["replayed"])
        assert [a["replayed"] for a in answers] == [False, True]
        assert answers[0]["receipt"] == answers[1]["receipt"]
    counts = stored(space)
    assert counts[:3] == (5, 5, 5)
    assert len(counts[3]) == 5


async def test_concurrent_conflicting_sends_admit_one_input_and_leave_no_file(
    space: Space, connect: Connect
) -> None:
    """Sent at the same moment from two connections: the same request ID with two texts, then the same
    client input ID under two request IDs. One of each pair is admitted; the other is refused, and its
    staged attachment file does not stay."""
    left, right = await connect(), await connect()

    def envelope(client_input_id: str, request_id: str, text: str) -> dict[str, Any]:
        content = f"{client_input_id} {request_id} {text}".encode()
        return {
            "client_input_id": client_input_id,
            "request_id": request_id,
            "text": text,
            "attachments": [attachment(content)],
        }

    same_request = await asyncio.gather(
        send(left, space.main, envelope("cin-a", "req-a", "left")),
        send(right, space.main, envelope("cin-a", "req-a", "right")),
    )
    same_input_id = await asyncio.gather(
        send(left, space.main, envelope("cin-b", "req-b1", "left")),
        send(right, space.main, envelope("cin-b", "req-b2", "right")),
    )
    for pair, code, field in [
        (same_request, Code.REQUEST_ID_CONFLICT, None),
        (same_input_id, Code.INVALID_PARAMS, "user_input.client_input_id"),
    ]:
        admitted = [response for response in pair if "result" in response]
        refused = [response for response in pair if "error" in response]
        assert (len(admitted), len(refused)) == (1, 1), pair
        assert result(admitted[0])["replayed"] is False
        error(refused[0], code, field)
    counts = stored(space)
    assert counts[:3] == (2, 2, 2)
    assert sorted(counts[3]) == sorted(Path(f) for (f,) in space.rows("SELECT file FROM attachments"))


@pytest.mark.parametrize(
    "text",
    ["a\x00b", "line\r\nnext\n", "\u2028\u2029", "\ufeffbom", "cafe\u0301", "  padded  ", "\t"],
    ids=["nul", "crlf", "separators", "bom", "combining", "spaces", "tab"],
)
async def test_the_literal_text_is_kept_exactly(
    space: Space, client: UserHostClient, inputs: Inputs, text: str
) -> None:
    receipt = result(await send(client, space.main, inputs(text)))["receipt"]
    assert receipt["text_sha256"] == sha(text.encode("utf-8"))
    assert space.rows("SELECT text FROM messages") == [(text,)]


# --- limits --------------------------------------------------------------------------------------------


async def test_sixteen_attachments_are_accepted(space: Space, client: UserHostClient, inputs: Inputs) -> None:
    sent = [attachment(f"part {n}".encode(), f"part-{n}.txt") for n in range(16)]
    receipt = result(await send(client, space.main, inputs("sixteen", sent)))["receipt"]
    assert [a["filename"] for a in receipt["attachments"]] == [f"part-{n}.txt" for n in range(16)]
    counts = stored(space)
    assert counts[:3] == (1, 1, 16) and len(counts[3]) == 16


async def test_seventeen_attachments_are_refused(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    sent = [attachment(f"part {n}".encode(), f"part-{n}.txt") for n in range(17)]
    error(
        await send(client, space.main, inputs("seventeen", sent)),
        Code.INVALID_PARAMS,
        "user_input.attachments",
    )
    assert stored(space) == NOTHING


async def test_twenty_mib_of_attachments_in_total_are_accepted(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    half = MAX_BYTES // 2
    contents = [b"\x01" * half, b"\x02" * (MAX_BYTES - half)]
    sent = [attachment(contents[0], "first.bin"), attachment(contents[1], "second.bin")]
    receipt = result(await send(client, space.main, inputs("", sent)))["receipt"]
    assert [a["size"] for a in receipt["attachments"]] == [half, MAX_BYTES - half]
    paths = [Path(row[0]) for row in space.rows("SELECT file FROM attachments ORDER BY position")]
    assert [path.read_bytes() == content for path, content in zip(paths, contents, strict=True)] == [
        True,
        True,
    ]


async def test_one_byte_over_twenty_mib_in_total_is_refused(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    third = MAX_BYTES // 3
    sizes = [third, third, MAX_BYTES - 2 * third + 1]
    sent = [attachment(bytes([n]) * size, f"{n}.bin") for n, size in enumerate(sizes)]
    assert sum(a["size"] for a in sent) == MAX_BYTES + 1
    error(await send(client, space.main, inputs("", sent)), Code.INVALID_PARAMS, "user_input.attachments")
    assert stored(space) == NOTHING


@pytest.mark.parametrize(
    "text",
    [
        "😀" * 16_000,  # 4-byte characters: 16,000 of them
        "€" * 21_333 + "a",  # 3-byte characters: 63,999 bytes and one more
        "a" * 63_996 + "😀",
        "x" * MAX_TEXT,
    ],
    ids=["emoji", "euro", "ascii-then-emoji", "ascii"],
)
async def test_text_of_exactly_64000_utf8_bytes_is_accepted(
    space: Space, client: UserHostClient, inputs: Inputs, text: str
) -> None:
    assert len(text.encode("utf-8")) == MAX_TEXT
    receipt = result(await send(client, space.main, inputs(text)))["receipt"]
    assert receipt["text_sha256"] == sha(text.encode("utf-8"))
    assert space.rows("SELECT text FROM messages") == [(text,)]


@pytest.mark.parametrize(
    "text",
    ["😀" * 16_000 + "a", "€" * 21_333 + "ab", "a" * 63_997 + "😀", "x" * (MAX_TEXT + 1)],
    ids=["emoji", "euro", "ascii-then-emoji", "ascii"],
)
async def test_text_of_64001_utf8_bytes_is_refused_even_with_fewer_characters(
    space: Space, client: UserHostClient, inputs: Inputs, text: str
) -> None:
    assert len(text.encode("utf-8")) == MAX_TEXT + 1
    error(await send(client, space.main, inputs(text)), Code.INVALID_PARAMS, "user_input.text")
    assert stored(space) == NOTHING


async def test_empty_text_with_an_attachment_is_accepted(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    receipt = result(await send(client, space.main, inputs("", [attachment(b"just a file")])))["receipt"]
    assert (receipt["text_sha256"], receipt["history_seq"]) == (sha(b""), 1)
    assert space.rows("SELECT role, text FROM messages") == [("user", "")]


@pytest.mark.parametrize("attachments", [None, []], ids=["absent", "empty-list"])
async def test_empty_text_without_attachments_is_refused(
    space: Space, client: UserHostClient, inputs: Inputs, attachments: list[Any] | None
) -> None:
    envelope = inputs("")
    if attachments is not None:
        envelope["attachments"] = attachments
    error(await send(client, space.main, envelope), Code.INVALID_PARAMS, "user_input.text")
    assert stored(space) == NOTHING


# --- attachment content --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    ["!!!!", "c2Vjb25k\n", "c2Vjb2-_", "c2Vjb25", "c2Vj c25k", "c2Vj====", "c2Vj=", "YQ==YQ=="],
    ids=[
        "symbols",
        "newline",
        "urlsafe",
        "no-padding",
        "space",
        "excess-padding",
        "stray-pad",
        "padding-inside",
    ],
)
async def test_attachment_data_that_is_not_standard_base64_is_refused(
    space: Space, client: UserHostClient, inputs: Inputs, data: str
) -> None:
    """The declared size and digest are those of what a lenient decoder would make of `data`, so the only
    fault is the encoding itself: `data` is not the standard padded base64 of any content."""
    try:
        lenient = base64.b64decode(data)
    except binascii.Error:
        lenient = b"second"
    assert base64.b64encode(lenient).decode() != data
    bad = attachment(lenient, "second.txt")
    bad["data"] = data
    response = await send(client, space.main, inputs("two files", [attachment(b"first"), bad]))
    error(response, Code.INVALID_PARAMS, "user_input.attachments.1.data")
    assert stored(space) == NOTHING


async def test_an_attachment_whose_digest_does_not_match_is_refused(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    wrong = attachment(b"second", "second.txt")
    wrong["sha256"] = sha(b"something else")
    response = await send(client, space.main, inputs("two files", [attachment(b"first"), wrong]))
    error(response, Code.INVALID_PARAMS, "user_input.attachments.1.sha256")
    assert stored(space) == NOTHING


@pytest.mark.parametrize("delta", [1, -1])
async def test_an_attachment_whose_size_does_not_match_is_refused(
    space: Space, client: UserHostClient, inputs: Inputs, delta: int
) -> None:
    wrong = attachment(b"second", "second.txt")
    wrong["size"] += delta
    response = await send(client, space.main, inputs("two files", [attachment(b"first"), wrong]))
    error(response, Code.INVALID_PARAMS, "user_input.attachments.1.size")
    assert stored(space) == NOTHING


async def test_a_client_cannot_choose_the_attachment_id(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    chosen = attachment(b"mine")
    chosen["attachment_id"] = "att_chosen_by_client"
    response = await send(client, space.main, inputs("hi", [chosen]))
    error(response, Code.INVALID_PARAMS, "user_input.attachments.0.attachment_id")
    assert stored(space) == NOTHING


# --- the session ---------------------------------------------------------------------------------------


async def test_a_session_that_is_not_the_main_conversation_is_not_found(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    with sqlite3.connect(space.database) as connection:  # another session of this very space
        connection.execute("INSERT INTO sessions VALUES ('ses_task_1', 'task', '2026-03-01T12:00:00Z')")
    error(await send(client, "ses_task_1", inputs("to a task", [attachment(b"x")])), Code.NOT_FOUND)
    assert stored(space) == NOTHING


@pytest.mark.parametrize(
    "session_id",
    ["nope", "ses_main_000000000000000000000000", "main", "x" * 256],
    ids=["word", "main-shaped", "main", "longest"],
)
async def test_an_unknown_session_is_not_found(
    space: Space, client: UserHostClient, inputs: Inputs, session_id: str
) -> None:
    error(await send(client, session_id, inputs("lost", [attachment(b"x")])), Code.NOT_FOUND)
    assert stored(space) == NOTHING


async def test_the_main_conversation_of_another_space_is_not_found(
    start_space: StartSpace, attach: Attach, home: Path, inputs: Inputs
) -> None:
    """The real main session ID of another user space (same home, another space) names nothing here."""
    built: list[PersonalPlugin] = []
    other = await UserHost.start(
        user_space_id="other",
        product_domain="personal",
        home=home,
        composition_profile="personal",
        compose=[personal(agent=silent(), started=built.append)],
    )
    try:
        foreign = await built[0].store.main_session()
    finally:
        await other.close()
    space = await start_space(agent=silent())
    assert foreign != space.main
    client = await attach(space)
    error(await send(client, foreign, inputs("elsewhere", [attachment(b"x")])), Code.NOT_FOUND)
    assert stored(space) == NOTHING


# --- the envelope --------------------------------------------------------------------------------------


async def test_agents_send_without_user_input_is_refused(space: Space, client: UserHostClient) -> None:
    response = await call(client, "agents.send", {"session_id": space.main})
    error(response, Code.INVALID_PARAMS, "user_input")
    assert stored(space) == NOTHING


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("agents.receipts", {"client_input_ids": ["in-1"]}),
        ("agents.history.read", {}),
        ("agents.main_session", None),
    ],
)
async def test_another_method_with_user_input_is_refused(
    space: Space, client: UserHostClient, inputs: Inputs, method: str, params: dict[str, Any] | None
) -> None:
    arguments = {} if params is None else {"session_id": space.main, **params}
    response = await call(client, method, arguments, inputs("not here", [attachment(b"x")]))
    error(response, Code.INVALID_PARAMS, "user_input")
    assert stored(space) == NOTHING


# --- the receipts observer -----------------------------------------------------------------------------


async def test_without_the_receipts_observer_nothing_is_admitted_and_saved_receipts_stay(
    start_space: StartSpace, attach: Attach, inputs: Inputs
) -> None:
    first = await start_space(agent=silent())
    client = await attach(first)
    earlier = inputs("admitted before", [attachment(b"kept bytes")])
    admitted = result(await send(client, first.main, earlier))["receipt"]
    await first.host.close()

    space = await start_space(input_receipts=False)  # the stand-in agent, which would read the input
    assert space.main == first.main
    client = await attach(space)
    before = stored(space)
    error(
        await send(client, space.main, inputs("refused", [attachment(b"new")])),
        Code.INPUT_RECEIPTS_UNAVAILABLE,
    )
    error(await send(client, space.main, earlier), Code.INPUT_RECEIPTS_UNAVAILABLE)  # a retry too
    await space.idle()
    assert stored(space) == before
    # Disabling the observer stops recovery as well: the saved receipt is unchanged, still unread.
    assert await receipts(client, space, "in-1", "in-2") == [admitted]


# --- client input IDs ----------------------------------------------------------------------------------


async def test_a_client_input_id_reused_under_another_request_id_is_refused(
    space: Space, client: UserHostClient
) -> None:
    first = {
        "client_input_id": "cin-1",
        "request_id": "req-1",
        "text": "one",
        "attachments": [attachment(b"a")],
    }
    admitted = result(await send(client, space.main, first))["receipt"]
    before = stored(space)
    reused = {
        "client_input_id": "cin-1",
        "request_id": "req-2",
        "text": "two",
        "attachments": [attachment(b"b")],
    }
    error(await send(client, space.main, reused), Code.INVALID_PARAMS, "user_input.client_input_id")
    assert stored(space) == before  # the second input's staged file is gone too
    assert await receipts(client, space, "cin-1") == [admitted]
    assert space.rows("SELECT request_id FROM input_receipts") == [("req-1",)]


# --- concurrency and durability ------------------------------------------------------------------------


async def test_sixteen_clients_sending_twenty_inputs_each_get_distinct_gapless_receipts(
    space: Space, connect: Connect
) -> None:
    clients = [await connect() for _ in range(16)]

    async def send_all(index: int, client: UserHostClient) -> list[dict[str, Any]]:
        envelopes = [
            {"client_input_id": f"c{index}-{n}", "request_id": f"r{index}-{n}", "text": f"text {index}/{n}"}
            for n in range(20)
        ]
        answers = await asyncio.gather(*(send(client, space.main, e) for e in envelopes))
        return [result(answer) for answer in answers]

    per_client = await asyncio.gather(*(send_all(i, c) for i, c in enumerate(clients)))
    answers = [answer for answers in per_client for answer in answers]

    assert len(answers) == 320 and not any(answer["replayed"] for answer in answers)
    found = [answer["receipt"] for answer in answers]
    assert len({r["receipt_id"] for r in found}) == 320
    assert sorted(r["history_seq"] for r in found) == list(range(1, 321))
    user = dict(space.rows("SELECT seq, text FROM messages WHERE role = 'user'"))
    assert sorted(user) == list(range(1, 321))
    for receipt in found:  # each receipt names the message of its own text
        index, n = receipt["client_input_id"][1:].split("-")
        assert user[receipt["history_seq"]] == f"text {index}/{n}"
        assert receipt["text_sha256"] == sha(f"text {index}/{n}".encode())
    assert space.count("input_receipts") == space.count("messages") == 320


async def test_a_send_is_acknowledged_only_once_its_receipt_is_durable(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    for n in range(1, 6):
        receipt = result(await send(client, space.main, inputs(f"durable {n}", [attachment(b"d" * n)])))[
            "receipt"
        ]
        with sqlite3.connect(space.database) as fresh:  # a connection of the test, opened after the reply
            row = fresh.execute(
                "SELECT receipt_id, client_input_id, history_seq, accepted_at IS NOT NULL FROM input_receipts "
                "WHERE request_id = ?",
                (f"req-{n}",),
            ).fetchone()
            message = fresh.execute("SELECT text FROM messages WHERE seq = ?", (n,)).fetchone()
            (file,) = fresh.execute("SELECT file FROM attachments WHERE receipt_id = ?", (row[0],)).fetchone()
        assert row == (receipt["receipt_id"], f"in-{n}", n, 1)
        assert message == (f"durable {n}",)
        assert Path(file).read_bytes() == b"d" * n
