"""The search tools, search_content and search_files: their results and bounds, the path rules, the sensitive-path
guard and the redaction of what search_content shows (spec: worker/search.schema.json, redaction.schema.json).

Every case is skipped, saying so, for an adapter that does not provide the tool (`unsupported_tool`).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from wuu.generated.catalog import WORKER_SEARCH_LINE_MAX_CHARS

from ..session import Session, code_of
from ..suite import WORKER
from .paths import CONFINED, outside, set_up_outside
from .tools import answer, local_root, make_symlink, put, refused, result, run, runs_commands

ALL_MODES = (*CONFINED, "unconfined")


def lines(data: dict[str, Any]) -> list[str]:
    output: str = data["output"]
    return output.splitlines()


async def found(s: Session, mode: str = "standard", **arguments: Any) -> list[str]:
    """The output lines of a search_content that must succeed."""
    return lines(await result(s, "search_content", mode, **arguments))


async def plant(s: Session, path: str, content: str) -> None:
    """Put a file that write_file refuses (a sensitive path) in the root: here when the root is local, else
    through exec_command; skip the case when neither is possible."""
    if await local_root(s):
        target = s.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return
    mode = await runs_commands(s)
    if mode is None:
        s.skip("a sensitive file cannot be set up: the root is not local and the adapter runs no commands")
    script = 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1"'
    reply = await s.execute("exec_command", mode, argv=["sh", "-c", script, "sh", path, content])
    s.expect(
        "data" in reply and reply["data"]["is_error"] is False,
        f"setting up {path} through exec_command failed: {answer(reply)}",
    )


@WORKER.case("search.content")
async def content(s: Session) -> None:
    """search_content shows each matching line as `path:line:text`, paths relative to the root in sorted order,
    with its metadata; it reads regular expressions, literal text, case-insensitive patterns and globs (with
    `!` exclusions) as the spec says; no match is an empty success; a pattern it cannot read gets
    invalid_request, a missing path not_found."""
    await s.initialize()
    await put(s, "a.txt", "hello world\nnothing\nHello again\n")
    await put(s, "src/deep/b.py", "x = 1\nprint('hello')\n")
    await put(s, "src/test_c.py", "call(x) hello\n")
    await put(s, "src/c.js", "call(x)\n")
    data = await result(s, "search_content", pattern="hel+o")
    expected = ["a.txt:1:hello world", "src/deep/b.py:2:print('hello')", "src/test_c.py:1:call(x) hello"]
    s.expect(
        lines(data) == expected, f"search_content of hel+o printed {data['output']!r}; expected {expected}"
    )
    metadata = {key: data["metadata"][key] for key in ("matches", "files", "truncated")}
    s.expect(
        metadata == {"matches": 3, "files": 3, "truncated": False},
        f"search_content of hel+o answered the metadata {data['metadata']}",
    )
    insensitive = await found(s, pattern="HELLO", path="a.txt", case_sensitive=False)
    s.expect(
        insensitive == ["a.txt:1:hello world", "a.txt:3:Hello again"],
        f"a case-insensitive search of one file found {insensitive}",
    )
    literal = await found(s, pattern="call(x)", literal=True, globs=["*.py", "*.js"])
    s.expect(
        literal == ["src/c.js:1:call(x)", "src/test_c.py:1:call(x) hello"],
        f"a literal search of call(x) in *.py and *.js found {literal}",
    )
    narrowed = await found(s, pattern="call", path="src", globs=["*.js", "*.py", "!test_*"])
    s.expect(narrowed == ["src/c.js:1:call(x)"], f"globs *.js, *.py and !test_* found {narrowed}")
    none = await result(s, "search_content", pattern="absent-[0-9]{5}")
    s.expect(none["output"] == "", f"a search that matches nothing printed {none['output']!r}")
    await refused(s, "invalid_request", "search_content", pattern="(")
    await refused(s, "not_found", "search_content", pattern="x", path="missing")


@WORKER.case("search.content-bounds")
async def content_bounds(s: Session) -> None:
    """search_content returns at most max_results lines, the first in path then line order, and says when it
    left some out (`truncated`, a closing line); a long line is cut to search_line_max_chars code points and
    `…`."""
    await s.initialize()
    await put(s, "many.txt", "".join(f"match {n}\n" for n in range(10)))
    await put(s, "z.txt", "match last\n")
    long_line = "needle " + "é" * (2 * WORKER_SEARCH_LINE_MAX_CHARS)
    await put(s, "long.txt", long_line + "\n")
    bounded = await result(s, "search_content", pattern="match", max_results=3)
    shown = lines(bounded)
    s.expect(
        shown[:3] == ["many.txt:1:match 0", "many.txt:2:match 1", "many.txt:3:match 2"] and len(shown) == 4,
        f"search_content with max_results 3 printed {shown}: the first three lines and one saying more exist",
    )
    s.expect(
        bounded["metadata"]["truncated"] is True and bounded["metadata"]["matches"] == 3,
        f"search_content with max_results 3 of 11 answered {bounded['metadata']}",
    )
    whole = await result(s, "search_content", pattern="match", max_results=11)
    s.expect(
        whole["metadata"]["truncated"] is False and len(lines(whole)) == 11,
        f"search_content with max_results 11 of 11 answered {whole['metadata']} and {len(lines(whole))} lines",
    )
    cut = await found(s, pattern="needle")
    expected = "long.txt:1:" + long_line[:WORKER_SEARCH_LINE_MAX_CHARS] + "…"
    s.expect(cut == [expected], f"a line of {len(long_line)} characters was shown as {cut!r}, not cut")


@WORKER.case("search.hidden-and-git")
async def hidden_and_git(s: Session) -> None:
    """search_content and search_files skip entries whose name starts with `.` unless include_hidden, and never
    search or list a `.git` directory."""
    await s.initialize()
    await put(s, ".git/config", "needle in git\n")
    await put(s, ".hidden/notes.txt", "needle hidden\n")
    await put(s, "plain.txt", "needle plain\n")
    plain = await found(s, pattern="needle")
    s.expect(plain == ["plain.txt:1:needle plain"], f"search_content without include_hidden found {plain}")
    hidden = await found(s, pattern="needle", include_hidden=True)
    s.expect(
        hidden == [".hidden/notes.txt:1:needle hidden", "plain.txt:1:needle plain"],
        f"search_content with include_hidden found {hidden}: .git is never searched",
    )
    listed = lines(await result(s, "search_files", pattern="*", include_hidden=True))
    s.expect(
        listed == [".hidden/", ".hidden/notes.txt", "plain.txt"],
        f"search_files of * with include_hidden listed {listed}: .git is never listed",
    )


@WORKER.case("search.sensitive")
async def sensitive(s: Session) -> None:
    """search_content never shows a line of a sensitive path (an environment file, an SSH key, a private key
    file, a credential store), in every mode, hidden files included, nor when the path names the file;
    search_files lists their names, as list_dir does."""
    await s.initialize()
    secrets = {".env": "needle=env\n", ".ssh/id_ed25519": "needle key\n", "certs/server.key": "needle pem\n"}
    secrets["config/credentials.json"] = '{"needle": "credential store"}\n'
    for path, text in secrets.items():
        await plant(s, path, text)
    await put(s, "ok.txt", "needle ok\n")
    for mode in ALL_MODES:
        shown = await found(s, mode, pattern="needle", include_hidden=True)
        s.expect(
            shown == ["ok.txt:1:needle ok"],
            f"search_content in {mode} showed {shown}: lines of sensitive files must never be shown",
        )
        for path in secrets:
            named = await found(s, mode, pattern="needle", path=path)
            s.expect(named == [], f"search_content of {path} in {mode} showed {named}")
    names = lines(await result(s, "search_files", pattern="*", include_hidden=True))
    s.expect(
        ".env" in names and "certs/server.key" in names, f"search_files did not list sensitive names: {names}"
    )


@WORKER.case("search.boundary")
async def boundary(s: Session) -> None:
    """In standard and read_only, a search path outside the root (`..`, absolute, through a symlink) gets
    path_outside_root, and a search never follows a symlink below its path: nothing outside the root is
    shown or listed."""
    await s.initialize()
    local = await local_root(s)
    await set_up_outside(s, local)
    await put(s, "in.txt", "outside secret, but inside\n")
    if not await make_symlink(s, "link", str(outside(s)), local):
        s.skip("no symlink can be set up: the root is not local and the adapter runs no commands")
    await make_symlink(s, "file-link", str(outside(s) / "secret.txt"), local)
    for mode in CONFINED:
        shown = await found(s, mode, pattern="secret", include_hidden=True)
        s.expect(shown == ["in.txt:1:outside secret, but inside"], f"search_content in {mode} showed {shown}")
        listed = lines(await result(s, "search_files", mode, pattern="*"))
        s.expect(listed == ["file-link", "in.txt", "link"], f"search_files in {mode} listed {listed}")
        for tool, arguments in (("search_content", {"pattern": "x"}), ("search_files", {"pattern": "*"})):
            for path in ("../outside", str(outside(s)), "link"):
                reply = await run(s, tool, mode, path=path, **arguments)
                s.expect(
                    code_of(reply) == "path_outside_root",
                    f"{tool} of {path} in {mode} must fail with path_outside_root; it answered {answer(reply)}",
                )


@WORKER.case("search.files")
async def files(s: Session) -> None:
    """search_files lists the paths that match a glob (without `/`: the name at any depth; with `/`: the path
    relative to `path`; `**`, `{a,b}`), relative to the root, sorted, directories ending in `/`, at most
    max_results of them with truncation reported."""
    await s.initialize()
    for path in ("src/a.py", "src/pkg/b.py", "src/pkg/c.txt", "top.py", "src/pkg.py/keep"):
        await put(s, path, "x")
    anywhere = await result(s, "search_files", pattern="*.py")
    expected = ["src/a.py", "src/pkg.py/", "src/pkg/b.py", "top.py"]
    s.expect(
        lines(anywhere) == expected, f"search_files of *.py listed {lines(anywhere)}; expected {expected}"
    )
    s.expect(
        anywhere["metadata"]["paths"] == expected and anywhere["metadata"]["truncated"] is False,
        f"search_files of *.py answered the metadata {anywhere['metadata']}",
    )
    anchored = lines(await result(s, "search_files", pattern="pkg/*.{py,txt}", path="src"))
    s.expect(
        anchored == ["src/pkg/b.py", "src/pkg/c.txt"], f"search_files of pkg/*.{{py,txt}} listed {anchored}"
    )
    deep = lines(await result(s, "search_files", pattern="src/**/*.py"))
    s.expect(
        deep == ["src/a.py", "src/pkg.py/", "src/pkg/b.py"], f"search_files of src/**/*.py listed {deep}"
    )
    bounded = await result(s, "search_files", pattern="*.py", max_results=2)
    s.expect(
        lines(bounded)[:2] == expected[:2]
        and len(lines(bounded)) == 3
        and bounded["metadata"]["truncated"] is True,
        f"search_files with max_results 2 printed {lines(bounded)} and {bounded['metadata']}",
    )
    await refused(s, "not_found", "search_files", pattern="*", path="missing")
    await refused(s, "invalid_request", "search_files", pattern="*", path="top.py")


def _vectors() -> list[dict[str, str]]:
    """The spec's one-line redaction vectors (spec/data/redaction_vectors.json)."""
    data = resources.files("wuu.generated").joinpath("schema", "data", "redaction_vectors.json")
    vectors: list[dict[str, str]] = json.loads(data.read_text("utf-8"))["vectors"]
    return [vector for vector in vectors if "\n" not in vector["text"]]


@WORKER.case("search.redaction")
async def redaction(s: Session) -> None:
    """The lines search_content shows are redacted as the spec's vectors say: each secret shape is replaced by
    `[REDACTED:<rule id>]`, each look-alike is shown as it is; the file itself is unchanged."""
    await s.initialize()
    vectors = _vectors()
    await put(s, "corpus.txt", "".join(vector["text"] + "\n" for vector in vectors))
    shown = await found(s, pattern=".", max_results=len(vectors))
    for number, vector in enumerate(vectors, start=1):
        expected = f"corpus.txt:{number}:{vector['redacted']}"
        actual = shown[number - 1] if number <= len(shown) else None
        s.expect(
            actual == expected, f"{vector['note']} search_content showed {actual!r}; expected {expected!r}"
        )
