"""execute and the core workspace tools: arguments, results and metadata, commands, their sandbox and environment."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Collection
from typing import Any

from wuu.generated import validators
from wuu.generated.catalog import WORKER_TOOLS

from ...outcomes import CaseSkipped
from ..session import PRIVATE_VARIABLE, Session, code_of
from ..suite import WORKER

# Large enough to read any file these cases write in one call.
WHOLE = 8 * 1024 * 1024


# --- helpers (paths.py uses them too) ---------------------------------------------------------------------


def shown(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def answer(reply: dict[str, Any]) -> str:
    """A reply in a failure message: its error, or its result."""
    return str(reply.get("error") or f"success {json.dumps(reply.get('data'), ensure_ascii=False)[:400]}")


async def run(s: Session, tool: str, mode: str = "standard", **arguments: Any) -> dict[str, Any]:
    """The checked reply to one `execute`; skips the case when the adapter does not provide `tool`."""
    reply = await s.execute(tool, mode, **arguments)
    if code_of(reply) == "unsupported_tool":
        s.skip(f"the adapter does not provide {tool}")
    return reply


def tool_result(s: Session, tool: str, mode: str, arguments: dict[str, Any], reply: dict[str, Any]) -> Any:
    """The ToolResult of a reply that must be a success, its metadata checked against the tool's schema."""
    s.expect("data" in reply, f"{tool} {shown(arguments)} in {mode} failed: {reply.get('error')}")
    data: dict[str, Any] = reply["data"]
    metadata = data.get("metadata")
    spec = WORKER_TOOLS.get(tool)
    if spec is not None and spec.metadata is not None and not (data["is_error"] and tool != "exec_command"):
        s.expect(metadata is not None, f"{tool} {shown(arguments)} in {mode} answered no metadata")
        problems = validators.errors(spec.metadata.__name__, metadata)
        s.expect(
            not problems,
            f"the metadata of {tool} {shown(arguments)} does not follow {spec.metadata.__name__}: "
            + (problems[0].message if problems else ""),
        )
    return data


