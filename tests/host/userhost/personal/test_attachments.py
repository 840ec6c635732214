"""`host.session.attachment.read` of the Personal plugin (spec/schema/userhost/personal.schema.json
`HostSessionAttachmentReadParams`, `HostSessionAttachmentReadResult`, and `UserInput`'s attachment rules) and the
attachment files on disk.

Covered, over the real Unix socket on the real SQLite file:
- a 20 MiB attachment of random bytes reassembled chunk by chunk with the default `max_chars`, the largest
  one and a small one: every chunk decodes on its own, offsets chain through `next_offset`, `total_chars`
  is 4 * ceil(size / 3), `eof` only on the last chunk, `final_sha256` null before it and the digest of the
  reassembled bytes at it, the metadata equal to the history's;
- sizes 0 to 4 bytes (every padding case): exact data and `total_chars`; an offset equal to `total_chars`
  reads empty data with `eof` true;
- invalid_params naming the field: an offset past `total_chars`, an offset or `max_chars` that is not a
  multiple of 4, `max_chars` over 1,048,576 or under 4;
- not_found: an unknown attachment, an attachment read with another (existing) session's ID, an unknown
  session;
- on disk: the bytes are one file `<home>/user-spaces/local/personal/files/attachments/<attachment_id>`,
  mode 0600, with exactly the submitted bytes; no history, search or receipt JSON names its path;
- a second host of the same space cannot start while the first has bytes renamed into place whose receipt
  is not yet committed, so its startup cleanup never removes them: they stay readable once admitted.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import stat
import subprocess
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import DEADLINE
from tests.host.userhost.personal.conftest import (
    Attach,
    Inputs,
    Space,
    StartSpace,
    attachment,
    call,
    error,
    files_in,
    result,
    send,
    serve_command,
    silent,
)
from wuu.generated.models import UserHostErrorCode as Code
from wuu.host.userhost import UserHost
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal.provider import Admission, Submission
from wuu.host.userhost.personal.sqlite.store import SqliteSessionDomain

MIB = 1024 * 1024
BIG = 20 * MIB
DEFAULT_CHARS = 262_144
MOST_CHARS = 1_048_576
RESULT_KEYS = {"attachment", "offset", "data", "next_offset", "total_chars", "eof", "final_sha256"}
METADATA_KEYS = {"attachment_id", "filename", "media_type", "size", "sha256"}

Open = Callable[[], Awaitable[tuple[Space, UserHostClient]]]


@pytest.fixture
async def open_space(start_space: StartSpace, attach: Attach) -> Open:
    """Starts a Personal host whose agent never steps and opens an initialized client of it."""

    async def start() -> tuple[Space, UserHostClient]:
        space = await start_space(agent=silent())
        return space, await attach(space)

    return start


def total_chars(size: int) -> int:
    """4 * ceil(size / 3)."""
    return 4 * -(-size // 3)


async def read_chunk(client: UserHostClient, session_id: str, attachment_id: str, **params: Any) -> Any:
    """The raw response of one `host.session.attachment.read`."""
    return await call(
        client,
        "host.session.attachment.read",
        {"session_id": session_id, "attachment_id": attachment_id, **params},
    )


async def reassemble(
    client: UserHostClient, session_id: str, metadata: dict[str, Any], max_chars: int | None = None
) -> bytes:
    """Read every chunk from offset 0, checking each against the spec's rules; the decoded bytes."""
    limit = {} if max_chars is None else {"max_chars": max_chars}
    most = DEFAULT_CHARS if max_chars is None else max_chars
    total = total_chars(metadata["size"])
    parts: list[bytes] = []
    offset = 0
    while True:
        chunk = result(
            await read_chunk(client, session_id, metadata["attachment_id"], offset=offset, **limit)
        )
        assert set(chunk) == RESULT_KEYS
        assert chunk["attachment"] == metadata
        assert chunk["offset"] == offset
        assert chunk["total_chars"] == total
        data = chunk["data"]
        assert len(data) <= most and len(data) % 4 == 0
        assert chunk["next_offset"] == offset + len(data)
        parts.append(base64.b64decode(data, validate=True))  # every chunk decodes on its own
        assert base64.b64encode(parts[-1]).decode("ascii") == data
        assert chunk["eof"] == (chunk["next_offset"] == total)
        if not chunk["eof"]:
            assert data, "a chunk before the end makes progress"
            assert chunk["final_sha256"] is None
            offset = chunk["next_offset"]
            continue
        content = b"".join(parts)
        assert chunk["final_sha256"] == hashlib.sha256(content).hexdigest() == metadata["sha256"]
        return content


