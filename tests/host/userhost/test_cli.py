"""`wuu-userhost serve` as a real process: its help, the flags it refuses (exit 2, naming the flag or the
startup error code, nothing written), `WUU_HOME`, a clean stop on SIGTERM with JSON-line logs on either
event loop (uvloop's where it can be imported, asyncio's when asked or when it cannot), the end
of a stdio-only host after EOF once its admitted work is done, one host per home, user space and product
domain (a second exits 2 naming the first), and private modes under the home whatever the umask.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE, ROOT, until
from tests.host.userhost.personal.conftest import attachment, main_session, result, send
from wuu.generated.models import AgentsHistorySearchParams
from wuu.host.userhost.client import UserHostClient

COMMAND = [str(Path(sys.executable).parent / "wuu-userhost"), "serve"]
BINDING = ["--user-space", "local", "--product-domain", "personal"]
FLAGS = [
    "--user-space",
    "--product-domain",
    "--composition-profile",
    "--config",
    "--model-config",
    "--execution-config",
    "--execution-profile",
    "--isolation",
    "--home",
    "--stdio",
    "--listen",
    "--grpc",
    "--loop",
]


def everything_under(home: Path) -> list[str]:
    found = []
    for root, dirs, files in os.walk(home):
        found += [os.path.join(root, name) for name in [*dirs, *files]]
    return found


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command to its end (it must end by itself: it cannot start)."""
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=DEADLINE, env=env, stdin=subprocess.DEVNULL
    )


def test_help_names_every_flag() -> None:
    done = run(["--help"])
    assert done.returncode == 0, done.stderr
    for flag in FLAGS:
        assert flag in done.stdout, flag


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--home", "{home}"], "--stdio"),
        (["--home", "relative/home", "--stdio"], "--home"),
        (["--home", "{home}", "--listen", "unix:relative.sock"], "--listen"),
        (["--home", "{home}", "--listen", "{run}/userhost.sock"], "--listen"),
        (["--home", "{home}", "--listen", "unix:"], "--listen"),
        (["--home", "{home}", "--grpc", "0.0.0.0:50051"], "--grpc"),
        (["--home", "{home}", "--grpc", "localhost:50051"], "--grpc"),
        (["--home", "{home}", "--grpc", "127.0.0.1:99999"], "--grpc"),
        (["--home", "{home}", "--grpc", "unix:relative.sock"], "--grpc"),
        (["--home", "{home}", "--stdio", "--composition-profile", "nope"], "--composition-profile"),
        (["--home", "{home}", "--stdio", "--isolation", "sandbox"], "unknown_isolation_mode"),
        (["--home", "{home}", "--stdio", "--isolation", "verified_host"], "user_host_isolation_required"),
        (["--home", "{home}", "--stdio", "--user-space", "../x"], "user_host_binding_required"),
        (["--home", "{home}", "--stdio", "--product-domain", "Personal"], "user_host_binding_required"),
    ],
    ids=[
        "no-transport",
        "relative-home",
        "relative-listen",
        "unprefixed-listen",
        "empty-listen",
        "wildcard-grpc",
        "hostname-grpc",
        "port-grpc",
        "relative-grpc",
        "unknown-profile",
        "unknown-isolation",
        "verified-host",
        "bad-user-space",
        "bad-product-domain",
    ],
)
def test_a_host_that_cannot_start_exits_2_naming_why_and_writes_nothing(
    home: Path, run_dir: Path, args: list[str], named: str
) -> None:
    # A later flag wins over BINDING's: the binding cases override it.
    done = run([*BINDING, *(arg.format(home=home, run=run_dir) for arg in args)])
    assert done.returncode == 2, done.stderr
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert everything_under(home) == []
    assert list(run_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--model-config", "{missing}"], "--model-config: {missing}: [Errno 2]"),
        (["--model-config", "{list}"], "a model configuration is a JSON object, not list"),
        (["--model-config", "{unknown_kind}"], "kind: 'gpt' is neither 'stand_in' nor 'openai_chat'"),
        (["--execution-config", "{profiles}", "--execution-profile", "nope"], "no profile is named 'nope'"),
        (["--execution-config", "{missing}"], "--execution-config: {missing}: no such configuration file"),
        (["--execution-profile", "local"], "--execution-profile: needs --execution-config"),
    ],
    ids=[
        "missing-model-config",
        "model-config-not-an-object",
        "unknown-model-kind",
        "unknown-execution-profile",
        "missing-execution-config",
        "profile-without-config",
    ],
)
def test_a_bad_personal_configuration_exits_2_naming_it(
    home: Path, run_dir: Path, tmp_path: Path, flags: list[str], named: str
) -> None:
    files = {
        "missing": tmp_path / "missing.json",
        "list": tmp_path / "list.json",
        "unknown_kind": tmp_path / "kind.json",
        "profiles": tmp_path / "profiles.json",
    }
    files["list"].write_text("[1]")
    files["unknown_kind"].write_text('{"kind": "gpt"}')
    files["profiles"].write_text('{"execution_environments": {"profiles": {}}}')
    given = [flag.format(**files) for flag in flags]
    done = run([*BINDING, "--home", str(home), "--stdio", "--composition-profile", "personal", *given])
    assert done.returncode == 2, done.stderr
    assert named.format(**files) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert everything_under(home) == []