def defined(tool: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The keys of a `tool` result's metadata that the tool's schema defines: its extension keys, which the
    spec allows and a host ignores, left out."""
    known = {field.alias or name for name, field in WORKER_TOOLS[tool].metadata.model_fields.items()}
    return {key: value for key, value in metadata.items() if key in known}


async def result(s: Session, tool: str, mode: str = "standard", **arguments: Any) -> dict[str, Any]:
    """The ToolResult of a call that must succeed: no error reply and `is_error: false`."""
    data: dict[str, Any] = tool_result(s, tool, mode, arguments, await run(s, tool, mode, **arguments))
    s.expect(
        data["is_error"] is False,
        f"{tool} {shown(arguments)} in {mode} is an error result: {data['output']!r}",
    )
    return data


async def failed(s: Session, tool: str, mode: str = "standard", **arguments: Any) -> dict[str, Any]:
    """The ToolResult of a call that must run and fail: a result with `is_error: true`."""
    data: dict[str, Any] = tool_result(s, tool, mode, arguments, await run(s, tool, mode, **arguments))
    s.expect(
        data["is_error"] is True,
        f"{tool} {shown(arguments)} in {mode} must be an error result (is_error: true); it answered {data}",
    )
    return data


def expect_code(s: Session, reply: dict[str, Any], codes: Collection[str], what: str) -> None:
    """Fail unless `reply` is an error with one of `codes`: the codes the spec assigns to the rules that the
    request breaks, any of which it may get (spec/README.md, "One code where several rules apply")."""
    s.expect(
        code_of(reply) in codes,
        f"{what} must fail with {' or '.join(sorted(codes))}; it answered {answer(reply)}",
    )


async def refused(s: Session, code: str, tool: str, mode: str = "standard", **arguments: Any) -> None:
    """A call that must get the error `code`."""
    reply = await run(s, tool, mode, **arguments)
    s.expect(
        code_of(reply) == code,
        f"{tool} {shown(arguments)} in {mode} must fail with {code}; it answered {answer(reply)}",
    )


async def put(s: Session, path: str, content: str, mode: str = "standard") -> None:
    """Write a file through the wire (creating its parents); fail the case unless it works."""
    await result(s, "write_file", mode, path=path, content=content, create_dirs=True)


async def contents(s: Session, path: str, mode: str = "standard") -> str:
    """A file's whole content, read through the wire."""
    data = await result(s, "read_file", mode, path=path, max_bytes=WHOLE)
    s.expect(data["metadata"]["eof"] is True, f"reading all of {path} did not reach eof: {data['metadata']}")
    output: str = data["output"]
    return output


async def expect_contents(s: Session, path: str, expected: str, why: str, mode: str = "standard") -> None:
    actual = await contents(s, path, mode)
    s.expect(actual == expected, f"{path} holds {actual!r} {why}; it must hold {expected!r}")


async def expect_missing(s: Session, path: str, why: str, mode: str = "standard") -> None:
    """`path` does not exist: read_file answers not_found."""
    reply = await run(s, "read_file", mode, path=path)
    s.expect(code_of(reply) == "not_found", f"{path} exists {why}: read_file answered {answer(reply)}")


async def local_root(s: Session) -> bool:
    """Whether the adapter's root is this machine's `s.root`: a file made here reads back through the wire."""
    if not s.root.is_dir():
        return False
    probe = s.root / f".wuu-conformance-probe-{uuid.uuid4().hex}"
    token = uuid.uuid4().hex
    probe.write_text(token, encoding="utf-8")
    try:
        reply = await s.execute("read_file", path=probe.name)
    finally:
        probe.unlink(missing_ok=True)
    return "data" in reply and reply["data"]["output"] == token


async def runs_commands(s: Session) -> str | None:
    """The mode in which this adapter runs commands (Session.command_mode), or None without exec_command."""
    try:
        return await s.command_mode()
    except CaseSkipped:
        return None


async def make_symlink(s: Session, link: str, target: str, local: bool) -> bool:
    """Create the symlink `link` (relative to the root) to `target`: here when the root is local, else with
    `ln -s` through exec_command. False when neither is possible."""
    if local:
        os.symlink(target, s.root / link)
        return True
    mode = await runs_commands(s)
    if mode is None:
        return False
    reply = await s.execute("exec_command", mode, argv=["ln", "-s", target, link])
    s.expect(
        "data" in reply and reply["data"]["is_error"] is False,
        f"setting up the symlink {link} -> {target} with ln -s failed: {answer(reply)}",
    )
    return True


def env_lines(output: str) -> dict[str, str]:
    """The variables that `env` printed."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        name, sep, value = line.partition("=")
        if sep and name:
            found[name] = value
    return found


# --- execute ------------------------------------------------------------------------------------------------


@WORKER.case("execute.unsupported-tool")
async def unsupported_tool(s: Session) -> None:
    """A tool name the adapter does not provide gets unsupported_tool, in every permission mode."""
    await s.initialize()
    for mode in ("standard", "read_only", "unconfined"):
        for tool in ("no_such_tool", "read_file_v9", "process_start"):
            reply = await s.execute(tool, mode, path="a.txt")
            s.expect(
                code_of(reply) == "unsupported_tool",
                f"execute of the unknown tool {tool} in {mode} must fail with unsupported_tool; "
                f"it answered {answer(reply)}",
            )
    # A name outside the tool-name pattern breaks the request schema, and it names no tool the adapter
    # provides: two rules, and the code of either is the spec's.
    reply = await s.request("execute", s.tool("Read-File", {"path": "a.txt"}))
    expect_code(
        s, reply, {"invalid_request", "unsupported_tool"}, "execute of Read-File (outside the pattern)"
    )


# Each breaks the tool's arguments schema and nothing else: the paths name files that exist (e.txt is written
# first) or that a write creates, so that no other rule (a missing file's not_found) applies as well, and
# exec_command goes in `unconfined`, so that an adapter without a sandbox (sandbox_unavailable) breaks none.
INVALID_ARGUMENTS: list[tuple[str, str, str]] = [
    # (tool, encoded arguments, what is wrong)
    ("read_file", "", "empty text"),
    ("read_file", "not json", "not JSON"),
    ("read_file", '{"path": "e.txt"} trailing', "JSON followed by garbage"),
    ("read_file", '["a.txt"]', "a JSON array"),
    ("read_file", '"a.txt"', "a JSON string"),
    ("read_file", "null", "JSON null"),
    ("read_file", "42", "a JSON number"),
    ("read_file", "{}", "no path"),
    ("read_file", '{"path": 5}', "a number as path"),
    ("read_file", '{"path": ""}', "an empty path"),
    ("read_file", '{"path": "e.txt", "colour": "blue"}', "an unknown field"),
    ("read_file", '{"path": "e.txt", "max_bytes": 0}', "max_bytes below 1"),
    ("read_file", '{"path": "e.txt", "max_bytes": 8388609}', "max_bytes above 8 MiB"),
    ("read_file", '{"path": "e.txt", "max_bytes": "10"}', "max_bytes as a string"),
    ("read_file", '{"path": "e.txt", "max_bytes": true}', "max_bytes as a boolean"),
    ("read_file", '{"path": "e.txt", "offset_bytes": -1}', "a negative offset"),
    ("read_file", '{"path": "e.txt", "offset_bytes": 1.5}', "a fractional offset"),
    ("read_file", '{"path": "e.txt", "max_bytes": 10.0}', "an integer written with a fraction"),
    ("read_file", '{"path": "e.txt", "max_bytes": 1e3}', "an integer written with an exponent"),
    ("write_file", '{"path": "w.txt"}', "no content"),
    ("write_file", '{"content": "x"}', "no path"),
    ("write_file", '{"path": "w.txt", "content": 7}', "a number as content"),
    ("write_file", '{"path": "w.txt", "content": "x", "create_dirs": "yes"}', "create_dirs as a string"),
    ("write_file", '{"path": "w.txt", "content": "x", "mode": "0600"}', "an unknown field"),
    ("edit_file", '{"path": "e.txt", "old_string": "", "new_string": "x"}', "an empty old_string"),
    ("edit_file", '{"path": "e.txt", "old_string": "a"}', "no new_string"),
    (
        "edit_file",
        '{"path": "e.txt", "old_string": "a", "new_string": "b", "replace_all": 1}',
        "a number flag",
    ),
    ("list_dir", '{"path": ".", "depth": 0}', "depth 0"),
    ("list_dir", '{"path": ".", "depth": 65}', "depth above 64"),
    ("list_dir", '{"path": ".", "include_hidden": "true"}', "include_hidden as a string"),
    ("list_dir", '{"depth": 1}', "no path"),
    ("exec_command", '{"argv": []}', "an empty argv"),
    ("exec_command", '{"argv": "true"}', "argv as a string"),
    ("exec_command", '{"argv": ["true", 1]}', "a number in argv"),
    ("exec_command", '{"argv": ["true"], "env": {"1BAD": "x"}}', "an env name outside the pattern"),
    ("exec_command", '{"argv": ["true"], "env": {"A": 1}}', "an env value that is not a string"),
    ("exec_command", '{"argv": ["true"], "timeout_ms": 0}', "timeout_ms 0"),
    ("exec_command", '{"argv": ["true"], "timeout_ms": 1000.0}', "timeout_ms written with a fraction"),
    ("exec_command", '{"argv": ["true"], "cwd": ""}', "an empty cwd"),
    ("exec_command", '{"argv": ["tr\\u0000ue"]}', "a NUL byte in argv"),
    ("exec_command", '{"argv": ["true"], "cwd": "a\\u0000b"}', "a NUL byte in cwd"),
    ("exec_command", '{"argv": ["true"], "env": {"A": "x\\u0000y"}}', "a NUL byte in an env value"),
    ("exec_command", '{"argv": ["true"], "shell": true}', "an unknown field"),
]


@WORKER.case("execute.invalid-arguments")
async def invalid_arguments(s: Session) -> None:
    """Arguments that are not a JSON object, or that break the tool's schema, get invalid_request, with no effect."""
    await s.initialize()
    written = "data" in await s.execute("write_file", path="e.txt", content="a")
    # Without write_file there is no e.txt: the reads and edits of it then break a second rule.
    codes = {"invalid_request"} if written else {"invalid_request", "not_found"}
    provided: set[str] = set()
    for tool, encoded, what in INVALID_ARGUMENTS:
        mode = "unconfined" if tool == "exec_command" else "standard"
        reply = await s.request("execute", s.tool(tool, encoded, mode))
        if code_of(reply) == "unsupported_tool":
            continue
        provided.add(tool)
        expect_code(
            s,
            reply,
            codes if '"e.txt"' in encoded else {"invalid_request"},
            f"{tool} with {what} ({encoded!r})",
        )
    if not provided:
        s.skip("the adapter provides none of the core tools")
    if "write_file" in provided and "read_file" in provided:
        await expect_missing(s, "w.txt", "after write_file calls with invalid arguments")
        await expect_contents(s, "e.txt", "a", "after edit_file calls with invalid arguments")


# --- the file tools ----------------------------------------------------------------------------------------


def read_meta(s: Session, data: dict[str, Any], what: str, **expected: Any) -> None:
    metadata = data["metadata"]
    for key, value in expected.items():
        s.expect(metadata[key] == value, f"{what}: metadata {key} is {metadata[key]!r}, not {value!r}")


@WORKER.case("tools.read-file")
async def read_file(s: Session) -> None:
    """read_file returns the byte range asked for, with exact size, offset, returned_bytes and eof."""
    await s.initialize()
    await put(s, "hello.txt", "hello\nworld\n")  # 12 bytes
    await put(s, "empty.txt", "")
    await put(s, "utf8.txt", "aé")  # b"a\xc3\xa9"
    cases: list[tuple[dict[str, Any], str, dict[str, Any]]] = [
        ({}, "hello\nworld\n", {"offset_bytes": 0, "returned_bytes": 12, "eof": True}),
        ({"offset_bytes": 6, "max_bytes": 3}, "wor", {"offset_bytes": 6, "returned_bytes": 3, "eof": False}),
        ({"max_bytes": 5}, "hello", {"offset_bytes": 0, "returned_bytes": 5, "eof": False}),
        ({"offset_bytes": 6}, "world\n", {"offset_bytes": 6, "returned_bytes": 6, "eof": True}),
        ({"max_bytes": 12}, "hello\nworld\n", {"offset_bytes": 0, "returned_bytes": 12, "eof": True}),
        ({"offset_bytes": 11, "max_bytes": 1}, "\n", {"offset_bytes": 11, "returned_bytes": 1, "eof": True}),
        ({"offset_bytes": 12}, "", {"offset_bytes": 12, "returned_bytes": 0, "eof": True}),
        ({"offset_bytes": 100}, "", {"offset_bytes": 100, "returned_bytes": 0, "eof": True}),
    ]
    for arguments, output, expected in cases:
        data = await result(s, "read_file", path="hello.txt", **arguments)
        what = f"read_file {shown({'path': 'hello.txt', **arguments})}"
        s.expect(data["output"] == output, f"{what} returned {data['output']!r}, not {output!r}")
        read_meta(s, data, what, size=12, **expected)
    data = await result(s, "read_file", path="empty.txt")
    s.expect(data["output"] == "", f"the empty file read as {data['output']!r}")
    read_meta(s, data, "read_file of an empty file", size=0, offset_bytes=0, returned_bytes=0, eof=True)
    data = await result(s, "read_file", path="utf8.txt")
    s.expect(data["output"] == "aé", f"a UTF-8 file read as {data['output']!r}")
    read_meta(s, data, "read_file of a UTF-8 file", size=3, returned_bytes=3, eof=True)
    # A range that splits a character: the bytes are returned, the broken sequence replaced.
    data = await result(s, "read_file", path="utf8.txt", max_bytes=2)
    s.expect(data["output"] == "a\ufffd", f"the bytes b'a\\xc3' read as {data['output']!r}, not 'a\\ufffd'")
    read_meta(s, data, "read_file of a split character", size=3, returned_bytes=2, eof=False)
    # Through a nested path and an absolute one inside the root.
    await put(s, "sub/inner.txt", "inner")
    await expect_contents(s, "sub/inner.txt", "inner", "read through a nested path")
    await expect_contents(s, "./sub/../sub/inner.txt", "inner", "read through `.` and `..` inside the root")
    await expect_contents(s, str(s.root / "sub" / "inner.txt"), "inner", "read through its absolute path")
    # A directory is not a file.
    await refused(s, "invalid_request", "read_file", path="sub")


@WORKER.case("tools.write-file")
async def write_file(s: Session) -> None:
    """write_file replaces the whole content, reports bytes_written and created, and creates parents only on request."""
    await s.initialize()
    data = await result(s, "write_file", path="a.txt", content="héllo\n")
    s.expect(
        defined("write_file", data["metadata"]) == {"bytes_written": 7, "created": True},
        f"a new file: metadata {data['metadata']}",
    )
    await expect_contents(s, "a.txt", "héllo\n", "after write_file")
    data = await result(s, "write_file", path="a.txt", content="x")
    s.expect(
        defined("write_file", data["metadata"]) == {"bytes_written": 1, "created": False},
        f"a rewrite: metadata {data['metadata']}",
    )
    await expect_contents(s, "a.txt", "x", "after a shorter write_file replaced its content")
    size = (await result(s, "read_file", path="a.txt"))["metadata"]["size"]
    s.expect(size == 1, f"after writing 1 byte the file has {size} bytes")
    data = await result(s, "write_file", path="a.txt", content="")
    s.expect(
        defined("write_file", data["metadata"]) == {"bytes_written": 0, "created": False},
        f"an empty write: metadata {data['metadata']}",
    )
    await expect_contents(s, "a.txt", "", "after writing empty content")
    data = await result(s, "write_file", path="empty-new.txt", content="")
    s.expect(
        defined("write_file", data["metadata"]) == {"bytes_written": 0, "created": True},
        f"a new empty file: metadata {data['metadata']}",
    )
    await expect_contents(s, "empty-new.txt", "", "after creating it empty")
    # A missing parent: not_found, and nothing is created, unless create_dirs.
    await refused(s, "not_found", "write_file", path="d/e/f.txt", content="deep")
    await refused(s, "not_found", "write_file", path="d/e/f.txt", content="deep", create_dirs=False)
    await expect_missing(s, "d/e/f.txt", "after write_file without create_dirs was refused")
    listing = await s.execute("list_dir", path="d")
    if code_of(listing) != "unsupported_tool":
        s.expect(
            code_of(listing) == "not_found", f"a refused write_file created its parent d: {answer(listing)}"
        )
    data = await result(s, "write_file", path="d/e/f.txt", content="deep", create_dirs=True)
    s.expect(
        defined("write_file", data["metadata"]) == {"bytes_written": 4, "created": True},
        f"with create_dirs: metadata {data['metadata']}",
    )
    await expect_contents(s, "d/e/f.txt", "deep", "after write_file with create_dirs")
    # create_dirs with parents that exist already is an ordinary write.
    data = await result(s, "write_file", path="d/e/f.txt", content="again", create_dirs=True)
    s.expect(
        defined("write_file", data["metadata"]) == {"bytes_written": 5, "created": False},
        f"a rewrite: metadata {data['metadata']}",
    )
    await expect_contents(s, "d/e/f.txt", "again", "after it was rewritten")


@WORKER.case("tools.edit-file")
async def edit_file(s: Session) -> None:
    """edit_file replaces one unique occurrence (or all with replace_all); missing or ambiguous text is an error
    result that leaves the file unchanged."""
    await s.initialize()
    await put(s, "e.txt", "one two two three\n")
    data = await result(s, "edit_file", path="e.txt", old_string="one", new_string="1")
    s.expect(
        defined("edit_file", data["metadata"]) == {"replacements": 1},
        f"a unique edit: metadata {data['metadata']}",
    )
    await expect_contents(s, "e.txt", "1 two two three\n", "after replacing `one`")
    await failed(s, "edit_file", path="e.txt", old_string="two", new_string="2")
    await expect_contents(s, "e.txt", "1 two two three\n", "after an ambiguous edit was refused")
    await failed(s, "edit_file", path="e.txt", old_string="two", new_string="2", replace_all=False)
    await expect_contents(s, "e.txt", "1 two two three\n", "after an ambiguous edit was refused")
    await failed(s, "edit_file", path="e.txt", old_string="four", new_string="4")
    await expect_contents(s, "e.txt", "1 two two three\n", "after an edit of missing text")
    await failed(s, "edit_file", path="e.txt", old_string="TWO", new_string="2")
    await expect_contents(s, "e.txt", "1 two two three\n", "after an edit whose text differs in case")
    data = await result(s, "edit_file", path="e.txt", old_string="two", new_string="2", replace_all=True)
    s.expect(
        defined("edit_file", data["metadata"]) == {"replacements": 2},
        f"replace_all of 2 occurrences: metadata {data['metadata']}",
    )
    await expect_contents(s, "e.txt", "1 2 2 three\n", "after replace_all")
    data = await result(s, "edit_file", path="e.txt", old_string="three", new_string="3", replace_all=True)
    s.expect(
        defined("edit_file", data["metadata"]) == {"replacements": 1},
        f"replace_all of 1 occurrence: metadata {data['metadata']}",
    )
    data = await result(s, "edit_file", path="e.txt", old_string=" 2 2", new_string="")
    s.expect(
        defined("edit_file", data["metadata"]) == {"replacements": 1},
        f"a deletion: metadata {data['metadata']}",
    )
    await expect_contents(s, "e.txt", "1 3\n", "after deleting text")
    # Multi-line and non-ASCII text is matched exactly.
    await put(s, "m.txt", "ä\nö\nü\n")
    await result(s, "edit_file", path="m.txt", old_string="ö\nü", new_string="ß")
    await expect_contents(s, "m.txt", "ä\nß\n", "after a multi-line edit")


@WORKER.case("tools.list-dir")
async def list_dir(s: Session) -> None:
    """list_dir lists entries sorted by path, with type and size, to the given depth, dot-files only on request;
    the output lists the same paths, directories ending in `/`."""
    await s.initialize()
    for path, content in [
        ("a.txt", "aaa"),
        ("b/c.txt", "ccccc"),
        ("b/d/e.txt", "e"),
        ("b/.h2", "hh"),
        (".hidden", "h"),
        (".hdir/x.txt", "xx"),
        ("z/y.txt", ""),
    ]:
        await put(s, path, content)
    f, d = "file", "directory"
    expected: list[tuple[dict[str, Any], list[tuple[str, str, int]]]] = [
        ({"path": "."}, [("a.txt", f, 3), ("b", d, 0), ("z", d, 0)]),
        ({"path": ".", "depth": 1}, [("a.txt", f, 3), ("b", d, 0), ("z", d, 0)]),
        ({"path": str(s.root)}, [("a.txt", f, 3), ("b", d, 0), ("z", d, 0)]),
        (
            {"path": ".", "depth": 2},
            [("a.txt", f, 3), ("b", d, 0), ("b/c.txt", f, 5), ("b/d", d, 0), ("z", d, 0), ("z/y.txt", f, 0)],
        ),
        (
            {"path": ".", "depth": 64},
            [
                ("a.txt", f, 3),
                ("b", d, 0),
                ("b/c.txt", f, 5),
                ("b/d", d, 0),
                ("b/d/e.txt", f, 1),
                ("z", d, 0),
                ("z/y.txt", f, 0),
            ],
        ),
        (
            {"path": ".", "include_hidden": True},
            [(".hdir", d, 0), (".hidden", f, 1), ("a.txt", f, 3), ("b", d, 0), ("z", d, 0)],
        ),
        (
            {"path": ".", "depth": 2, "include_hidden": True},
            [
                (".hdir", d, 0),
                (".hdir/x.txt", f, 2),
                (".hidden", f, 1),
                ("a.txt", f, 3),
                ("b", d, 0),
                ("b/.h2", f, 2),
                ("b/c.txt", f, 5),
                ("b/d", d, 0),
                ("z", d, 0),
                ("z/y.txt", f, 0),
            ],
        ),
        ({"path": "b"}, [("c.txt", f, 5), ("d", d, 0)]),
        ({"path": "b/", "depth": 2}, [("c.txt", f, 5), ("d", d, 0), ("d/e.txt", f, 1)]),
        ({"path": "b/d"}, [("e.txt", f, 1)]),
        ({"path": ".hdir"}, [("x.txt", f, 2)]),
    ]
    for arguments, entries in expected:
        data = await result(s, "list_dir", **arguments)
        what = f"list_dir {shown(arguments)}"
        actual = [(entry["path"], entry["type"], entry["size"]) for entry in data["metadata"]["entries"]]
        s.expect(actual == entries, f"{what} listed {actual}, not {entries}")
        lines = [path + ("/" if kind == d else "") for path, kind, _ in entries]
        s.expect(
            data["output"].splitlines() == lines,
            f"{what} printed {data['output']!r}; the output must list {lines}, one per line",
        )
    # Symlinks are listed as such, not followed (where a symlink can be set up).
    if await make_symlink(s, "b/d/link", "../c.txt", await local_root(s)):
        data = await result(s, "list_dir", path="b/d")
        listed = [(entry["path"], entry["type"]) for entry in data["metadata"]["entries"]]
        s.expect(
            listed == [("e.txt", f), ("link", "symlink")],
            f"list_dir of a directory with a symlink listed {listed}",
        )
        s.expect(data["output"].splitlines() == ["e.txt", "link"], f"list_dir printed {data['output']!r}")


@WORKER.case("tools.not-found")
async def not_found(s: Session) -> None:
    """Missing files and directories get not_found from every file tool."""
    await s.initialize()
    await put(s, "present/file.txt", "x")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": "missing.txt"}),
        ("read_file", {"path": "missing/file.txt"}),
        ("read_file", {"path": "present/missing.txt"}),
        ("read_file", {"path": str(s.root / "missing.txt")}),
        ("list_dir", {"path": "missing"}),
        ("list_dir", {"path": "present/missing", "depth": 3}),
        ("edit_file", {"path": "missing.txt", "old_string": "a", "new_string": "b"}),
        ("write_file", {"path": "missing/file.txt", "content": "x"}),
    ]
    for tool, arguments in calls:
        await refused(s, "not_found", tool, **arguments)
    await expect_missing(s, "missing.txt", "after edit_file of the missing file")


