"""The root boundary, symlink escapes, unconfined, the sensitive-path guard and read_only's refusals."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from ..session import Session, code_of
from ..suite import WORKER
from .tools import (
    answer,
    expect_contents,
    expect_missing,
    local_root,
    make_symlink,
    put,
    refused,
    result,
    run,
    runs_commands,
    tool_result,
)

CONFINED = ("standard", "read_only")
SECRET = "outside secret\n"


def outside(s: Session) -> Path:
    """A directory beside the root, outside it."""
    return s.workdir / "outside"


async def set_up_outside(s: Session, local: bool) -> None:
    """Make outside/secret.txt and outside/sub/inner.txt beside the root: here when the root is local, else
    best effort through unconfined write_file (the refusals checked with it do not depend on it existing)."""
    files = {outside(s) / "secret.txt": SECRET, outside(s) / "sub" / "inner.txt": "inner"}
    for path, text in files.items():
        if local:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        else:
            await s.execute("write_file", "unconfined", path=str(path), content=text, create_dirs=True)


async def outside_unchanged(s: Session, local: bool, why: str) -> None:
    """outside/secret.txt still holds SECRET (checked where it was set up)."""
    secret = outside(s) / "secret.txt"
    if local:
        actual = secret.read_text(encoding="utf-8")
        s.expect(actual == SECRET, f"{secret} holds {actual!r} {why}")


async def outside_missing(s: Session, path: Path, local: bool, why: str) -> None:
    """`path`, outside the root, does not exist: through unconfined read_file, and here when local."""
    if local:
        s.expect(not os_exists(path), f"{path} exists {why}")
    reply = await s.execute("read_file", "unconfined", path=str(path))
    s.expect(code_of(reply) == "not_found", f"{path} exists {why}: read_file answered {answer(reply)}")


def os_exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


async def cwd_refused(s: Session, mode: str, cwd: str) -> None:
    """exec_command with `cwd` outside the root gets path_outside_root (the boundary is checked before the
    sandbox, so an adapter without one answers the same)."""
    await refused(s, "path_outside_root", "exec_command", mode, argv=["true"], cwd=cwd)


# --- the root boundary -------------------------------------------------------------------------------------


@WORKER.case("paths.outside-root")
async def outside_root(s: Session) -> None:
    """In standard and read_only, `..` that leaves the root and absolute paths outside it get path_outside_root,
    for reads, listings, writes, edits and a command's cwd, whether the target exists or not; paths that stay
    inside (`sub/..`, the root's absolute path) work."""
    await s.initialize()
    local = await local_root(s)
    await put(s, "in.txt", "inside")
    await put(s, "sub/deep.txt", "deep")
    await set_up_outside(s, local)
    out = outside(s)
    files = [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "./../outside/secret.txt",
        "../outside/no-such-file.txt",
        "../root/in.txt",  # leaves the root, then comes back: the walk left it
        str(out / "secret.txt"),
        str(out / "no-such-file.txt"),
        f"{s.root}/../outside/secret.txt",
        f"{s.root}/../root/in.txt",
    ]
    directories = ["..", "sub/../..", "../outside", str(out), str(s.workdir), "/"]
    for mode in CONFINED:
        for path in files:
            await refused(s, "path_outside_root", "read_file", mode, path=path)
        for path in directories:
            await refused(s, "path_outside_root", "list_dir", mode, path=path)
        # Paths that stay inside.
        for path in ("in.txt", "sub/../in.txt", "./sub/./../in.txt", str(s.root / "in.txt")):
            await expect_contents(s, path, "inside", f"read as {path} in {mode}", mode=mode)
        listing = await result(s, "list_dir", mode, path="sub/..")
        names = [entry["path"] for entry in listing["metadata"]["entries"]]
        s.expect(names == ["in.txt", "sub"], f"list_dir sub/.. in {mode} listed {names}")
    writes: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "../outside/new.txt", "content": "x"}),
        ("write_file", {"path": str(out / "new.txt"), "content": "x"}),
        ("write_file", {"path": "../made/new.txt", "content": "x", "create_dirs": True}),
        ("write_file", {"path": "../root/new.txt", "content": "x"}),
        ("write_file", {"path": "../outside/secret.txt", "content": "overwritten"}),
        ("edit_file", {"path": "../outside/secret.txt", "old_string": "secret", "new_string": "edited"}),
        ("edit_file", {"path": str(out / "secret.txt"), "old_string": "secret", "new_string": "edited"}),
    ]
    for tool, arguments in writes:
        await refused(s, "path_outside_root", tool, "standard", **arguments)
        await refused(s, "permission_denied", tool, "read_only", **arguments)  # the mode comes first
    why = "after a write outside the root was refused"
    await outside_missing(s, out / "new.txt", local, why)
    await outside_missing(s, s.workdir / "made", local, why)
    await expect_missing(s, "new.txt", why)
    await outside_unchanged(s, local, why)
    if await runs_commands(s) is not None:
        for mode in CONFINED:
            for cwd in ("..", "../outside", str(out), "/"):
                await cwd_refused(s, mode, cwd)


