"""The normal file scope beside the execution root: the binding's `file_roots` (the agent's scoped home, Wuu
home, registered workspaces, the system temporary directory), where the dedicated tools reach, what commands
may write, and Wuu home's credential files (spec: worker/initialize.schema.json, InitializeParams
`file_roots`; worker/execute.schema.json, the path rules; permissions/permission_modes.schema.json).

The file roots are directories of the case's directory beside the root, which the adapter creates where it
runs (the binding does not require them to exist), so every case also runs against an adapter whose files
live elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..session import Session, code_of
from ..suite import WORKER
from .tools import answer, contents, local_root, make_symlink, put, refused, result, run, runs_commands

KINDS = ("scoped_home", "wuu_home", "workspace", "temporary")


def scope_dir(s: Session, kind: str) -> Path:
    """Where the case puts the file root of `kind`: beside the root, outside it."""
    return s.workdir / "scope" / kind


def roots_of(s: Session, kinds: tuple[str, ...] = KINDS) -> list[dict[str, Any]]:
    return [{"path": str(scope_dir(s, kind)), "kind": kind} for kind in kinds]


async def begin(s: Session) -> None:
    """Initialize with one file root of each kind."""
    await s.initialize(file_roots=roots_of(s))


@WORKER.case("scope.file-roots")
async def file_roots(s: Session) -> None:
    """In standard and read_only an absolute path resolves inside the file root it lands in, as inside the
    root: standard writes there and read_only reads; a relative path still resolves against the root only,
    a path outside every root gets path_outside_root, and so does a symlink from the root into a file root."""
    await begin(s)
    for kind in KINDS:
        path = str(scope_dir(s, kind) / "notes" / "a.txt")
        await put(s, path, f"in the {kind} root\n")
        read = await contents(s, path, "read_only")
        s.expect(read == f"in the {kind} root\n", f"read_file {path} in read_only read {read!r}")
        await refused(s, "permission_denied", "write_file", "read_only", path=path, content="x")
    await refused(s, "path_outside_root", "write_file", path=str(s.workdir / "scope" / "b.txt"), content="x")
    await refused(s, "path_outside_root", "read_file", path="../scope/workspace/notes/a.txt")
    listed = await result(s, "list_dir", "read_only", path=str(scope_dir(s, "workspace")))
    s.expect("notes" in listed["output"], f"list_dir of the workspace root in read_only answered {listed}")
    if await make_symlink(s, "into-workspace", str(scope_dir(s, "workspace")), await local_root(s)):
        await refused(s, "path_outside_root", "read_file", path="into-workspace/notes/a.txt")


@WORKER.case("scope.wuu-home")
async def wuu_home(s: Session) -> None:
    """The `wuu_home` file root is Wuu home: its credential files are refused sensitive_path for reads and
    writes, while its other files (configuration, records) follow the ordinary boundary."""
    await begin(s)
    home = scope_dir(s, "wuu_home")
    await put(s, str(home / "config.json"), "{}\n")
    await put(s, str(home / "records" / "run.json"), "{}\n")
    for name in ("auth.json", "credentials.json", "remote.json", "phone.json"):
        await refused(s, "sensitive_path", "write_file", path=str(home / name), content="{}")
    mode = await runs_commands(s)
    if mode is None:
        return
    planted = await s.execute(
        "exec_command", "unconfined", argv=["sh", "-c", 'printf "{}" > "$1"', "sh", str(home / "auth.json")]
    )
    if code_of(planted) is not None:
        return  # the adapter runs no unconfined command: auth.json cannot be set up
    s.expect(planted["data"]["is_error"] is False, f"setting up auth.json failed: {answer(planted)}")
    for mode in ("standard", "read_only", "unconfined"):
        await refused(s, "sensitive_path", "read_file", mode, path=str(home / "auth.json"))


@WORKER.case("scope.command-roots")
async def command_roots(s: Session) -> None:
    """A standard command may write beneath every file root except the shared temporary directory; a
    read_only command beneath none."""
    await begin(s)
    mode = await runs_commands(s)
    if mode != "standard":
        s.skip("the adapter runs no confined commands")
    script = 'echo made > "$1/by-command.txt"'
    for kind in KINDS:
        target = str(scope_dir(s, kind))
        reply = await run(s, "exec_command", "standard", argv=["sh", "-c", script, "sh", target])
        s.expect("data" in reply, f"exec_command writing into the {kind} root failed: {answer(reply)}")
        wrote = reply["data"]["is_error"] is False
        s.expect(
            wrote == (kind != "temporary"),
            f"a standard command writing into the {kind} root {'succeeded' if wrote else 'failed'}: "
            f"{reply['data']['output']!r}",
        )
        reply = await run(s, "exec_command", "read_only", argv=["sh", "-c", script, "sh", target])
        s.expect(
            "data" in reply and reply["data"]["is_error"] is True,
            f"a read_only command writing into the {kind} root must fail; it answered {answer(reply)}",
        )


@WORKER.case("scope.binding")
async def binding(s: Session) -> None:
    """A relative file root gets invalid_request (the connection stays uninitialized), and a missing file
    root under require_existing_workspace gets workspace_missing."""
    await s.error(
        "initialize", s.binding(file_roots=[{"path": "notes", "kind": "workspace"}]), "invalid_request"
    )
    s.root.mkdir(parents=True, exist_ok=True)
    missing = s.binding(require_existing_workspace=True, file_roots=roots_of(s, ("workspace",)))
    await s.error("initialize", missing, "workspace_missing")


@WORKER.case("scope.one-wuu-home")
async def one_wuu_home(s: Session) -> None:
    """A binding with two wuu_home file roots gets invalid_request."""
    twice = [*roots_of(s, ("wuu_home",)), {"path": str(s.workdir / "scope" / "other"), "kind": "wuu_home"}]
    await s.error("initialize", s.binding(file_roots=twice), "invalid_request")


@WORKER.case("scope.reinitialize")
async def reinitialize(s: Session) -> None:
    """An omitted `file_roots` equals an empty one on re-initialize; other file roots get binding_immutable."""
    await s.initialize()
    await s.ok("initialize", s.binding(file_roots=[]))
    await s.error("initialize", s.binding(file_roots=roots_of(s, ("workspace",))), "binding_immutable")
