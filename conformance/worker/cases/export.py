"""export/*: immutable snapshots read by token and offset, unknown tokens, and the 256 MiB limit."""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from wuu.generated.catalog import WORKER_MAX_EXPORT_BYTES

from ...outcomes import CaseFailed
from ..session import Session, code_of
from ..suite import WORKER

CONTENT = "".join(f"line {n:04d}: the quick brown fox\n" for n in range(200))  # 6,200 bytes


async def begin(s: Session) -> None:
    """Initialize and skip unless the adapter serves the export methods."""
    await s.initialize()
    for method in ("export/open", "export/read", "export/close"):
        s.require_method(method)


async def write(s: Session, path: str, content: str) -> None:
    """Write a workspace file with write_file (skip when the adapter has no write_file)."""
    reply = await s.execute("write_file", path=path, content=content)
    if code_of(reply) == "unsupported_tool":
        s.skip("the adapter does not provide write_file, which makes the file to export")
    s.expect("data" in reply and not reply["data"]["is_error"], f"write_file {path} failed: {reply}")


def decoded(result: dict[str, Any]) -> bytes:
    text = result["data"]
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CaseFailed(f"export/read data is not valid base64: {text[:80]!r}") from None
    if base64.b64encode(data).decode("ascii") != text:
        raise CaseFailed(f"export/read data is not standard padded base64: {text[:80]!r}")
    return data


async def read_all(s: Session, token: str, size: int, chunk: int) -> bytes:
    """The snapshot read in `chunk`-byte pieces, checking eof on each."""
    parts: list[bytes] = []
    offset = 0
    while True:
        result = await s.ok("export/read", {"token": token, "offset": offset, "max_bytes": chunk})
        data = decoded(result)
        s.expect(
            0 < len(data) <= chunk or offset >= size,
            f"export/read at {offset} with max_bytes {chunk} answers {len(data)} bytes of a {size}-byte snapshot",
        )
        parts.append(data)
        offset += len(data)
        s.expect(
            result["eof"] == (offset >= size),
            f"export/read ending at {offset} of {size} bytes answers eof {result['eof']}",
        )
        if result["eof"]:
            return b"".join(parts)


@WORKER.case("export.snapshot")
async def snapshot(s: Session) -> None:
    """export/open answers size and sha256; chunked export/read reassembles the file, ending with eof.

    A read at the size answers no bytes with eof; export/close answers {}.
    """
    await begin(s)
    await write(s, "artifact.txt", CONTENT)
    expected = CONTENT.encode()
    opened = await s.ok("export/open", {"path": "artifact.txt"})
    s.expect(
        opened["size"] == len(expected), f"export/open answers size {opened['size']}, not {len(expected)}"
    )
    s.expect(
        opened["sha256"] == hashlib.sha256(expected).hexdigest(),
        f"export/open answers sha256 {opened['sha256']}, not the file's",
    )
    token = opened["token"]
    s.expect(
        await read_all(s, token, len(expected), 1000) == expected, "the 1000-byte chunks differ from the file"
    )
    whole = await s.ok("export/read", {"token": token, "offset": 0})
    s.expect(decoded(whole) == expected and whole["eof"], "a default export/read differs from the whole file")
    for offset in (len(expected), len(expected) + 100):
        past = await s.ok("export/read", {"token": token, "offset": offset})
        s.expect(
            decoded(past) == b"" and past["eof"],
            f"export/read at {offset} of a {len(expected)}-byte snapshot answers {past}",
        )
    closed = await s.ok("export/close", {"token": token})
    s.expect(closed == {}, f"export/close answers {closed}, not {{}}")

    await write(s, "empty.txt", "")
    empty = await s.ok("export/open", {"path": "empty.txt"})
    s.expect(
        empty["size"] == 0 and empty["sha256"] == hashlib.sha256(b"").hexdigest(),
        f"the snapshot of an empty file is {empty}",
    )
    result = await s.ok("export/read", {"token": empty["token"], "offset": 0})
    s.expect(decoded(result) == b"" and result["eof"], f"reading an empty snapshot answers {result}")


@WORKER.case("export.immutable")
async def immutable(s: Session) -> None:
    """A snapshot keeps the bytes of export/open time after the file is rewritten; a new open sees the change."""
    await begin(s)
    await write(s, "artifact.txt", CONTENT)
    opened = await s.ok("export/open", {"path": "artifact.txt"})
    changed = CONTENT.replace("fox", "cat") + "more\n"
    await write(s, "artifact.txt", changed)
    s.expect(
        await read_all(s, opened["token"], len(CONTENT), 4096) == CONTENT.encode(),
        "the snapshot changed when the file was rewritten after export/open",
    )
    again = await s.ok("export/open", {"path": "artifact.txt"})
    s.expect(again["token"] != opened["token"], "a second export/open reuses the first snapshot's token")
    s.expect(
        again["size"] == len(changed) and again["sha256"] == hashlib.sha256(changed.encode()).hexdigest(),
        f"a snapshot opened after the change answers {again}",
    )
    s.expect(
        await read_all(s, again["token"], len(changed), 65536) == changed.encode(),
        "the new snapshot does not hold the changed file",
    )
    s.expect(
        await read_all(s, opened["token"], len(CONTENT), 65536) == CONTENT.encode(),
        "the first snapshot changed when a second one was opened",
    )


@WORKER.case("export.unknown-token")
async def unknown_token(s: Session) -> None:
    """export/read and export/close of an unknown or closed token get not_found; a missing file too."""
    await begin(s)
    await s.error("export/read", {"token": "no-such-token", "offset": 0}, "not_found")
    await s.error("export/close", {"token": "no-such-token"}, "not_found")
    await s.error("export/open", {"path": "no-such-file.txt"}, "not_found")
    await write(s, "artifact.txt", CONTENT)
    opened = await s.ok("export/open", {"path": "artifact.txt"})
    other = await s.ok("export/open", {"path": "artifact.txt"})
    await s.ok("export/close", {"token": opened["token"]})
    await s.error("export/read", {"token": opened["token"], "offset": 0}, "not_found")
    await s.error("export/close", {"token": opened["token"]}, "not_found")
    kept = await s.ok("export/read", {"token": other["token"], "offset": 0, "max_bytes": 10})
    s.expect(decoded(kept) == CONTENT.encode()[:10], "closing one snapshot broke another of the same file")


@WORKER.case("export.too-large")
async def too_large(s: Session) -> None:
    """A (sparse) file of 256 MiB + 1 byte gets artifact_too_large from export/open."""
    await begin(s)
    mode = await s.command_mode()
    size = WORKER_MAX_EXPORT_BYTES + 1
    made = False
    for argv in (
        ["truncate", "-s", str(size), "big.bin"],
        ["dd", "if=/dev/zero", "of=big.bin", "bs=1", "count=0", f"seek={size}"],
    ):
        reply = await s.execute("exec_command", mode, argv=argv)
        if "data" in reply and not reply["data"]["is_error"]:
            made = True
            break
    if not made:
        s.skip("neither truncate nor dd could make a sparse 256 MiB + 1 byte file in the workspace")
    await s.error("export/open", {"path": "big.bin"}, "artifact_too_large")