@WORKER.case("paths.symlink-escape")
async def symlink_escape(s: Session) -> None:
    """In standard and read_only, symlinks to files and directories outside the root, and dangling ones that
    point outside, get path_outside_root (relative or absolute targets, at any component, through a chain);
    writes through them create and change nothing; symlinks that stay inside work."""
    await s.initialize()
    local = await local_root(s)
    await put(s, "in.txt", "inside")
    await put(s, "sub/deep.txt", "deep")
    await set_up_outside(s, local)
    out = outside(s)
    links = {
        "file-abs": str(out / "secret.txt"),
        "file-rel": "../outside/secret.txt",
        "sub/nested-rel": "../../outside/secret.txt",
        "chain": "file-abs",
        "dir-abs": str(out),
        "dir-rel": "../outside",
        "up": "..",
        "dangling-abs": str(out / "missing.txt"),
        "dangling-rel": "../outside/missing.txt",
        "dangling-dir": str(s.workdir / "nowhere"),
        "ok-file": "in.txt",
        "ok-abs": str(s.root / "in.txt"),
        "ok-dir": "sub",
        "sub/ok-up": "../in.txt",
    }
    for link, target in links.items():
        if not await make_symlink(s, link, target, local):
            s.skip("no symlink can be set up: the root is not local and the adapter runs no commands")
    for mode in CONFINED:
        for path in (
            "file-abs",
            "file-rel",
            "sub/nested-rel",
            "chain",
            "dir-abs/secret.txt",
            "dir-rel/secret.txt",
            "dir-abs/sub/inner.txt",
            "up/outside/secret.txt",
            "up/root/in.txt",
            "dangling-abs",
            "dangling-rel",
            "dangling-dir/x.txt",
        ):
            await refused(s, "path_outside_root", "read_file", mode, path=path)
        for path in ("dir-abs", "dir-rel", "up", "dangling-dir", "dir-abs/sub", str(s.root / "dir-abs")):
            await refused(s, "path_outside_root", "list_dir", mode, path=path)
        for path in ("ok-file", "ok-abs", "sub/ok-up", "ok-dir/../in.txt"):
            await expect_contents(
                s, path, "inside", f"read through the inside symlink {path} in {mode}", mode=mode
            )
        await expect_contents(s, "ok-dir/deep.txt", "deep", f"read through ok-dir in {mode}", mode=mode)
    writes: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "dangling-abs", "content": "x"}),
        ("write_file", {"path": "dangling-rel", "content": "x"}),
        ("write_file", {"path": "dangling-dir/x.txt", "content": "x", "create_dirs": True}),
        ("write_file", {"path": "dir-abs/new.txt", "content": "x"}),
        ("write_file", {"path": "file-abs", "content": "overwritten"}),
        ("write_file", {"path": "chain", "content": "overwritten"}),
        ("edit_file", {"path": "file-rel", "old_string": "secret", "new_string": "edited"}),
        ("edit_file", {"path": "sub/nested-rel", "old_string": "secret", "new_string": "edited"}),
    ]
    for tool, arguments in writes:
        await refused(s, "path_outside_root", tool, "standard", **arguments)
    # In read_only the mode refuses them first.
    for tool, arguments in writes:
        await refused(s, "permission_denied", tool, "read_only", **arguments)
    why = "after a write through a symlink out of the root was refused"
    await outside_missing(s, out / "missing.txt", local, why)
    await outside_missing(s, out / "new.txt", local, why)
    await outside_missing(s, s.workdir / "nowhere", local, why)
    await outside_unchanged(s, local, why)
    # The links themselves are still there, listed as symlinks, not followed.
    listing = await result(s, "list_dir", path=".")
    kinds = {entry["path"]: entry["type"] for entry in listing["metadata"]["entries"]}
    for link in ("file-abs", "dir-abs", "dangling-abs", "dangling-dir", "up"):
        s.expect(kinds.get(link) == "symlink", f"list_dir of the root shows {link} as {kinds.get(link)}")
    if await runs_commands(s) is not None:
        for mode in CONFINED:
            for cwd in ("dir-abs", "dir-rel", "up", "dangling-dir"):
                await cwd_refused(s, mode, cwd)