def test_personal_flags_need_the_personal_composition(home: Path, tmp_path: Path) -> None:
    done = run([*BINDING, "--home", str(home), "--stdio", "--model-config", str(tmp_path / "model.json")])
    assert done.returncode == 2, done.stderr
    assert "--model-config: configures the personal composition profile, which is not loaded" in done.stderr
    assert everything_under(home) == []


def test_a_missing_binding_flag_exits_2_naming_it(home: Path) -> None:
    for missing, given in [
        ("--user-space", ["--product-domain", "personal"]),
        ("--product-domain", ["--user-space", "local"]),
    ]:
        done = run([*given, "--home", str(home), "--stdio"])
        assert done.returncode == 2 and missing in done.stderr, done.stderr
    assert everything_under(home) == []


def test_a_relative_wuu_home_exits_2_naming_it(run_dir: Path) -> None:
    done = run([*BINDING, "--stdio"], env={**os.environ, "WUU_HOME": "relative/home"})
    assert done.returncode == 2 and "WUU_HOME" in done.stderr, done.stderr


async def start(args: list[str], env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *COMMAND, *args, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env
    )


async def listening(process: asyncio.subprocess.Process, path: Path) -> None:
    def ready() -> bool:
        assert process.returncode is None, f"the host ended with {process.returncode}"
        return path.exists()

    await until(ready, f"the host to listen on {path}")


def without_uvloop(tmp_path: Path) -> dict[str, str]:
    """An environment in which `import uvloop` fails, as in an interpreter without it."""
    shadow = tmp_path / "shadow" / "uvloop"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("no uvloop here")\n')
    return {**os.environ, "PYTHONPATH": str(shadow.parent)}