# --- commands ----------------------------------------------------------------------------------------------


def exec_meta(s: Session, data: dict[str, Any], what: str, **expected: Any) -> None:
    metadata = data["metadata"]
    for key, value in expected.items():
        s.expect(metadata[key] == value, f"{what}: metadata {key} is {metadata[key]!r}, not {value!r}")


@WORKER.case("tools.exec-command")
async def exec_command(s: Session) -> None:
    """exec_command runs argv without a shell, combines stdout and stderr, and reports exit_code and signal;
    is_error is true unless the command exited 0."""
    await s.initialize()
    mode = await s.command_mode()
    argv = ["echo", "a  b", "$HOME", "*", "'q'", "`id`"]
    data = await result(s, "exec_command", mode, argv=argv)
    s.expect(
        data["output"] == "a  b $HOME * 'q' `id`\n",
        f"echo {argv[1:]} printed {data['output']!r}: the arguments must reach the program as given, no shell",
    )
    exec_meta(s, data, "a command that exits 0", exit_code=0, signal=None, timed_out=False)
    s.expect(data["metadata"]["duration_ns"] > 0, f"duration_ns is {data['metadata']['duration_ns']}")
    data = await failed(s, "exec_command", mode, argv=["sh", "-c", "echo out; echo err >&2; exit 3"])
    exec_meta(s, data, "a command that exits 3", exit_code=3, signal=None, timed_out=False)
    for text in ("out", "err"):
        s.expect(text in data["output"].split(), f"the output {data['output']!r} lacks the command's {text}")
    data = await failed(s, "exec_command", mode, argv=["false"])
    exec_meta(s, data, "false", exit_code=1, signal=None, timed_out=False)
    data = await failed(s, "exec_command", mode, argv=["sh", "-c", "kill -KILL $$"])
    exec_meta(s, data, "a command killed by SIGKILL", exit_code=None, signal="KILL", timed_out=False)
    # The output is decoded as UTF-8 with invalid bytes replaced.
    data = await result(s, "exec_command", mode, argv=["printf", "a\\377b\\303\\251"])
    s.expect(data["output"] == "a\ufffdbé", f"the bytes a\\xffb\\xc3\\xa9 came out as {data['output']!r}")
    # The working directory: the root by default, else cwd (relative to the root, or absolute).
    await put(s, "sub/marker.txt", "m")
    data = await result(s, "exec_command", mode, argv=["ls"])
    s.expect(
        "sub" in data["output"].split(), f"ls in the default cwd printed {data['output']!r}, not the root"
    )
    for cwd in ("sub", str(s.root / "sub")):
        data = await result(s, "exec_command", mode, argv=["ls"], cwd=cwd)
        s.expect(data["output"].split() == ["marker.txt"], f"ls in cwd {cwd} printed {data['output']!r}")
    # The command's effects are those of the program: what it writes in the root is there.
    await result(s, "exec_command", mode, argv=["sh", "-c", "printf made > sub/made.txt"])
    await expect_contents(s, "sub/made.txt", "made", "after a command wrote it")
    # A program that cannot start is reported as a shell would: 127 not found, 126 not executable.
    data = await failed(s, "exec_command", mode, argv=["wuu-conformance-no-such-program"])
    exec_meta(s, data, "a program that is not found", exit_code=127, signal=None, timed_out=False)
    await put(s, "not-executable.sh", "#!/bin/sh\necho ran\n")  # write_file makes no executable file
    data = await failed(s, "exec_command", mode, argv=["./not-executable.sh"])
    exec_meta(s, data, "a file that is not executable", exit_code=126, signal=None, timed_out=False)