async def make_hard_link(s: Session, link: str, target: Path, local: bool) -> bool:
    """Create `link` (relative to the root) as a hard link to `target`: here when the root is local, else with
    `ln` through an unconfined exec_command. False when neither works."""
    if local:
        os.link(target, s.root / link)
        return True
    if await runs_commands(s) is None:
        return False
    reply = await s.execute("exec_command", "unconfined", argv=["ln", str(target), link])
    return "data" in reply and reply["data"]["is_error"] is False


@WORKER.case("paths.multi-link-write")
async def multi_link_write(s: Session) -> None:
    """In standard, write_file and edit_file of a regular file with more than one hard link get
    path_outside_root and change nothing, whether the other link is outside the root or inside, before the
    sensitive-path guard; reading the file works; unconfined writes it."""
    await s.initialize()
    local = await local_root(s)
    await set_up_outside(s, local)
    await put(s, "in.txt", "inside")
    root = s.root
    links = {
        "out-link": outside(s) / "secret.txt",
        "in-link": root / "in.txt",
        ".env": outside(s) / "secret.txt",
    }
    for link, target in links.items():
        if not await make_hard_link(s, link, target, local):
            s.skip("no hard link can be set up: the root is not local and `ln` cannot run unconfined")
    for path, text in (
        ("out-link", "secret"),
        ("in-link", "inside"),
        ("in.txt", "inside"),
        (".env", "secret"),
    ):
        # `.env` is a sensitive name too: the path boundary comes first.
        await refused(s, "path_outside_root", "write_file", "standard", path=path, content="overwritten")
        await refused(
            s, "path_outside_root", "edit_file", "standard", path=path, old_string=text, new_string="x"
        )
        await refused(
            s, "permission_denied", "write_file", "read_only", path=path, content="x"
        )  # the mode first
    why = "after writes to a multi-link file were refused"
    await outside_unchanged(s, local, why)
    await expect_contents(s, "in.txt", "inside", why)
    for mode in CONFINED:
        await expect_contents(s, "out-link", SECRET, f"read through a second hard link in {mode}", mode=mode)
    await result(s, "write_file", "unconfined", path="in-link", content="changed")
    await expect_contents(s, "in.txt", "changed", "after an unconfined write to its second link")


