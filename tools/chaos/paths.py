"""Path escapes against the native worker's file tools (rows `paths.standard`, `paths.read-only`, `paths.race`).

Each mode row starts a real native worker on a fresh layout: a root with symlinks of every kind (out of it
to files and directories, dangling, chains, `..`, into /proc), a hard link to a file outside, and beside
it sentinel directories (one is the worker's working directory, for `/proc/self/cwd`). A seeded corpus
(`..` chains, absolute paths, the links, `/proc/self/root` and `/proc/self/cwd`, Unicode look-alikes of
`.` and `/`, NUL bytes, overlong names, and paths that stay inside) goes to every tool that takes a path:
read_file, write_file (with and without create_dirs), edit_file, list_dir, exec_command's and
process/start's cwd, export/open. Every path that leaves the root must get the code the spec assigns
(execute.schema.json: the mode first, then `path_outside_root`); one that stays inside must not get
`path_outside_root`; no reply may carry the sentinels' token; and after each call the sentinels are
unchanged (contents, mtimes, no new entries).

`paths.race` flips names in the root while the tools run: `flip` is exchanged atomically
(renameat2 RENAME_EXCHANGE) between a directory inside and a symlink to a directory outside, `flipf`
between a file inside and a symlink to a file outside, by a separate process as fast as it can. Every call
must act inside the root or get `path_outside_root`: the worker's resolution may see the inside state and
its open the outside one, which only an open that cannot leave the root (openat2 RESOLVE_BENEATH, or the
O_NOFOLLOW walk) refuses.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wuu.worker.client import WorkerClient
from wuu.worker.errors import split_error

from .campaign import Campaign, Context, Outcome, leftover_processes, reap_leftovers

FULL_ATTEMPTS = 10000
"""Calls per mode row at scale 1."""
FULL_RACE_ATTEMPTS = 5000
"""Calls of the race row at scale 1."""
STEP_S = 10.0
"""How long one call may take before the row fails as hung."""
SESSION = "chaos-paths"
MUTATING = frozenset({"write_file", "edit_file"})

# Labels of corpus entries: what the path does, which decides the answer it must get.
ESCAPE = "escape"  # leaves the root: refused with path_outside_root
INSIDE = "inside"  # stays inside (look-alikes included): anything but path_outside_root
MULTI_LINK = "multi-link"  # a file with a second hard link outside: writes refused, reads allowed
MALFORMED = "malformed"  # NUL bytes, overlong names: invalid_request

LOOKALIKE_DOTS = ("\u2024\u2024", "\uff0e\uff0e", "\u2025", ".\u2024", "\u2024.", "\uff0e.")
"""Two dots that are not `..`: ONE DOT LEADER, FULLWIDTH FULL STOP, TWO DOT LEADER, mixed."""
LOOKALIKE_SLASHES = ("\uff0f", "\u2215", "\u2044", "\u29f8")
"""Characters that look like `/`: FULLWIDTH SOLIDUS, DIVISION SLASH, FRACTION SLASH, BIG SOLIDUS."""


@dataclass(frozen=True)
class Layout:
    """One run's files: the root, the sentinel directories beside it, and the token only they hold."""

    base: Path
    token: str

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def outside(self) -> Path:
        return self.base / "outside"

    @property
    def cwd(self) -> Path:
        """The worker's working directory, outside the root: where `/proc/self/cwd` leads."""
        return self.base / "cwd"


def build_layout(base: Path) -> Layout:
    """Create the root, its links and the sentinels under `base` (the layout of the module docstring)."""
    base = base.resolve()
    lay = Layout(base, secrets.token_hex(8))
    for directory in (lay.root / "sub" / "inner", lay.outside / "dir", lay.cwd):
        directory.mkdir(parents=True)
    secret = f"outside {lay.token}\n"
    (lay.outside / "secret.txt").write_text(secret)
    (lay.outside / f"name-{lay.token}.txt").write_text(secret)
    (lay.outside / "dir" / "inner.txt").write_text(secret)
    (lay.outside / "hard.txt").write_text(f"hard link {lay.token}\n")
    (lay.cwd / "secret.txt").write_text(secret)
    (lay.root / "in.txt").write_text("inside\n")
    (lay.root / "sub" / "deep.txt").write_text("deep\n")
    (lay.root / "sub" / "inner" / "deeper.txt").write_text("deeper\n")
    os.link(lay.outside / "hard.txt", lay.root / "hard.txt")
    for name, target in _links(lay).items():
        (lay.root / name).symlink_to(target)
    return lay