# Exits 0 while the process $1 lives: it takes signals and is not a zombie (a dead child that an init which
# does not reap still lists).
ALIVE = """
kill -0 "$1" 2>/dev/null || exit 1
if [ -r "/proc/$1/stat" ]; then
    case "$(cat "/proc/$1/stat")" in *") Z "*) exit 1 ;; esac
fi
exit 0
"""


@WORKER.case("tools.exec-timeout")
async def exec_timeout(s: Session) -> None:
    """exec_command past timeout_ms is killed with its process tree and reports timed_out; one within it does not."""
    await s.initialize()
    mode = await s.command_mode()
    data = await result(s, "exec_command", mode, argv=["true"], timeout_ms=60_000)
    exec_meta(s, data, "a command well within its timeout", exit_code=0, signal=None, timed_out=False)
    timeout_ms = 1000
    script = "sleep 60 & echo $! > child.pid; wait"
    data = await failed(s, "exec_command", mode, argv=["sh", "-c", script], timeout_ms=timeout_ms)
    exec_meta(s, data, "a command past its timeout", timed_out=True, exit_code=None)
    s.expect(data["metadata"]["signal"] is not None, "a command killed at its timeout must name the signal")
    duration = data["metadata"]["duration_ns"]
    s.expect(
        timeout_ms * 900_000 <= duration < 30_000_000_000,
        f"a command killed after {timeout_ms} ms reports duration_ns {duration}",
    )
    # The whole tree is killed: the background `sleep 60` must be gone (checked with an unconfined `kill -0`,
    # so that no sandbox keeps the signal from reaching it).
    pid = (await contents(s, "child.pid")).strip()
    s.expect(pid.isdigit(), f"child.pid holds {pid!r}, not the child's pid")

    async def child_gone() -> bool:
        reply = await run(s, "exec_command", "unconfined", argv=["sh", "-c", ALIVE, "sh", pid])
        s.expect("data" in reply, f"exec_command kill -0 {pid} failed: {answer(reply)}")
        return bool(reply["data"]["is_error"])

    await s.until(child_gone, f"the timed-out command's child process {pid} to be killed", interval=0.1)