@WORKER.case("paths.unconfined")
async def unconfined(s: Session) -> None:
    """unconfined removes the boundary: `..`, absolute paths and symlinks (dangling ones included) out of the
    root are read, listed, written and edited where they lead."""
    await s.initialize()
    for path in ("..", str(s.workdir)):
        listing = await result(s, "list_dir", "unconfined", path=path)
        entries = {entry["path"]: entry["type"] for entry in listing["metadata"]["entries"]}
        s.expect(
            entries.get(s.root.name) == "directory",
            f"list_dir {path} in unconfined lists {entries}, not the root directory {s.root.name}",
        )
    local = await local_root(s)
    await put(s, "in.txt", "inside")
    await put(s, "sub/deep.txt", "deep")
    out = outside(s)
    if local:
        await set_up_outside(s, True)
    else:
        # Through the wire: an unconfined write beside the root. The OS may refuse it (a remote root whose
        # parent the adapter cannot write); the boundary may not.
        for destination, text in ((out / "secret.txt", SECRET), (out / "sub" / "inner.txt", "inner")):
            reply = await run(
                s, "write_file", "unconfined", path=str(destination), content=text, create_dirs=True
            )
            if code_of(reply) in ("permission_denied", "not_found"):
                s.skip(f"the adapter's OS does not let it write beside its root: {answer(reply)}")
            tool_result(s, "write_file", "unconfined", {"path": str(destination)}, reply)
    links = {
        "file-abs": str(out / "secret.txt"),
        "file-rel": "../outside/secret.txt",
        "dir-abs": str(out),
        "dir-rel": "../outside",
        "up": "..",
        "dangling-abs": str(out / "made-through-link.txt"),
    }
    symlinks = True
    for link, target in links.items():
        symlinks = symlinks and await make_symlink(s, link, target, local)
    files = [
        str(out / "secret.txt"),
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        f"{s.root}/../outside/secret.txt",
    ]
    directories = ["../outside", str(out)]
    if symlinks:
        files += ["file-abs", "file-rel", "dir-abs/secret.txt", "dir-rel/secret.txt", "up/outside/secret.txt"]
        directories += ["dir-abs", "dir-rel", "up/outside"]
    for path in files:
        await expect_contents(s, path, SECRET, f"read as {path} in unconfined", mode="unconfined")
    await expect_contents(s, "../root/in.txt", "inside", "read as ../root/in.txt", mode="unconfined")
    for path in directories:
        listing = await result(s, "list_dir", "unconfined", path=path)
        listed = [(entry["path"], entry["type"]) for entry in listing["metadata"]["entries"]]
        s.expect(
            listed == [("secret.txt", "file"), ("sub", "directory")],
            f"list_dir {path} in unconfined listed {listed}",
        )
    # Writes and edits land outside.
    data = await result(s, "write_file", "unconfined", path="../outside/written.txt", content="w")
    s.expect(data["metadata"]["created"] is True, f"a new file outside: metadata {data['metadata']}")
    await result(
        s, "write_file", "unconfined", path=str(out / "deeper" / "x.txt"), content="d", create_dirs=True
    )
    edited = "file-rel" if symlinks else "../outside/secret.txt"
    await result(s, "edit_file", "unconfined", path=edited, old_string="secret", new_string="edited")
    landed = {"written.txt": "w", "deeper/x.txt": "d", "secret.txt": "outside edited\n"}
    if symlinks:
        data = await result(s, "write_file", "unconfined", path="dangling-abs", content="through")
        s.expect(data["metadata"]["created"] is True, f"a write through a dangling link: {data['metadata']}")
        landed["made-through-link.txt"] = "through"
    for name, expected in landed.items():
        why = "after an unconfined write"
        await expect_contents(s, str(out / name), expected, why, mode="unconfined")
        if local:
            actual = (out / name).read_text(encoding="utf-8") if (out / name).exists() else None
            s.expect(actual == expected, f"{out / name} holds {actual!r} {why}; it must hold {expected!r}")
    if symlinks:
        listing = await result(s, "list_dir", "unconfined", path=".")
        kinds = {entry["path"]: entry["type"] for entry in listing["metadata"]["entries"]}
        s.expect(
            kinds.get("dangling-abs") == "symlink", "a write through the symlink dangling-abs replaced it"
        )
    # A command's cwd may be outside too.
    if await runs_commands(s) is not None:
        for cwd in ("..", str(out)) + (("dir-abs",) if symlinks else ()):
            data = await result(s, "exec_command", "unconfined", argv=["ls"], cwd=cwd)
            wanted = "root" if cwd == ".." else "secret.txt"
            s.expect(
                wanted in data["output"].split(),
                f"ls with cwd {cwd} in unconfined printed {data['output']!r}",
            )