@pytest.mark.parametrize(
    ("loop", "uvloop", "runs_on"),
    [([], True, "uvloop"), (["--loop", "asyncio"], True, "asyncio"), ([], False, "asyncio")],
    ids=["auto", "asyncio", "auto-without-uvloop"],
)
async def test_sigterm_stops_a_listening_host_cleanly_with_json_logs(
    tmp_path: Path, run_dir: Path, loop: list[str], uvloop: bool, runs_on: str
) -> None:
    home, path = tmp_path / "wuu-home", run_dir / "userhost.sock"
    env = os.environ if uvloop else without_uvloop(tmp_path)
    # No --home: WUU_HOME is the home.
    process = await start([*BINDING, *loop, "--listen", f"unix:{path}"], env={**env, "WUU_HOME": str(home)})
    try:
        await listening(process, path)
        client = await UserHostClient.connect_unix(path)
        init = await client.initialize()
        assert (init.user_space_id, init.product_domain) == ("local", "personal")
        assert init.user_host_isolation.to_wire() == {"memory": "logical", "host": "unverified"}
        await client.close()
        assert (home / "user-spaces" / "local" / "personal" / "state").is_dir()
        process.send_signal(signal.SIGTERM)
        assert process.stderr is not None
        stderr = await asyncio.wait_for(process.stderr.read(), DEADLINE)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert not path.exists()
    entries = [json.loads(line) for line in stderr.decode().splitlines()]
    assert entries, "the host logged nothing"
    for entry in entries:
        assert isinstance(entry["level"], str) and isinstance(entry["message"], str), entry
    messages = [entry["message"] for entry in entries]
    assert "user host started" in messages and "listening" in messages and "user host closed" in messages
    assert entries[messages.index("user host started")]["event_loop"] == runs_on