@WORKER.case("tools.exec-tree")
async def exec_tree(s: Session) -> None:
    """What a command's first process leaves running is ended before exec_command answers: a background
    `sleep` that no longer holds the output is gone when the reply comes."""
    await s.initialize()
    mode = await s.command_mode()
    script = "sleep 60 >/dev/null 2>&1 & echo $! > left.pid"
    data = await result(s, "exec_command", mode, argv=["sh", "-c", script])
    exec_meta(s, data, "a command that leaves a process running", exit_code=0, timed_out=False)
    pid = (await contents(s, "left.pid")).strip()
    s.expect(pid.isdigit(), f"left.pid holds {pid!r}, not the background process's pid")
    # Checked with an unconfined `kill -0`, so that no sandbox keeps the signal from reaching it.
    reply = await run(s, "exec_command", "unconfined", argv=["sh", "-c", ALIVE, "sh", pid])
    s.expect("data" in reply, f"exec_command kill -0 {pid} failed: {answer(reply)}")
    s.expect(
        bool(reply["data"]["is_error"]),
        f"the background process {pid} still runs after its command was answered",
    )


@WORKER.case("commands.environment")
async def command_environment(s: Session) -> None:
    """A command sees PATH, TMPDIR, the binding's forwarded environment and the request's env (which wins),
    and nothing of the adapter's own environment."""
    await s.initialize(environment={"WUU_FORWARDED": "yes", "WUU_BOTH": "binding"})
    mode = await s.command_mode()
    data = await result(
        s, "exec_command", mode, argv=["env"], env={"WUU_REQUEST": "yes", "WUU_BOTH": "request"}
    )
    seen = env_lines(data["output"])
    for name, value in [("WUU_FORWARDED", "yes"), ("WUU_REQUEST", "yes"), ("WUU_BOTH", "request")]:
        s.expect(
            seen.get(name) == value, f"the command sees {name}={seen.get(name)!r}, not {value!r}: {seen}"
        )
    s.expect(seen.get("PATH"), f"the command sees no PATH: {seen}")
    s.expect(seen.get("TMPDIR"), f"the command sees no TMPDIR naming its private temporary directory: {seen}")
    s.expect(
        PRIVATE_VARIABLE not in seen,
        f"the command sees {PRIVATE_VARIABLE}, which only the adapter's own environment holds",
    )
    # Without a request env, the forwarded variables alone.
    data = await result(s, "exec_command", mode, argv=["env"])
    seen = env_lines(data["output"])
    s.expect(
        seen.get("WUU_BOTH") == "binding", f"without a request env, WUU_BOTH is {seen.get('WUU_BOTH')!r}"
    )
    s.expect("WUU_REQUEST" not in seen, "a request's env leaked into a later command")
    s.expect(
        PRIVATE_VARIABLE not in seen, f"the command sees {PRIVATE_VARIABLE} from the adapter's environment"
    )