# --- sensitive paths ----------------------------------------------------------------------------------------


def _vectors() -> tuple[list[str], list[str]]:
    """The spec's sensitive-path test vectors (spec/data/sensitive_path_vectors.json) as paths under the root:
    the sensitive ones, then the ordinary ones.

    Every rule but Wuu's own credential files matches a path by its name or its last components, so a
    vector's path means the same under any root; the vectors under Wuu's home are left out (an adapter's home
    is its own).
    """
    document = json.loads(
        resources.files("wuu.generated")
        .joinpath("schema", "data", "sensitive_path_vectors.json")
        .read_text("utf-8")
    )
    wuu_home = document["wuu_home"].rstrip("/") + "/"
    sensitive: list[str] = []
    ordinary: list[str] = []
    for vector in document["vectors"]:
        if not vector["path"].startswith(wuu_home):
            (sensitive if vector["sensitive"] else ordinary).append(vector["path"].lstrip("/"))
    return sensitive, ordinary


SENSITIVE, ORDINARY = _vectors()


async def set_up_files(s: Session, local: bool, files: dict[str, str]) -> bool:
    """Create `files` (relative to the root) without the file tools: here when the root is local, else with a
    command. False when neither is possible."""
    if local:
        for name, text in files.items():
            (s.root / name).parent.mkdir(parents=True, exist_ok=True)
            (s.root / name).write_text(text, encoding="utf-8")
        return True
    mode = await runs_commands(s)
    if mode is None:
        return False
    for name, text in files.items():
        script = 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1"'
        reply = await s.execute("exec_command", mode, argv=["sh", "-c", script, "sh", name, text])
        s.expect(
            "data" in reply and reply["data"]["is_error"] is False,
            f"setting up {name} with a command failed: {answer(reply)}",
        )
    return True


@WORKER.case("sensitive.write-refused")
async def sensitive_write_refused(s: Session) -> None:
    """Writing or editing environment files, credential stores and SSH keys gets sensitive_path in standard and
    unconfined (read_only refuses too); nothing is created or changed, also through symlinks."""
    await s.initialize()
    local = await local_root(s)
    for mode in ("standard", "unconfined"):
        for name in SENSITIVE:
            for path in (name, str(s.root / name), f"sub/../{name}"):
                await refused(
                    s, "sensitive_path", "write_file", mode, path=path, content="KEY=1\n", create_dirs=True
                )
            await expect_missing(s, name, f"after writing the sensitive {name} in {mode} was refused")
    # The mode is checked before the guard, and the boundary before it too.
    for name in (".env", "id_rsa", "credentials.json"):
        await refused(s, "permission_denied", "write_file", "read_only", path=name, content="KEY=1\n")
        await expect_missing(s, name, "after writing it in read_only was refused")
        await refused(s, "path_outside_root", "write_file", "standard", path=f"../{name}", content="KEY=1\n")
        await refused(s, "sensitive_path", "write_file", "unconfined", path=f"../{name}", content="KEY=1\n")
        await outside_missing(s, s.workdir / name, local, "after writing it beside the root was refused")
    existing = {
        ".env": "KEY=original\n",
        "id_rsa": "PRIVATE original\n",
        "credentials.json": '{"t": "original"}',
    }
    if not await set_up_files(s, local, existing):
        return  # the existing-file checks need a file the file tools cannot make
    for mode in ("standard", "unconfined"):
        for name, text in existing.items():
            await refused(s, "sensitive_path", "write_file", mode, path=name, content="changed")
            await refused(
                s, "sensitive_path", "edit_file", mode, path=name, old_string="original", new_string="x"
            )
            await expect_contents(s, name, text, f"after writes of it in {mode} were refused")
    # Through symlinks: an ordinary name leading to .env, and the name .env leading to an ordinary file.
    await put(s, "plain.txt", "plain\n")
    await put(s, "x/keep.txt", "")
    if await make_symlink(s, "innocent.txt", ".env", local) and await make_symlink(
        s, "x/.env", "../plain.txt", local
    ):
        for mode in ("standard", "unconfined"):
            await refused(s, "sensitive_path", "write_file", mode, path="innocent.txt", content="changed")
            await refused(
                s,
                "sensitive_path",
                "edit_file",
                mode,
                path="innocent.txt",
                old_string="original",
                new_string="x",
            )
            await refused(s, "sensitive_path", "write_file", mode, path="x/.env", content="changed")
        await expect_contents(s, ".env", existing[".env"], "after writes through the symlink innocent.txt")
        await expect_contents(s, "plain.txt", "plain\n", "after writes through the symlink x/.env")