def _links(lay: Layout) -> dict[str, str]:
    out = lay.outside
    chain = {f"chain{i}": f"chain{i + 1}" for i in range(1, 8)}
    return {
        "file-abs": str(out / "secret.txt"),
        "file-rel": "../outside/secret.txt",
        "dir-abs": str(out),
        "dir-rel": "../outside",
        "up": "..",
        "sub/up2": "../..",
        "dangling-abs": str(out / "missing.txt"),
        "dangling-rel": "../outside/missing.txt",
        "dangling-dir": str(lay.base / "nowhere"),
        "proc-root": f"/proc/self/root{out}",
        "proc-cwd": "/proc/self/cwd",
        **chain,
        "chain8": "file-rel",
        "ok-file": "in.txt",
        "ok-abs": str(lay.root / "sub"),
        "ok-up": "sub/inner/../../in.txt",
        "ok-chain": "ok-file",
    }


ESCAPE_LINKS = ("file-abs", "file-rel", "dangling-abs", "dangling-rel", "chain1", "chain5")
ESCAPE_DIR_LINKS = ("dir-abs", "dir-rel", "up", "sub/up2", "dangling-dir", "proc-root", "proc-cwd")
INSIDE_LINKS = ("ok-file", "ok-abs/deep.txt", "ok-up", "ok-chain", "ok-abs", "ok-abs/inner")
OUTSIDE_NAMES = ("secret.txt", "dir/inner.txt", "dir", "new.txt", "missing/new.txt", "")


def corpus_entry(rng: random.Random, lay: Layout) -> tuple[str, str]:
    """One generated path with its label."""
    kind = rng.choice(_GENERATORS)
    return kind(rng, lay)


def _dotdot(rng: random.Random, lay: Layout) -> tuple[str, str]:
    """Down into the root's directories, then up past the root, maybe back in: refused all the same."""
    down = rng.choice([[], ["sub"], ["sub", "inner"], [".", "sub"]])
    ups = ["."] * rng.randint(0, 1) + [".."] * (len([p for p in down if p != "."]) + rng.randint(1, 3))
    tail = rng.choice([["outside", rng.choice(OUTSIDE_NAMES)], ["root", "in.txt"], ["cwd", "secret.txt"]])
    parts = [*down, *ups, *tail]
    path = "/".join(part for part in parts if part)
    return ESCAPE, rng.choice([path, "./" + path, path.replace("/", "//")])


def _absolute(rng: random.Random, lay: Layout) -> tuple[str, str]:
    name = rng.choice(OUTSIDE_NAMES)
    return ESCAPE, rng.choice(
        [
            f"{lay.outside}/{name}",
            f"{lay.root}/../outside/{name}",
            f"{lay.root}/sub/../../outside/{name}",
            f"{lay.root}/../root/in.txt",
            f"{lay.cwd}/secret.txt",
            str(lay.base),
        ]
    )


def _symlink(rng: random.Random, lay: Layout) -> tuple[str, str]:
    if rng.random() < 0.5:
        return ESCAPE, rng.choice(ESCAPE_LINKS)
    link = rng.choice(ESCAPE_DIR_LINKS)
    below = {"up": ["outside/secret.txt", "root/in.txt", "outside"], "sub/up2": ["outside/dir", "root"]}
    tails = below.get(link, ["secret.txt", "dir/inner.txt", "new.txt", "", "dir", "x/y.txt"])
    tail = rng.choice(tails)
    return ESCAPE, f"{link}/{tail}" if tail else link


def _proc(rng: random.Random, lay: Layout) -> tuple[str, str]:
    """`/proc/self/root` and `/proc/self/cwd` lead where they point: outside here, except the root's own."""
    if rng.random() < 0.2:
        return INSIDE, f"/proc/self/root{lay.root}/in.txt"
    return ESCAPE, rng.choice(
        [
            f"/proc/self/root{lay.outside}/{rng.choice(OUTSIDE_NAMES)}",
            f"/proc/self/cwd/{rng.choice(['secret.txt', 'new.txt', ''])}",
            "/proc/self/root/",
            f"/proc/{rng.choice(['self', 'thread-self'])}/cwd",
        ]
    )


