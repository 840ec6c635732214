"""The Landlock command sandbox, against the real kernel: real processes, real files, real EACCES."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from wuu.generated.models import PermissionMode
from wuu.worker.native import confine, landlock
from wuu.worker.native.sandbox import MIN_ABI, Sandbox, SandboxPolicy, SandboxUnavailable, sandbox_abi

DEADLINE = 30.0

requires_landlock = pytest.mark.skipif(
    sandbox_abi() < MIN_ABI,
    reason=f"needs Landlock ABI {MIN_ABI}+ (ABI {sandbox_abi()}; {landlock.unavailable_reason() or 'too old'})",
)


@pytest.fixture(autouse=True, params=["helper", "fork"])
def entry(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How each command enters its domain: the compiled helper, or a fork where it was not built."""
    if request.param == "fork":
        monkeypatch.setattr(confine, "HELPER", Path("/nonexistent/wuu-confine"))
    elif confine.helper() is None:
        pytest.skip("the helper is not built (test_confine.py says why)")
    return str(request.param)


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


async def run(script: str, sandbox: Sandbox, *, close_fds: bool = True) -> Result:
    """Run `sh -c script` through the sandbox's spawner, waiting at most DEADLINE seconds."""
    process = await sandbox.spawner.popen(
        ["sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=close_fds,
    )
    try:
        stdout, stderr = await asyncio.to_thread(process.communicate, timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        process.kill()
        await asyncio.to_thread(process.wait)
        raise
    assert process.returncode is not None
    return Result(process.returncode, stdout.decode(), stderr.decode())


def ruleset_fds() -> set[int]:
    """This process's open Landlock ruleset fds."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if "landlock-ruleset" in os.readlink(f"/proc/self/fd/{name}"):
                found.add(int(name))
        except FileNotFoundError:
            continue  # The directory fd listdir used, closed by now.
    return found


@dataclass(frozen=True)
class Dirs:
    root: Path
    private_tmp: Path
    outside: Path


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    made = Dirs(tmp_path / "root", tmp_path / "private-tmp", tmp_path / "outside")
    for path in (made.root, made.private_tmp, made.outside):
        path.mkdir()
    return made


@pytest.fixture
def read_only() -> Iterator[Sandbox]:
    sandbox = Sandbox(SandboxPolicy(PermissionMode.READ_ONLY, ()))
    yield sandbox
    sandbox.close()


@pytest.fixture
def standard(dirs: Dirs) -> Iterator[Sandbox]:
    sandbox = Sandbox(SandboxPolicy(PermissionMode.STANDARD, (dirs.root, dirs.private_tmp)))
    yield sandbox
    sandbox.close()


@requires_landlock
async def test_read_only_refuses_a_write(read_only: Sandbox, dirs: Dirs) -> None:
    target = dirs.outside / "file"
    result = await run(f"echo x > '{target}'", read_only)
    assert result.returncode != 0
    assert "Permission denied" in result.stderr
    assert not target.exists()


@requires_landlock
@pytest.mark.parametrize(
    "script",
    [": > file", "echo more >> file", "rm file", "mkdir made", "ln -s file link", "mv file moved"],
    ids=["truncate", "append", "remove", "mkdir", "symlink", "rename"],
)
async def test_read_only_refuses_changes_to_existing_files(
    read_only: Sandbox, dirs: Dirs, script: str
) -> None:
    (dirs.outside / "file").write_text("kept\n")
    result = await run(f"cd '{dirs.outside}' && {script}", read_only)
    assert result.returncode != 0
    assert "Permission denied" in result.stderr or "Operation not permitted" in result.stderr
    assert sorted(path.name for path in dirs.outside.iterdir()) == ["file"]
    assert (dirs.outside / "file").read_text() == "kept\n"


@requires_landlock
async def test_read_only_reads_executes_and_writes_devices(read_only: Sandbox, dirs: Dirs) -> None:
    (dirs.outside / "file").write_text("content\n")
    script = (
        f"cat '{dirs.outside}/file' && echo hi > /dev/null && echo err > /dev/stderr"
        " && head -c 3 /dev/zero | wc -c"
    )
    result = await run(script, read_only)
    assert result == Result(0, "content\n3\n", "err\n")


@requires_landlock
async def test_standard_writes_beneath_the_root(standard: Sandbox, dirs: Dirs) -> None:
    result = await run(
        f"cd '{dirs.root}' && mkdir -p a/b && echo inside > a/b/file && mv a/b/file moved", standard
    )
    assert result == Result(0, "", "")
    assert (dirs.root / "moved").read_text() == "inside\n"


@requires_landlock
async def test_standard_writes_the_private_temp_dir(standard: Sandbox, dirs: Dirs) -> None:
    result = await run(f"echo scratch > '{dirs.private_tmp}/file'", standard)
    assert result == Result(0, "", "")
    assert (dirs.private_tmp / "file").read_text() == "scratch\n"


@requires_landlock
async def test_standard_refuses_a_write_outside(standard: Sandbox, dirs: Dirs) -> None:
    target = dirs.outside / "file"
    result = await run(f"echo x > '{target}'", standard)
    assert result.returncode != 0
    assert "Permission denied" in result.stderr
    assert not target.exists()


@requires_landlock
async def test_standard_refuses_moving_a_file_out_of_the_root(standard: Sandbox, dirs: Dirs) -> None:
    (dirs.root / "file").write_text("stays\n")
    result = await run(f"mv '{dirs.root}/file' '{dirs.outside}/file'", standard)
    assert result.returncode != 0
    assert (dirs.root / "file").read_text() == "stays\n"
    assert not (dirs.outside / "file").exists()


@requires_landlock
async def test_a_grandchild_is_confined_too(standard: Sandbox, dirs: Dirs) -> None:
    target = dirs.outside / "file"
    result = await run(f"sh -c \"echo x > '{target}'\"", standard)
    assert result.returncode != 0
    assert "Permission denied" in result.stderr
    assert not target.exists()


@requires_landlock
async def test_the_ruleset_fd_does_not_reach_the_command(dirs: Dirs, entry: str) -> None:
    before = ruleset_fds()
    sandbox = Sandbox(SandboxPolicy(PermissionMode.STANDARD, (dirs.root,)))
    try:
        (fd,) = ruleset_fds() - before
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        # A fork keeps it out by close-on-exec even when subprocess closes nothing; the helper, which is
        # passed it, closes it itself.
        result = await run("ls -l /proc/$$/fd", sandbox, close_fds=entry == "helper")
    finally:
        sandbox.close()
    assert result.returncode == 0, result.stderr
    assert "landlock" not in result.stdout
    assert f" {fd} -> " not in result.stdout
    assert " 1 -> pipe:" in result.stdout  # The listing is real.


@requires_landlock
async def test_a_closed_sandbox_fails_closed(dirs: Dirs) -> None:
    sandbox = Sandbox(SandboxPolicy(PermissionMode.READ_ONLY, ()))
    sandbox.close()
    sandbox.close()  # Idempotent.
    with pytest.raises(subprocess.SubprocessError):
        await run(f"echo ran > '{dirs.outside}/ran'", sandbox)
    assert not (dirs.outside / "ran").exists()


@requires_landlock
async def test_the_worker_itself_stays_unconfined(read_only: Sandbox, dirs: Dirs) -> None:
    assert (await run("true", read_only)).returncode == 0
    (dirs.outside / "file").write_text("parent\n")
    assert (dirs.outside / "file").read_text() == "parent\n"


@requires_landlock
async def test_one_sandbox_serves_concurrent_spawns(standard: Sandbox, dirs: Dirs) -> None:
    scripts = [f"echo {n} > '{dirs.root}/{n}'; echo {n} > '{dirs.outside}/{n}'" for n in range(8)]
    results = await asyncio.gather(*(run(script, standard) for script in scripts))
    assert all(result.returncode != 0 for result in results)
    assert sorted(path.name for path in dirs.root.iterdir()) == [str(n) for n in range(8)]
    assert list(dirs.outside.iterdir()) == []


@pytest.mark.parametrize("abi", [1, 2])
def test_an_old_abi_is_unavailable(monkeypatch: pytest.MonkeyPatch, abi: int) -> None:
    monkeypatch.setattr(landlock, "abi_version", lambda: abi)
    with pytest.raises(SandboxUnavailable, match=f"Landlock ABI {abi} is too old: .* ABI 3 or later"):
        Sandbox(SandboxPolicy(PermissionMode.READ_ONLY, ()))


def test_no_landlock_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(landlock, "abi_version", lambda: 0)
    with pytest.raises(SandboxUnavailable, match="Landlock is unavailable"):
        Sandbox(SandboxPolicy(PermissionMode.STANDARD, (Path("/"),)))


@requires_landlock
def test_a_missing_writable_dir_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="No such file or directory"):
        Sandbox(SandboxPolicy(PermissionMode.STANDARD, (tmp_path / "missing",)))


@pytest.mark.parametrize(
    ("mode", "writable", "message"),
    [
        (PermissionMode.UNCONFINED, (), "without a sandbox"),
        (PermissionMode.READ_ONLY, (Path("/tmp"),), "no writable paths"),
        (PermissionMode.STANDARD, (Path("relative"),), "must be absolute: relative"),
    ],
)
def test_policies_that_make_no_sense_are_refused(
    mode: PermissionMode, writable: tuple[Path, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SandboxPolicy(mode, writable)


def test_each_abi_handles_all_of_its_filesystem_rights() -> None:
    assert landlock.handled_access_fs(0) == 0
    assert landlock.handled_access_fs(1) == (1 << 13) - 1
    assert landlock.handled_access_fs(2) == (1 << 14) - 1
    assert landlock.handled_access_fs(3) == landlock.handled_access_fs(4) == (1 << 15) - 1
    assert landlock.handled_access_fs(5) == landlock.handled_access_fs(7) == landlock.ALL_ACCESS_FS


def test_scopes_come_with_abi_6() -> None:
    assert landlock.handled_scopes(0) == landlock.handled_scopes(5) == 0
    both = landlock.Scope.ABSTRACT_UNIX_SOCKET | landlock.Scope.SIGNAL
    assert landlock.handled_scopes(6) == landlock.handled_scopes(7) == both


@pytest.mark.skipif(sandbox_abi() < 6, reason=f"needs Landlock ABI 6+ (ABI {sandbox_abi()})")
async def test_below_abi_6_the_sandbox_confines_writes_only(
    monkeypatch: pytest.MonkeyPatch, dirs: Dirs
) -> None:
    outsider = subprocess.Popen(["sleep", "1000"])
    try:
        scoped = Sandbox(SandboxPolicy(PermissionMode.STANDARD, (dirs.root,)))
        monkeypatch.setattr(landlock, "abi_version", lambda: 5)
        unscoped = Sandbox(SandboxPolicy(PermissionMode.STANDARD, (dirs.root,)))
        try:
            script = f"kill -0 {outsider.pid} && echo signalled; echo x > '{dirs.outside}/file'"
            below = await run(script, unscoped)
            above = await run(script, scoped)
        finally:
            scoped.close()
            unscoped.close()
    finally:
        outsider.kill()
        outsider.wait()
    assert below.stdout == "signalled\n" and "Permission denied" in below.stderr
    assert above.stdout == "" and "Operation not permitted" in above.stderr
    assert not (dirs.outside / "file").exists()


@requires_landlock
async def test_no_tcp_refuses_binding_and_connecting_but_not_udp(dirs: Dirs) -> None:
    if sandbox_abi() < landlock.FIRST_NETWORK_ABI:
        pytest.skip(f"Landlock ABI {sandbox_abi()} has no network rules")
    policy = SandboxPolicy(PermissionMode.STANDARD, (dirs.root, dirs.private_tmp), no_tcp=True)
    sandbox = Sandbox(policy)
    try:
        probes = (
            "import socket; socket.socket().bind(('127.0.0.1', 0))",
            "import socket; socket.socket().connect(('127.0.0.1', 9))",
        )
        for probe in probes:
            result = await run(f'python3 -c "{probe}"', sandbox)
            assert result.returncode == 1 and "PermissionError" in result.stderr, (probe, result)
        udp = "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(('127.0.0.1', 0))"
        assert (await run(f'python3 -c "{udp}"', sandbox)).returncode == 0
    finally:
        sandbox.close()


def test_no_tcp_needs_the_network_abi() -> None:
    with pytest.raises(OSError, match="no_tcp needs ABI 4"):
        landlock.create_ruleset({}, landlock.FIRST_NETWORK_ABI - 1, no_tcp=True)