# Symlinks to sensitive files that do not exist yet, and `..` after a symlink: the path a write would act on.
LINKS_TO_SENSITIVE = {
    "notes": ".env",  # dangling: .env is never created
    "chain": "notes",  # a chain of dangling links
    "deep": "missing/dir/.env.local",  # dangling through directories that do not exist either
    "keys": ".aws/profile",  # keys/../credentials acts on .aws/credentials
}
THROUGH_LINKS = ["notes", "chain", "deep", "keys/../credentials"]


@WORKER.case("sensitive.through-links")
async def sensitive_through_links(s: Session) -> None:
    """The guard applies to the path a write acts on: writes and edits through a dangling symlink (or a chain
    of them) to a sensitive name, and through `..` after a symlink into .aws, get sensitive_path in standard
    and unconfined, creating nothing and leaving the links in place; a dangling link to an ordinary name is
    written through."""
    await s.initialize()
    local = await local_root(s)
    absolute = {"absolute": str(s.root / "id_ed25519"), "plain-link": "plain/made.txt"}
    for link, target in {**LINKS_TO_SENSITIVE, **absolute}.items():
        if not await make_symlink(s, link, target, local):
            s.skip("no symlink can be set up: the root is not local and the adapter runs no commands")
    for mode in ("standard", "unconfined"):
        for path in [*THROUGH_LINKS, "absolute"]:
            arguments = {"path": path, "content": "KEY=1\n", "create_dirs": True}
            await refused(s, "sensitive_path", "write_file", mode, **arguments)
            await refused(s, "sensitive_path", "edit_file", mode, path=path, old_string="K", new_string="x")
    why = "after writes through symlinks to it were refused"
    for target in (".env", "missing", ".env.local", ".aws", "id_ed25519"):
        await expect_missing(s, target, why)
    listing = await result(s, "list_dir", path=".", include_hidden=True)
    kinds = {entry["path"]: entry["type"] for entry in listing["metadata"]["entries"]}
    for link in [*LINKS_TO_SENSITIVE, *absolute]:
        s.expect(kinds.get(link) == "symlink", f"list_dir of the root shows {link} as {kinds.get(link)}")
    # Not every dangling link is refused: one to an ordinary name is written through, creating its target.
    data = await result(s, "write_file", path="plain-link", content="plain\n", create_dirs=True)
    s.expect(data["metadata"]["created"] is True, f"a write through a dangling link: {data['metadata']}")
    await expect_contents(s, "plain/made.txt", "plain\n", "after a write through the symlink plain-link")