def _lookalike(rng: random.Random, lay: Layout) -> tuple[str, str]:
    """Names that look like `..` and `/` but are ordinary names inside the root."""
    dots = rng.choice(LOOKALIKE_DOTS)
    slash = rng.choice(["/", *LOOKALIKE_SLASHES])
    return INSIDE, slash.join([dots, dots, "outside", rng.choice(["secret.txt", "new.txt"])])


def _malformed(rng: random.Random, lay: Layout) -> tuple[str, str]:
    base = rng.choice(["in.txt", "../outside/secret.txt", "sub/new.txt", "file-abs"])
    if rng.random() < 0.5:
        cut = rng.randint(0, len(base))
        return MALFORMED, base[:cut] + "\0" + base[cut:]
    long_name = rng.choice("nx\u2024") * rng.randint(256, 400)  # over NAME_MAX in bytes
    return MALFORMED, rng.choice([long_name, f"sub/{long_name}/x.txt", "/".join(["dir"] * 1400)])


def _multi_link(rng: random.Random, lay: Layout) -> tuple[str, str]:
    return MULTI_LINK, rng.choice(["hard.txt", "./hard.txt", str(lay.root / "hard.txt")])


def _inside(rng: random.Random, lay: Layout) -> tuple[str, str]:
    return INSIDE, rng.choice(
        [
            "in.txt",
            "sub/deep.txt",
            "sub/../in.txt",
            "sub/inner/../../sub/deep.txt",
            str(lay.root / "in.txt"),
            f"new-{rng.randint(0, 99)}.txt",
            "sub/made/new.txt",
            ".",
            "sub",
            *INSIDE_LINKS,
        ]
    )


_GENERATORS: tuple[Callable[[random.Random, Layout], tuple[str, str]], ...] = (
    _dotdot,
    _dotdot,
    _absolute,
    _symlink,
    _symlink,
    _symlink,
    _proc,
    _lookalike,
    _malformed,
    _multi_link,
    _inside,
)

TOOLS = (
    "read_file",
    "write_file",
    "write_file+dirs",
    "edit_file",
    "list_dir",
    "exec_cwd",
    "start_cwd",
    "export",
)
TOOL_WEIGHTS = (5, 4, 3, 4, 4, 1, 1, 2)


def expected_codes(label: str, tool: str, mode: str) -> set[str | None] | None:
    """The codes a call may get (None: success); None when any answer but `path_outside_root` is right."""
    mutating = tool.split("+")[0] in MUTATING
    if mode == "read_only" and mutating:
        # The mode comes first; arguments that break the schema (NUL) may be refused before it.
        return {"permission_denied", "invalid_request"} if label == MALFORMED else {"permission_denied"}
    if label == ESCAPE or (label == MULTI_LINK and mutating):
        return {"path_outside_root"}
    if label == MALFORMED:
        return {"invalid_request"}
    return None


def call(tool: str, path: str, mode: str) -> tuple[str, dict[str, Any]]:
    """The request (method, data) that gives `path` to `tool` in `mode`."""
    if tool == "export":
        return "export/open", {"path": path}
    if tool == "start_cwd":
        return "process/start", {"argv": ["true"], "cwd": path, "permission_mode": mode}
    arguments: dict[str, Any] = {"path": path}
    name = tool.split("+")[0]
    if tool == "exec_cwd":
        name, arguments = "exec_command", {"argv": ["true"], "cwd": path}
    elif name == "write_file":
        arguments.update(content="chaos inside\n", create_dirs=tool.endswith("+dirs"))
    elif name == "edit_file":
        arguments.update(old_string="inside", new_string="inside")
    data = {
        "tool": name,
        "call": {"id": "chaos", "arguments": json.dumps(arguments)},
        "actor": {"kind": "agent", "id": "chaos"},
        "permission_mode": mode,
    }
    return "execute", data