def test_loop_uvloop_where_it_cannot_be_imported_exits_2_naming_the_flag(home: Path, tmp_path: Path) -> None:
    done = run([*BINDING, "--home", str(home), "--stdio", "--loop", "uvloop"], env=without_uvloop(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "--loop: uvloop cannot be imported (no uvloop here)" in done.stderr, done.stderr
    assert everything_under(home) == []


async def test_a_live_host_on_the_socket_makes_the_second_exit_2(home: Path, run_dir: Path) -> None:
    path = run_dir / "userhost.sock"
    process = await start([*BINDING, "--home", str(home), "--listen", f"unix:{path}"])
    try:
        await listening(process, path)
        # Another home: the socket, not the space, is what the second host cannot have.
        other = await start([*BINDING, "--home", str(home.parent / "other"), "--listen", f"unix:{path}"])
        assert other.stderr is not None
        stderr = await asyncio.wait_for(other.stderr.read(), DEADLINE)
        assert await asyncio.wait_for(other.wait(), DEADLINE) == 2
        assert b"--listen" in stderr and b"already answers" in stderr
        assert path.exists() and process.returncode is None  # the first host is untouched
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0


async def test_a_stdio_host_answers_and_exits_0_after_eof(home: Path) -> None:
    client = await UserHostClient.spawn([*COMMAND, *BINDING, "--home", str(home), "--stdio"])
    try:
        init = await client.initialize()
        assert (init.user_space_id, init.graph_generation, init.plugins) == ("local", 1, [])
    finally:
        await client.close()
    assert client.process is not None and client.process.returncode == 0


async def test_a_stdio_host_ends_after_eof_once_its_admitted_work_is_done(home: Path) -> None:
    # `wuu-userhost` loads no plugin that admits work: the test host process serves stdio the same way.
    client = await UserHostClient.spawn(
        [sys.executable, "-m", "tests.host.userhost.fixtures.host_with_test_plugin", str(home), "--stdio"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    done = home / "user-spaces" / "local" / "personal" / "state" / "done"
    assert client.process is not None
    try:
        await client.initialize()
        search = AgentsHistorySearchParams(session_id="main", query="admit:done:1")
        await client.plugin_call("wuu.test", "agents.history.search", search)
        await client.close()  # EOF; waits for the process
    finally:
        if client.process.returncode is None:
            client.process.kill()
            await client.process.wait()
    assert client.process.returncode == 0
    assert done.read_text() == "done"  # the process ended only after the work had written it


async def test_a_second_host_on_the_same_home_exits_2_naming_the_first(home: Path, run_dir: Path) -> None:
    path, grpc = run_dir / "userhost.sock", run_dir / "grpc.sock"
    transports = ["--listen", f"unix:{path}", "--grpc", f"unix:{grpc}", "--http", "127.0.0.1:0"]
    process = await start([*BINDING, "--composition-profile", "personal", "--home", str(home), *transports])
    record = home / "user-spaces" / "local" / "personal" / "state" / "authority.json"
    try:
        await listening(process, path)
        await until(lambda: record.exists() and "http" in record.read_text(), "the host to announce itself")
        # Before the fix the second host started, cleaned the first's staging and served: with stdio alone and
        # its stdin at EOF, it then exited 0.
        second = subprocess.run(
            [*COMMAND, *BINDING, "--composition-profile", "personal", "--home", str(home), "--stdio"],
            input="",
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert second.returncode == 2, second.stderr
        assert "user_host_already_running" in second.stderr and "Traceback" not in second.stderr
        named = re.search(r"a running user host \(pid (\d+); transports: ([^)]*)\)", second.stderr)
        assert named is not None, second.stderr
        assert int(named[1]) == process.pid
        assert re.fullmatch(rf"unix:{path}, grpc unix:{grpc}, http 127\.0\.0\.1:\d+", named[2]), named[2]
        client = await UserHostClient.connect_unix(path)  # the first still serves
        try:
            assert (await client.initialize()).user_space_id == "local"
            assert await main_session(client)
        finally:
            await client.close()
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert not record.exists()  # the first stopped: the space is free
    done = subprocess.run(
        [*COMMAND, *BINDING, "--home", str(home), "--stdio"], input="", capture_output=True, timeout=DEADLINE
    )
    assert done.returncode == 0, done.stderr


def modes_under(home: Path) -> dict[str, str]:
    """Every directory and file from `home` down (the home included), by relative path: `dir` or `file` and
    its mode."""
    found = {}
    for name in [str(home), *everything_under(home)]:
        info = os.stat(name)
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
        found[os.path.relpath(name, home)] = f"{kind} {stat.S_IMODE(info.st_mode):04o}"
    return found


async def test_under_umask_000_every_directory_is_0700_and_every_file_0600(
    tmp_path: Path, run_dir: Path
) -> None:
    home, path = tmp_path / "wuu-home", run_dir / "userhost.sock"  # no home yet: the host creates it
    process = await asyncio.create_subprocess_exec(
        *COMMAND,
        *(*BINDING, "--composition-profile", "personal", "--home", str(home), "--listen", f"unix:{path}"),
        stdin=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        umask=0,
    )
    token = [str(Path(COMMAND[0])), "token", "create", "--name", "phone", "--home", str(home), *BINDING]
    try:
        await listening(process, path)
        created = subprocess.run(token, capture_output=True, text=True, timeout=DEADLINE, umask=0)
        assert created.returncode == 0, created.stderr
        client = await UserHostClient.connect_unix(path)
        try:
            await client.initialize()
            user_input = {"client_input_id": "c1", "request_id": "r1", "text": "with a file"}
            user_input["attachments"] = [attachment(b"private bytes")]
            assert result(await send(client, await main_session(client), user_input))["receipt"]["accepted"]
        finally:
            await client.close()
        running = modes_under(home)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    space = "user-spaces/local/personal"
    for name in ("personal.sqlite", "personal.sqlite-wal", "personal.sqlite-shm", "http-tokens.json"):
        assert f"{space}/state/{name}" in running, sorted(running)
    assert any(name.startswith(f"{space}/files/attachments/att_") for name in running), sorted(running)
    for found in (running, modes_under(home)):
        assert {name: mode for name, mode in found.items() if mode not in ("dir 0700", "file 0600")} == {}


def test_an_unknown_authorization_provider_exits_2_naming_the_flag(home: Path) -> None:
    given = ["--composition-profile", "personal", "--authorization", "saved-owner"]
    done = run([*BINDING, "--home", str(home), "--stdio", *given])
    assert done.returncode == 2 and "--authorization" in done.stderr and "saved-owner" in done.stderr, (
        done.stderr
    )
    assert everything_under(home) == []
    done = run([*BINDING, "--home", str(home), "--stdio", "--authorization", "none"])
    assert done.returncode == 2, done.stderr
    assert "--authorization: configures the personal composition profile, which is not loaded" in done.stderr