async def history_attachments(client: UserHostClient, session_id: str) -> list[dict[str, Any]]:
    """The attachment metadata of the history's messages, oldest message first, in submitted order."""
    page = result(await call(client, "agents.history.read", {"session_id": session_id, "page_size": 100}))
    return [metadata for message in reversed(page["messages"]) for metadata in message["attachments"]]


async def test_a_20_mib_attachment_reassembles_chunk_by_chunk(open_space: Open, inputs: Inputs) -> None:
    space, client = await open_space()
    content = random.Random(20260301).randbytes(BIG)
    assert len(content) == 20_971_520
    sent = result(
        await send(
            client,
            space.main,
            inputs("the big one", [attachment(content, "blob.bin", "application/octet-stream")]),
        )
    )
    (metadata,) = await history_attachments(client, space.main)
    assert metadata == sent["receipt"]["attachments"][0]
    assert set(metadata) == METADATA_KEYS
    assert (metadata["filename"], metadata["media_type"], metadata["size"], metadata["sha256"]) == (
        "blob.bin",
        "application/octet-stream",
        BIG,
        hashlib.sha256(content).hexdigest(),
    )
    assert total_chars(BIG) == 27_962_028
    assert await reassemble(client, space.main, metadata) == content
    assert await reassemble(client, space.main, metadata, max_chars=MOST_CHARS) == content
    assert await reassemble(client, space.main, metadata, max_chars=65_536) == content
    # A small chunk size over a stretch in the middle, and the last chunks up to the end.
    start = (total_chars(BIG) // 2) // 4 * 4
    for offset in range(start, start + 40 * 12, 12):
        chunk = result(
            await read_chunk(client, space.main, metadata["attachment_id"], offset=offset, max_chars=12)
        )
        first = offset // 4 * 3
        assert base64.b64decode(chunk["data"]) == content[first : first + 9]
        assert (chunk["next_offset"], chunk["eof"], chunk["final_sha256"]) == (offset + 12, False, None)
    tail = total_chars(BIG) - 16
    last = result(await read_chunk(client, space.main, metadata["attachment_id"], offset=tail, max_chars=12))
    assert base64.b64decode(last["data"]) == content[tail // 4 * 3 : tail // 4 * 3 + 9]
    assert (last["next_offset"], last["eof"], last["final_sha256"]) == (tail + 12, False, None)
    end = result(
        await read_chunk(client, space.main, metadata["attachment_id"], offset=tail + 12, max_chars=12)
    )
    # 20,971,520 = 3 * 6,990,506 + 2: the last 4 characters hold 2 bytes and one `=`.
    assert end["data"] == base64.b64encode(content[-2:]).decode("ascii") and end["data"].endswith("=")
    assert (end["next_offset"], end["eof"]) == (total_chars(BIG), True)
    assert end["final_sha256"] == metadata["sha256"]


PADDING_CASES = [b"", b"\xfb", b"\xfb\xff", b"\xfb\xff\xbf", b"\x00\x10\x83\xff"]


async def test_tiny_attachments_read_exactly_with_every_padding(open_space: Open, inputs: Inputs) -> None:
    """Sizes 0 to 4 bytes: exact base64 (with its padding) and `total_chars`; at `total_chars` the data
    is empty and `eof` true."""
    space, client = await open_space()
    files = [
        attachment(content, f"tiny-{len(content)}.bin", "application/octet-stream")
        for content in PADDING_CASES
    ]
    result(await send(client, space.main, inputs("", files)))  # empty text: valid with attachments
    found = await history_attachments(client, space.main)
    assert [metadata["size"] for metadata in found] == [0, 1, 2, 3, 4]
    expected_data = ["", "+w==", "+/8=", "+/+/", "ABCD/w=="]
    for content, metadata, data in zip(PADDING_CASES, found, expected_data, strict=True):
        digest = hashlib.sha256(content).hexdigest()
        total = len(data)
        assert total == total_chars(len(content)) == [0, 4, 4, 4, 8][len(content)]
        whole = result(await read_chunk(client, space.main, metadata["attachment_id"], offset=0))
        assert whole == {
            "attachment": metadata,
            "offset": 0,
            "data": data,
            "next_offset": total,
            "total_chars": total,
            "eof": True,
            "final_sha256": digest,
        }
        at_end = result(await read_chunk(client, space.main, metadata["attachment_id"], offset=total))
        assert at_end == {**whole, "offset": total, "data": ""}
        assert await reassemble(client, space.main, metadata, max_chars=4) == content
    four = found[4]
    first = result(await read_chunk(client, space.main, four["attachment_id"], offset=0, max_chars=4))
    assert (first["data"], first["next_offset"], first["eof"], first["final_sha256"]) == (
        "ABCD",
        4,
        False,
        None,
    )


async def test_offsets_and_chunk_sizes_outside_the_rules_are_invalid(
    open_space: Open, inputs: Inputs
) -> None:
    space, client = await open_space()
    content = bytes(range(256)) * 4  # 1,024 bytes: 1,368 characters
    result(await send(client, space.main, inputs("rules", [attachment(content)])))
    ((metadata),) = await history_attachments(client, space.main)
    attachment_id = metadata["attachment_id"]
    total = total_chars(len(content))
    assert total == 1368
    cases: list[tuple[dict[str, Any], str]] = [
        ({"offset": total + 4}, "params.offset"),  # past the content
        ({"offset": 2**40}, "params.offset"),
        ({"offset": 2}, "params.offset"),  # not a multiple of 4
        ({"offset": total - 1}, "params.offset"),
        ({"offset": -4}, "params.offset"),
        ({"offset": "0"}, "params.offset"),
        ({}, "params.offset"),  # required
        ({"offset": 0, "max_chars": 6}, "params.max_chars"),  # not a multiple of 4
        ({"offset": 0, "max_chars": 1_048_580}, "params.max_chars"),  # over 1,048,576
        ({"offset": 0, "max_chars": 2**31}, "params.max_chars"),
        ({"offset": 0, "max_chars": 0}, "params.max_chars"),
        ({"offset": 0, "max_chars": 4.0}, "params.max_chars"),
    ]
    for params, field in cases:
        error(await read_chunk(client, space.main, attachment_id, **params), Code.INVALID_PARAMS, field)
    for max_chars in (4, MOST_CHARS):
        chunk = result(
            await read_chunk(client, space.main, attachment_id, offset=total - 4, max_chars=max_chars)
        )
        assert (chunk["next_offset"], chunk["eof"]) == (total, True)


async def test_an_attachment_outside_its_session_is_not_found(open_space: Open, inputs: Inputs) -> None:
    space, client = await open_space()
    result(await send(client, space.main, inputs("mine", [attachment(b"private bytes")])))
    ((metadata),) = await history_attachments(client, space.main)
    assert space.plugin.tasks is not None
    task = await space.plugin.tasks.create("task-req-attachments")
    assert task.session_id != space.main
    for session_id, attachment_id in (
        (space.main, "att_000000000000000000000000"),  # unknown attachment
        (space.main, metadata["attachment_id"].upper()),
        (space.main, ".incoming"),
        (space.main, "../personal.sqlite"),
        (task.session_id, metadata["attachment_id"]),  # another session of the space
        ("ses_main_unknown", metadata["attachment_id"]),  # an unknown session
    ):
        error(await read_chunk(client, session_id, attachment_id, offset=0), Code.NOT_FOUND)
    chunk = result(await read_chunk(client, space.main, metadata["attachment_id"], offset=0))
    assert base64.b64decode(chunk["data"]) == b"private bytes"


async def test_the_bytes_are_one_private_file_no_json_names(
    open_space: Open, inputs: Inputs, home: Path
) -> None:
    space, client = await open_space()
    contents = [random.Random(7).randbytes(70_000), b"second file"]
    sent = result(
        await send(
            client,
            space.main,
            inputs(
                "keep these", [attachment(contents[0], "photo.jpg", "image/jpeg"), attachment(contents[1])]
            ),
        )
    )
    folder = home / "user-spaces" / "local" / "personal" / "files" / "attachments"
    assert space.files / "attachments" == folder
    metadata = sent["receipt"]["attachments"]
    paths = [folder / item["attachment_id"] for item in metadata]
    assert files_in(folder) == sorted(paths)
    for path, content in zip(paths, contents, strict=True):
        mode = path.lstat().st_mode
        assert stat.S_ISREG(mode) and stat.S_IMODE(mode) == 0o600
        assert path.read_bytes() == content
    # No JSON a client reads names a path (nor carries the bytes).
    documents = [
        sent,
        result(
            await call(client, "agents.receipts", {"session_id": space.main, "client_input_ids": ["in-1"]})
        ),
        result(await call(client, "agents.history.read", {"session_id": space.main})),
        result(await call(client, "agents.history.search", {"session_id": space.main, "query": "keep"})),
        result(await read_chunk(client, space.main, metadata[1]["attachment_id"], offset=0)),
    ]
    assert await history_attachments(client, space.main) == metadata
    for document in documents:
        wire = json.dumps(document, ensure_ascii=False)
        for path in paths:
            assert str(path) not in wire
        assert str(home) not in wire and "attachments/" not in wire and "files" not in wire
        assert base64.b64encode(contents[0]).decode("ascii")[:64] not in wire


async def test_final_sha256_is_the_digest_of_the_bytes_as_read(open_space: Open, inputs: Inputs) -> None:
    """`final_sha256` is computed from the bytes the host read, not copied from the metadata: bytes changed
    on disk after admission are told apart by the client's check against `attachment.sha256`."""
    space, client = await open_space()
    original = b"original bytes!!"
    sent = result(await send(client, space.main, inputs("tamper", [attachment(original)])))
    (metadata,) = sent["receipt"]["attachments"]
    changed = b"ORIGINAL BYTES!!"
    (space.files / "attachments" / metadata["attachment_id"]).write_bytes(changed)
    chunk = result(await read_chunk(client, space.main, metadata["attachment_id"], offset=0))
    assert base64.b64decode(chunk["data"]) == changed
    assert chunk["eof"] is True and chunk["attachment"] == metadata
    assert chunk["final_sha256"] == hashlib.sha256(changed).hexdigest() != metadata["sha256"]


class HeldAdmission(SqliteSessionDomain):
    """The bundled provider, holding each admission with attachments after its bytes are renamed into place
    and before its receipt is committed, until the test lets it go."""

    staged: asyncio.Event
    go: asyncio.Event

    async def admit(self, submission: Submission, now: datetime) -> Admission:
        if submission.attachments:
            self.staged.set()
            await self.go.wait()
        return await super().admit(submission, now)


async def test_a_second_host_never_cleans_up_bytes_the_first_is_admitting(
    start_space: StartSpace, attach: Attach, inputs: Inputs, run_dir: Path
) -> None:
    held: list[HeldAdmission] = []

    async def provider(host: UserHost, now: datetime) -> HeldAdmission:
        store = await HeldAdmission.open(host.layout.state, host.user_space_id, host.product_domain, now)
        store.staged, store.go = asyncio.Event(), asyncio.Event()
        held.append(store)
        return store

    space = await start_space(agent=silent(), provider=provider)
    client = await attach(space)
    content = b"bytes renamed into place, their receipt not yet committed"
    sending = asyncio.create_task(send(client, space.main, inputs("held", [attachment(content)])))
    await asyncio.wait_for(held[0].staged.wait(), DEADLINE)
    (staged,) = files_in(space.files / "attachments")

    # Another `wuu-userhost serve` on the same home: its startup cleanup would remove the staged bytes (they
    # are named by no receipt yet). Before the fix it started, removed them, served its stdin and exited 0.
    command = [*serve_command(space.home, run_dir / "second.sock")[:-2], "--stdio"]
    second = await asyncio.to_thread(
        subprocess.run, command, input="", capture_output=True, text=True, timeout=DEADLINE
    )
    assert staged.read_bytes() == content, "the second host removed the first's staged bytes"
    assert second.returncode == 2 and "user_host_already_running" in second.stderr, second.stderr

    held[0].go.set()
    receipt = result(await sending)["receipt"]
    assert receipt["accepted"] is True
    (metadata,) = receipt["attachments"]
    assert metadata["attachment_id"] == staged.name
    chunk = result(await read_chunk(client, space.main, metadata["attachment_id"], offset=0))
    assert base64.b64decode(chunk["data"]) == content and chunk["eof"] is True
