"""The file tools of the native worker: read_file, write_file, edit_file and list_dir, by their results and
their effects on disk.

Every test runs against each worker of WORKER_COMMANDS (tests/worker/conftest.py).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, MIB, NATIVE_WORKER, code, ok, release_fifo, run_tool, tool_request
from wuu.worker.client import WorkerClient

# --- read_file --------------------------------------------------------------------------------------------


async def test_read_file_returns_the_content_and_its_metadata(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("hello world\n")
    result = ok(await run_tool(worker, "read_file", path="a.txt"))
    assert result["output"] == "hello world\n"
    assert result["is_error"] is False
    assert result["metadata"] == {"size": 12, "offset_bytes": 0, "returned_bytes": 12, "eof": True}


async def test_read_file_honours_offset_bytes_and_max_bytes(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("hello world\n")
    middle = ok(await run_tool(worker, "read_file", path="a.txt", offset_bytes=6, max_bytes=3))
    assert middle["output"] == "wor"
    assert middle["metadata"] == {"size": 12, "offset_bytes": 6, "returned_bytes": 3, "eof": False}
    tail = ok(await run_tool(worker, "read_file", path="a.txt", offset_bytes=6, max_bytes=100))
    assert tail["output"] == "world\n"
    assert tail["metadata"] == {"size": 12, "offset_bytes": 6, "returned_bytes": 6, "eof": True}
    past = ok(await run_tool(worker, "read_file", path="a.txt", offset_bytes=50))
    assert past["output"] == ""
    assert past["metadata"]["returned_bytes"] == 0 and past["metadata"]["eof"] is True


async def test_read_file_of_a_missing_file_is_not_found_and_of_a_directory_invalid_request(
    worker: WorkerClient, root: Path
) -> None:
    (root / "dir").mkdir()
    assert code(await run_tool(worker, "read_file", path="nope.txt")) == "not_found"
    assert code(await run_tool(worker, "read_file", path="dir")) == "invalid_request"


async def test_read_file_reads_at_most_one_mib_by_default_and_replaces_invalid_utf8(
    worker: WorkerClient, root: Path
) -> None:
    (root / "big.txt").write_bytes(b"a" * (MIB + 500))
    (root / "bad.txt").write_bytes(b"ok\xffok")
    big = ok(await run_tool(worker, "read_file", path="big.txt"))
    assert big["metadata"] == {"size": MIB + 500, "offset_bytes": 0, "returned_bytes": MIB, "eof": False}
    assert len(big["output"]) == MIB
    assert ok(await run_tool(worker, "read_file", path="bad.txt"))["output"] == "ok\ufffdok"


# --- write_file -------------------------------------------------------------------------------------------


async def test_write_file_creates_a_file_then_replaces_it(worker: WorkerClient, root: Path) -> None:
    created = ok(await run_tool(worker, "write_file", path="a.txt", content="first version"))
    assert created["is_error"] is False
    assert created["metadata"] == {"bytes_written": 13, "created": True}
    assert (root / "a.txt").read_text() == "first version"
    replaced = ok(await run_tool(worker, "write_file", path="a.txt", content="héllo"))
    assert replaced["metadata"] == {"bytes_written": 6, "created": False}
    assert (root / "a.txt").read_bytes() == "héllo".encode()


async def test_write_file_with_a_missing_parent_is_not_found_unless_create_dirs(
    worker: WorkerClient, root: Path
) -> None:
    assert code(await run_tool(worker, "write_file", path="x/y/z.txt", content="deep")) == "not_found"
    assert not (root / "x").exists()
    result = ok(await run_tool(worker, "write_file", path="x/y/z.txt", content="deep", create_dirs=True))
    assert result["metadata"] == {"bytes_written": 4, "created": True}
    assert (root / "x" / "y" / "z.txt").read_text() == "deep"


# --- edit_file --------------------------------------------------------------------------------------------


async def test_edit_file_replaces_a_unique_occurrence(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("alpha beta gamma")
    result = ok(await run_tool(worker, "edit_file", path="a.txt", old_string="beta", new_string="BETA"))
    assert result["is_error"] is False
    assert result["metadata"] == {"replacements": 1}
    assert (root / "a.txt").read_text() == "alpha BETA gamma"


async def test_edit_file_replace_all_replaces_every_occurrence(worker: WorkerClient, root: Path) -> None:
    (root / "a.txt").write_text("x-x-x")
    result = ok(
        await run_tool(worker, "edit_file", path="a.txt", old_string="x", new_string="yy", replace_all=True)
    )
    assert result["metadata"] == {"replacements": 3}
    assert (root / "a.txt").read_text() == "yy-yy-yy"


@pytest.mark.parametrize(
    ("old_string", "why"), [("delta", "not found"), ("x", "ambiguous")], ids=["not-found", "ambiguous"]
)
async def test_a_failed_edit_is_an_error_result_and_leaves_the_file_unchanged(
    worker: WorkerClient, root: Path, old_string: str, why: str
) -> None:
    original = b"x alpha x beta\n"
    (root / "a.txt").write_bytes(original)
    result = ok(await run_tool(worker, "edit_file", path="a.txt", old_string=old_string, new_string="NEW"))
    assert result["is_error"] is True, why
    assert (root / "a.txt").read_bytes() == original


async def test_edit_file_of_a_missing_file_is_not_found(worker: WorkerClient) -> None:
    assert (
        code(await run_tool(worker, "edit_file", path="nope.txt", old_string="a", new_string="b"))
        == "not_found"
    )


# --- list_dir ---------------------------------------------------------------------------------------------


@pytest.fixture
def tree(root: Path) -> Path:
    """A root with files, a nested directory and hidden entries at two depths."""
    (root / "b.txt").write_text("bb")
    (root / "a.txt").write_text("a")
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "sub" / "inner.txt").write_text("123")
    (root / "sub" / "deeper" / "leaf.txt").write_text("")
    (root / "sub" / ".nested-hidden").write_text("")
    (root / ".hidden").write_text("h")
    (root / ".hdir").mkdir()
    (root / ".hdir" / "in.txt").write_text("")
    return root


async def test_list_dir_lists_direct_entries_sorted_without_hidden_ones(
    worker: WorkerClient, tree: Path
) -> None:
    result = ok(await run_tool(worker, "list_dir", path="."))
    assert result["is_error"] is False
    assert result["metadata"]["entries"] == [
        {"path": "a.txt", "type": "file", "size": 1},
        {"path": "b.txt", "type": "file", "size": 2},
        {"path": "sub", "type": "directory", "size": 0},
    ]
    assert result["output"].splitlines() == ["a.txt", "b.txt", "sub/"]


async def test_list_dir_descends_to_depth(worker: WorkerClient, tree: Path) -> None:
    two = ok(await run_tool(worker, "list_dir", path=".", depth=2))
    assert [entry["path"] for entry in two["metadata"]["entries"]] == [
        "a.txt",
        "b.txt",
        "sub",
        "sub/deeper",
        "sub/inner.txt",
    ]
    assert two["output"].splitlines() == ["a.txt", "b.txt", "sub/", "sub/deeper/", "sub/inner.txt"]
    three = ok(await run_tool(worker, "list_dir", path="sub", depth=3))
    assert three["output"].splitlines() == ["deeper/", "deeper/leaf.txt", "inner.txt"]


async def test_list_dir_include_hidden_lists_dot_entries(worker: WorkerClient, tree: Path) -> None:
    result = ok(await run_tool(worker, "list_dir", path=".", depth=2, include_hidden=True))
    assert result["output"].splitlines() == [
        ".hdir/",
        ".hdir/in.txt",
        ".hidden",
        "a.txt",
        "b.txt",
        "sub/",
        "sub/.nested-hidden",
        "sub/deeper/",
        "sub/inner.txt",
    ]


async def test_list_dir_reports_symlinks_without_following_them(
    worker: WorkerClient, root: Path, outside: Path
) -> None:
    (root / "link").symlink_to(outside)
    result = ok(await run_tool(worker, "list_dir", path=".", depth=3))
    assert [(e["path"], e["type"]) for e in result["metadata"]["entries"]] == [("link", "symlink")]
    assert result["output"] == "link"


async def test_list_dir_of_a_missing_directory_is_not_found(worker: WorkerClient) -> None:
    assert code(await run_tool(worker, "list_dir", path="nope")) == "not_found"


# --- FIFOs and the largest offset (bugs found by these tests, now fixed) ----------------------------------

FIFO_CALLS = {
    "read_file": {"path": "fifo"},
    "write_file": {"path": "fifo", "content": "x"},
    "edit_file": {"path": "fifo", "old_string": "a", "new_string": "b"},
}


@pytest.mark.parametrize("tool", FIFO_CALLS)
async def test_a_file_tool_on_a_fifo_does_not_block_the_connection(
    worker: WorkerClient, worker_command: list[str], root: Path, tool: str
) -> None:
    fifo = root / "fifo"
    os.mkfifo(fifo)
    pending = asyncio.create_task(
        worker.request("execute", tool_request(tool, **FIFO_CALLS[tool]), request_id="fifo-call")
    )
    try:
        # Handlers overlap, and a cancel is answered at once.
        ok(await asyncio.wait_for(worker.request("process/list", {}), 5))
        cancel = ok(await asyncio.wait_for(worker.request("cancel", {"id": "fifo-call"}), 5))
        reply = await asyncio.wait_for(pending, DEADLINE)
        refused = ("error" in reply and code(reply) != "cancelled") or reply.get("data", {}).get(
            "is_error"
        ) is True
        if cancel["cancelled"] and worker_command == NATIVE_WORKER:
            assert code(reply) == "cancelled"
        elif cancel[
            "cancelled"
        ]:  # a delegate answers with its peer's terminal reply, which may be the refusal
            assert code(reply) == "cancelled" or refused, reply
        else:  # refused at once, as not a regular file
            assert refused, reply
    finally:
        release_fifo(fifo)
        pending.cancel()
    assert (await worker.close(budget=5)).clean


async def test_read_file_at_the_largest_offset_reads_nothing_with_eof(
    worker: WorkerClient, root: Path
) -> None:
    (root / "a.txt").write_text("hello")
    result = ok(await run_tool(worker, "read_file", path="a.txt", offset_bytes=2**63 - 1))
    assert result["output"] == ""
    assert result["metadata"] == {"size": 5, "offset_bytes": 2**63 - 1, "returned_bytes": 0, "eof": True}