@WORKER.case("sensitive.not-overbroad")
async def sensitive_not_overbroad(s: Session) -> None:
    """Files merely named like secrets (credentials.go, secrets.py, id_rsa.pub, .env.example) can be written and
    edited, and write-guarded files (.env, id_rsa, credentials.json) can be read, in every mode that reads."""
    await s.initialize()
    local = await local_root(s)
    for mode in ("standard", "unconfined"):
        for name in ORDINARY:
            await put(s, name, f"package {mode}\n", mode=mode)
            await result(s, "edit_file", mode, path=name, old_string=mode, new_string="edited")
            await expect_contents(s, name, "package edited\n", f"after it was written and edited in {mode}")
    guarded = {
        ".env": "KEY=value\n",
        "id_rsa": "PRIVATE\n",
        "credentials.json": "{}",
        ".ssh/config": "Host x\n",
    }
    made = await set_up_files(s, local, guarded)
    for mode in ("standard", "read_only", "unconfined"):
        for name, text in guarded.items():
            if made:
                await expect_contents(s, name, text, f"read in {mode}", mode=mode)
            else:
                # No way to create them here: a read is still not refused, it finds no file.
                await refused(s, "not_found", "read_file", mode, path=name)
    if made:
        listing = await result(s, "list_dir", "read_only", path=".", include_hidden=True)
        names = [entry["path"] for entry in listing["metadata"]["entries"]]
        s.expect(".env" in names and "id_rsa" in names, f"list_dir with include_hidden listed {names}")


# --- read_only ----------------------------------------------------------------------------------------------


@WORKER.case("readonly.mutation-refused")
async def read_only_refuses_mutations(s: Session) -> None:
    """read_only refuses write_file and edit_file with permission_denied, changing nothing; reads, listings and
    commands are not refused as mutations."""
    await s.initialize()
    await put(s, "keep.txt", "original\n")
    await put(s, "dir/inner.txt", "inner")
    mutations: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "keep.txt", "content": "changed"}),
        ("write_file", {"path": "keep.txt", "content": ""}),
        ("write_file", {"path": "new.txt", "content": "new"}),
        ("write_file", {"path": "dir/new.txt", "content": "new"}),
        ("write_file", {"path": "made/new.txt", "content": "new", "create_dirs": True}),
        ("edit_file", {"path": "keep.txt", "old_string": "original", "new_string": "changed"}),
        ("edit_file", {"path": "keep.txt", "old_string": "original", "new_string": "x", "replace_all": True}),
        ("edit_file", {"path": "keep.txt", "old_string": "absent", "new_string": "x"}),
        # The mode is checked first: before existence, the boundary and the sensitive-path guard.
        ("edit_file", {"path": "missing.txt", "old_string": "a", "new_string": "b"}),
        ("write_file", {"path": "missing/new.txt", "content": "new"}),
        ("write_file", {"path": "../beside.txt", "content": "new"}),
        ("write_file", {"path": ".env", "content": "KEY=1"}),
    ]
    for tool, arguments in mutations:
        await refused(s, "permission_denied", tool, "read_only", **arguments)
    why = "after read_only refused the writes"
    await expect_contents(s, "keep.txt", "original\n", why)
    await expect_missing(s, "new.txt", why)
    await expect_missing(s, "dir/new.txt", why)
    await expect_missing(s, ".env", why)
    await expect_missing(s, "../beside.txt", why, mode="unconfined")
    await refused(s, "not_found", "list_dir", path="made")
    # Reading is what read_only is for.
    await expect_contents(s, "keep.txt", "original\n", "read in read_only", mode="read_only")
    listing = await result(s, "list_dir", "read_only", path=".", depth=2)
    names = [entry["path"] for entry in listing["metadata"]["entries"]]
    s.expect(names == ["dir", "dir/inner.txt", "keep.txt"], f"list_dir in read_only listed {names}")
    # exec_command is not a mutating tool: it runs confined or gets sandbox_unavailable, never permission_denied.
    reply = await s.execute("exec_command", "read_only", argv=["true"])
    s.expect(
        code_of(reply) in (None, "sandbox_unavailable", "unsupported_tool"),
        f"exec_command true in read_only must run (confined) or get sandbox_unavailable; it answered {answer(reply)}",
    )
    # The same calls work in standard: the refusals were read_only's.
    await result(s, "edit_file", "standard", path="keep.txt", old_string="original", new_string="changed")
    await expect_contents(s, "keep.txt", "changed\n", "after the same edit in standard")