def snapshot(lay: Layout) -> dict[str, tuple[Any, ...]]:
    """Every entry of the layout outside the root: kind, size, mtime and content (or link target)."""
    found: dict[str, tuple[Any, ...]] = {}
    for directory, names, files in os.walk(lay.base):
        here = Path(directory)
        if here == lay.base:
            names[:] = [name for name in names if name != "root"]
        for name in [*names, *files]:
            path = here / name
            info = path.lstat()
            if path.is_symlink():
                content: bytes | str = os.readlink(path)
            elif path.is_file():
                content = path.read_bytes()
            else:
                content = b""
            found[str(path.relative_to(lay.base))] = (info.st_mode, info.st_size, info.st_mtime_ns, content)
        found[str(here.relative_to(lay.base))] = (here.lstat().st_mtime_ns,)
    return found


def _answer(reply: dict[str, Any]) -> tuple[str | None, str]:
    """The reply's error code (None on success) and its text, to search for the token."""
    if "error" in reply:
        return split_error(str(reply["error"]))[0], str(reply["error"])
    return None, json.dumps(reply.get("data"))


class _Run:
    """One native worker bound to a layout's root, and the failures found so far."""

    def __init__(self, context: Context, name: str, lay: Layout) -> None:
        self.context, self.name, self.lay = context, name, lay
        self.outcome = Outcome()
        self.client: WorkerClient | None = None
        self.before: dict[str, tuple[Any, ...]] = {}

    async def __aenter__(self) -> _Run:
        self.before = snapshot(self.lay)
        self.client = await WorkerClient.spawn(
            [sys.executable, "-m", "wuu.worker"], cwd=self.lay.cwd, env={**os.environ, "WUU_CHAOS": self.name}
        )
        await asyncio.wait_for(
            self.client.connect(str(self.lay.root), SESSION, capabilities=["process.start.v1"]), STEP_S
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.client is not None:
            await self.client.close(budget=STEP_S)

    def fail(self, attempt: int, what: str) -> None:
        self.outcome.failures.append(
            f"{self.name} seed {self.context.seed} attempt {attempt}: {what}; rerun: {self.context.rerun(self.name)}"
        )

    async def check_outside(
        self, attempt: int, shown: str, tool: str, code: str | None, text: str, *, may_read: bool = False
    ) -> None:
        """Fail unless the reply (`code`, `text`) shows nothing of the outside (unless `may_read`: a hard link
        read) and the outside is as it was; a snapshot that was taken is closed."""
        if self.lay.token in text and not (may_read and code is None):
            self.fail(attempt, f"{shown}: the reply carries what lies outside the root: {text[:200]}")
        if code is None and tool == "export":
            await self.request(attempt, "export/close", {"token": json.loads(text)["token"]})
        if code is None or tool.split("+")[0] in MUTATING:
            now = snapshot(self.lay)
            if now != self.before:
                changed = sorted(set(now.items()) ^ set(self.before.items()))[:3]
                self.fail(attempt, f"{shown} changed what lies outside the root: {changed}")
                self.before = now

    async def request(self, attempt: int, method: str, data: dict[str, Any]) -> dict[str, Any] | None:
        assert self.client is not None
        try:
            return await asyncio.wait_for(self.client.request(method, data), STEP_S)
        except TimeoutError:
            self.fail(attempt, f"{method} got no reply within {STEP_S:g} s")
        except Exception as error:  # the connection ended: a crash
            self.fail(
                attempt, f"{method}: {type(error).__name__}: {error}; stderr {self.client.stderr[-300:]!r}"
            )
        return None


async def _mode_row(context: Context, name: str, mode: str) -> Outcome:
    rng = random.Random(f"{context.seed}-{name}")
    lay = build_layout(context.workdir / name)
    async with _Run(context, name, lay) as run:
        for attempt in range(context.size(FULL_ATTEMPTS)):
            label, path = corpus_entry(rng, lay)
            tool = rng.choices(TOOLS, TOOL_WEIGHTS)[0]
            method, data = call(tool, path, mode)
            reply = await run.request(attempt, method, data)
            if reply is None:
                break
            run.outcome.runs += 1
            code, text = _answer(reply)
            shown = f"{tool} {path[:120]!r} in {mode} ({label})"
            allowed = expected_codes(label, tool, mode)
            if allowed is not None and code not in allowed:
                run.fail(
                    attempt, f"{shown} answered {code or 'success'}, not {' or '.join(map(str, allowed))}"
                )
            elif allowed is None and code == "path_outside_root":
                run.fail(attempt, f"{shown} stays inside the root but got path_outside_root")
            await run.check_outside(attempt, shown, tool, code, text, may_read=label == MULTI_LINK)
    return run.outcome


async def _standard(context: Context) -> Outcome:
    return await _mode_row(context, "paths.standard", "standard")


async def _read_only(context: Context) -> Outcome:
    return await _mode_row(context, "paths.read-only", "read_only")


FLIPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pairs = [(os.fsencode(a), os.fsencode(b)) for a, b in zip(sys.argv[2::2], sys.argv[3::2])]
deadline = time.monotonic() + float(sys.argv[1])
flips = 0
while time.monotonic() < deadline:
    for a, b in pairs:
        if libc.renameat2(-100, a, -100, b, 2) != 0:  # -100 AT_FDCWD, 2 RENAME_EXCHANGE
            sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
    flips += 1
print(flips)
"""
"""Exchanges each pair of names (argv after the duration) atomically, over and over, until the deadline."""

RACE_CALLS: tuple[tuple[str, str], ...] = (
    ("read_file", "flip/f.txt"),
    ("write_file", "flip/f.txt"),
    ("edit_file", "flip/f.txt"),
    ("write_file+dirs", "flip/made/new.txt"),
    ("list_dir", "flip"),
    ("export", "flip/f.txt"),
    ("read_file", "flipf"),
    ("write_file", "flipf"),
    ("edit_file", "flipf"),
    ("export", "flipf"),
    ("exec_cwd", "flip"),
)


async def _race(context: Context) -> Outcome:
    name = "paths.race"
    rng = random.Random(f"{context.seed}-{name}")
    lay = build_layout(context.workdir / name)
    (lay.outside / "race").mkdir()
    (lay.outside / "race" / "f.txt").write_text(f"outside {lay.token}\n")
    (lay.root / "flip").mkdir()
    (lay.root / "flip" / "f.txt").write_text("inside\n")
    (lay.root / "flip.alt").symlink_to(lay.outside / "race")
    (lay.root / "flipf").write_text("inside\n")
    (lay.root / "flipf.alt").symlink_to(lay.outside / "race" / "f.txt")
    attempts = context.size(FULL_RACE_ATTEMPTS)
    flipper = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FLIPPER,
        str(STEP_S + attempts * 0.05),
        *(str(lay.root / n) for n in ("flip", "flip.alt", "flipf", "flipf.alt")),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=lay.cwd,
    )
    counts: dict[str, int] = {}
    run = _Run(context, name, lay)
    try:
        async with run:
            for attempt in range(attempts):
                tool, path = rng.choice(RACE_CALLS)
                reply = await run.request(attempt, *call(tool, path, "standard"))
                if reply is None:
                    break
                run.outcome.runs += 1
                code, text = _answer(reply)
                kind = "changed" if "changed while it was opened" in text else (code or "ok")
                counts[kind] = counts.get(kind, 0) + 1
                shown = f"{tool} {path!r} during the flips"
                # Inside states: ok (or is_error results); outside states: path_outside_root. A
                # listing or an edit may also meet the directory half-way (not_found, invalid_request).
                if code not in (None, "path_outside_root", "not_found", "invalid_request"):
                    run.fail(attempt, f"{shown} answered {text[:300]}")
                await run.check_outside(attempt, shown, tool, code, text)
    finally:
        flipper.kill()
        _, errors = await flipper.communicate()
    if flipper.returncode not in (0, -9):
        run.fail(attempts, f"the flipper failed: {errors.decode(errors='replace')[-300:]}")
    context.log(f"{name}: outcomes {dict(sorted(counts.items()))}")
    return run.outcome


def _leak_checked(row: Callable[[Context], Any]) -> Callable[[Context], Any]:
    """`row`, then a check that no process of its work directory is left (and their removal if any are)."""

    async def run(context: Context) -> Outcome:
        outcome: Outcome = await row(context)
        deadline = time.monotonic() + STEP_S
        while leftover_processes(context.workdir) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = reap_leftovers(context.workdir)
        if left:
            outcome.failures.append(f"processes left behind: {left}; rerun: {context.rerun('paths.*')}")
        return outcome

    return run


CAMPAIGNS = [
    Campaign("paths.standard", _leak_checked(_standard)),
    Campaign("paths.read-only", _leak_checked(_read_only)),
    Campaign("paths.race", _leak_checked(_race)),
]