@WORKER.case("sandbox.never-unconfined")
async def sandbox_never_unconfined(s: Session) -> None:
    """A command in standard or read_only either gets sandbox_unavailable or runs confined: standard writes only
    under the root and TMPDIR, read_only writes nowhere."""
    await s.initialize()
    mode = await s.command_mode()  # skips when the adapter runs no commands
    outside = s.workdir / "outside"
    local = await local_root(s)
    if local:
        outside.mkdir()
    else:
        reply = await s.execute(
            "write_file", "unconfined", path=str(outside / "keep.txt"), content="", create_dirs=True
        )
        if "data" not in reply:
            s.skip(f"no directory can be set up beside the remote root: {answer(reply)}")
    # The control: without a sandbox the write outside works, so a refusal below is the sandbox's.
    control = outside / "unconfined.txt"
    await result(s, "exec_command", "unconfined", argv=["touch", str(control)])
    await expect_contents(s, str(control), "", "made by an unconfined command", mode="unconfined")
    for confined, target in [
        ("standard", outside / "standard.txt"),
        ("read_only", outside / "read-only.txt"),
        ("read_only", s.root / "read-only.txt"),
    ]:
        reply = await s.execute("exec_command", confined, argv=["touch", str(target)])
        if code_of(reply) == "sandbox_unavailable":
            continue
        s.expect(
            "data" in reply,
            f"touch {target} in {confined} must run confined or fail with sandbox_unavailable; "
            f"it answered {answer(reply)}",
        )
        why = f"after a {confined} command wrote it: the command ran without the sandbox"
        await expect_missing(s, str(target), why, mode="unconfined")
        if local:
            s.expect(not target.exists(), f"{target} exists {why}")
    if mode == "standard":
        # standard may write under the root and in its private TMPDIR.
        script = 'printf tmp > "$TMPDIR/t" && cat "$TMPDIR/t" && printf root > in-root.txt'
        data = await result(s, "exec_command", "standard", argv=["sh", "-c", script])
        s.expect(data["output"] == "tmp", f"a standard command could not use its TMPDIR: {data['output']!r}")
        await expect_contents(s, "in-root.txt", "root", "after a standard command wrote it under the root")
