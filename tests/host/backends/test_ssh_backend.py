"""The ssh backend against a real OpenSSH server: the conformance suite, host keys, the conversation's
subdirectory and its retention, reconnects, and a killed worker.

Needs a server from `tools/services/sshd.sh start DIR` and `WUU_SSH_TEST_DIR=DIR` (its service.json
describes it), and asyncssh. Without them the tests skip, saying why; with WUU_REQUIRE_SSH=1 (CI) they
fail instead. Every test uses a workspace of its own beneath the server's, and conversation ids of its
own, so they run in parallel and check (and clean up) only their own directories.

The "remote machine" is this machine through sshd, so the tests look at the server's workspace
directly; DIR/host-only is the one place that differs between the two sides (see sshd.sh).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    alive,
    binding,
    code,
    passes_every_case,
    request_ok,
    tool_cases_here,
    tool_request,
    until,
)
from wuu.generated.models import ExecutionProfile
from wuu.host.adapter import initialize_interceptor
from wuu.host.errors import ProfileError, SshUnavailable
from wuu.host.profiles import Profile, parse
from wuu.worker.client import ConnectionLost, WorkerClient

REQUIRED = os.environ.get("WUU_REQUIRE_SSH") == "1"
SERVICE_DIR = os.environ.get("WUU_SSH_TEST_DIR")
DEADLINE = 30.0
"""Seconds a request or a shutdown through the backend may take (more than tests.helpers.DEADLINE: each
connection logs in over ssh)."""
IDLE_MARGIN = 20.0
"""Seconds a worker may take, past its idle timeout, to exit and clean up."""


def _problem(reason: str) -> None:
    """Skip the test for `reason`, or fail it with WUU_REQUIRE_SSH=1."""
    if REQUIRED:
        pytest.fail(f"WUU_REQUIRE_SSH=1, but {reason}")
    pytest.skip(reason)


@dataclass(frozen=True)
class Service:
    """The server of tools/services/sshd.sh."""

    directory: Path
    profile: dict[str, Any]
    host_only: Path
    user: str
    port: int

    @property
    def workspace(self) -> Path:
        """The server's workspace, beneath which every test makes its own."""
        return Path(self.profile["workspace"])


def _unavailable() -> str | Service:
    """The server, or why these tests cannot run here."""
    try:
        import asyncssh  # noqa: F401
    except ImportError:
        return "asyncssh is not installed (pip install asyncssh)"
    if not SERVICE_DIR:
        return "WUU_SSH_TEST_DIR is unset (start a server with `tools/services/sshd.sh start DIR`, then set it to DIR)"
    description = Path(SERVICE_DIR) / "service.json"
    try:
        found = json.loads(description.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return (
            f"{description} is not readable ({error}); tools/services/sshd.sh start {SERVICE_DIR} writes it"
        )
    service = Service(
        Path(SERVICE_DIR), found["profile"], Path(found["host_only"]), found["user"], int(found["port"])
    )
    try:
        socket.create_connection(("127.0.0.1", service.port), 5).close()
    except OSError as error:
        return f"no SSH server answers on 127.0.0.1:{service.port} ({error}); is sshd.sh running?"
    return service


@pytest.fixture(scope="module")
def service() -> Service:
    """The server, or a skip (a failure with WUU_REQUIRE_SSH=1) saying what is missing."""
    found = _unavailable()
    if isinstance(found, str):
        _problem(found)
    assert isinstance(found, Service)
    return found


@pytest.fixture
def backend() -> Any:
    """The backend module (asyncssh is an optional dependency)."""
    try:
        from wuu.host.backends import ssh
    except ImportError as error:
        _problem(f"the ssh backend cannot be imported: {error}")
    return ssh


class Profiles:
    """A configuration file of ssh profiles for one test, all with one workspace of the test's own."""

    def __init__(self, service: Service, directory: Path) -> None:
        self.service = service
        self.path = directory / "config.json"
        self.workspace = service.workspace / f"t-{uuid.uuid4().hex[:10]}"
        self.profiles: dict[str, dict[str, Any]] = {}

    def add(self, name: str, **settings: Any) -> str:
        """Add profile `name`: the server's profile with the test's workspace and `settings`; its name."""
        self.profiles[name] = {**self.service.profile, "workspace": str(self.workspace), **settings}
        document = {"execution_environments": {"profiles": self.profiles}}
        self.path.write_text(json.dumps(document), encoding="utf-8")
        return name

    def profile(self, name: str) -> Profile[ExecutionProfile]:
        """Profile `name` as the configuration file gives it."""
        document = json.loads(self.path.read_text(encoding="utf-8"))
        return parse(document, str(self.path)).select(name)

    def command(self, name: str) -> list[str]:
        """The adapter command that serves profile `name`."""
        return [sys.executable, "-m", "wuu.host", "adapter", "--config", str(self.path), "--profile", name]

    async def connect(self, name: str, conversation: str | None = None) -> WorkerClient:
        """A client of a fresh adapter serving profile `name` for `conversation` (None: a fresh one)."""
        env = dict(os.environ)
        env.pop("WUU_CONVERSATION", None)
        if conversation is not None:
            env["WUU_CONVERSATION"] = conversation
        return await WorkerClient.spawn(self.command(name), env=env)

    def subdirectory(self, conversation: str) -> Path:
        """The conversation's subdirectory on the server: its worker's root."""
        return self.workspace / conversation

    def rundir(self, conversation: str) -> Path:
        """The conversation's worker's own directory (socket, log, locks), beside its root."""
        return self.workspace / f".wuu-{conversation}"


@pytest.fixture
def profiles(service: Service, tmp_path: Path) -> Iterator[Profiles]:
    """The test's own profiles; its workers are killed and its workspace removed after it."""
    made = Profiles(service, tmp_path)
    yield made
    # The workers of this test's workspace, by their ids (their socket is in it), then the workspace.
    for pid in processes(str(made.workspace)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(made.workspace, ignore_errors=True)


def server_side(service: Service, path: Path) -> Path:
    """`path` as the server sees it: through the root of sshd's own mount namespace (where DIR/host-only is
    another directory than here)."""
    pid = int((service.directory / "sshd.pid").read_text(encoding="ascii"))
    return Path(f"/proc/{pid}/root") / path.relative_to("/")


def processes(*needles: str) -> list[int]:
    """The pids of this machine's processes whose command line has every one of `needles` as an argument
    or in one (the server is this machine: its processes are ours to see)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if all(any(needle in arg for arg in argv) for needle in needles):
            found.append(int(entry.name))
    return found


def parent(pid: int) -> int | None:
    """The parent of `pid`, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def detached_workers(sock: str) -> tuple[list[int], list[int]]:
    """The detached workers at `sock`: their supervisors (`serve` outlives the worker it forks, to end what a
    killed worker leaves), and the workers themselves, their children."""
    serving = processes(sock, "serve")
    inner = [pid for pid in serving if parent(pid) in serving]
    return [pid for pid in serving if pid not in inner], inner


def commands_in(directory: Path) -> list[int]:
    """The pids of the `sleep 60` commands (the tests' requests in flight) whose cwd is `directory`."""
    found = []
    for pid in processes("sleep", "60"):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cwd").resolve() == directory:
                found.append(pid)
    return found


# --- the binding and the profile's settings (no server needed) ----------------------------------------


def test_only_an_initialize_of_the_workspace_is_bound_to_the_conversation(backend: Any) -> None:
    settings = {"backend": "ssh", "host": "someone@example.org", "workspace": "/srv/ws"}
    profile = parse({"execution_environments": {"profiles": {"p": settings}}}).select("p")
    environment = backend.SshEnvironment(profile, {"WUU_CONVERSATION": "c1"})
    # The adapter's one interceptor: the environment's binding, then the forwarded variables.
    intercept = initialize_interceptor(environment, {"GIT_AUTHOR_NAME": "me"})
    for root in ("/srv/ws", "/srv/ws/", "/srv/./ws"):
        given = {**binding(root), "environment": {"LANG": "C"}}
        expected = {**given, "root": "/srv/ws/c1", "environment": {"GIT_AUTHOR_NAME": "me", "LANG": "C"}}
        assert intercept(given) == expected, root
        assert intercept(given) == intercept(dict(given)), (
            "the same every time: equal re-initializes stay equal"
        )
    # Any other absolute root names a path on the server, and a relative one is the worker's to refuse.
    for root in ("/elsewhere/root", "/srv/ws/c1", "/srv", "relative"):
        assert environment.rewrite_initialize(binding(root)) == binding(root), root


def test_the_conversation_id_comes_from_the_host_or_is_made(backend: Any, tmp_path: Path) -> None:
    settings = {
        "backend": "ssh",
        "host": "someone@example.org",
        "workspace": "/srv/ws",
    }
    document = {
        "execution_environments": {"profiles": {"plain": settings, "kept": {**settings, "persistent": True}}}
    }
    configuration = parse(document)
    plain, kept = configuration.select("plain"), configuration.select("kept")
    given = backend.SshEnvironment(plain, {"WUU_CONVERSATION": "conv-1"})
    assert (given.subdirectory, given.user, given.host) == ("/srv/ws/conv-1", "someone", "example.org")
    assert given.socket == "/srv/ws/.wuu-conv-1/worker.sock"
    made = {backend.SshEnvironment(plain, {}).conversation for _ in range(3)}
    assert len(made) == 3, "a fresh conversation for every connection of a non-persistent profile"
    stable = {backend.SshEnvironment(kept, {}).conversation for _ in range(3)}
    assert len(stable) == 1, "one conversation for a persistent profile: a reconnect finds its worker"
    for bad in ("", "../up", "a/b", ".hidden", "x" * 65):
        with pytest.raises(ProfileError, match="WUU_CONVERSATION"):
            backend.SshEnvironment(plain, {"WUU_CONVERSATION": bad})
    deep = parse(
        {"execution_environments": {"profiles": {"deep": {**settings, "workspace": "/" + "d" * 100}}}}
    ).select("deep")
    with pytest.raises(ProfileError, match="longer than 107 bytes"):
        backend.SshEnvironment(deep, {"WUU_CONVERSATION": "c"})


# --- the conformance suite -----------------------------------------------------------------------


async def test_the_conformance_suite_passes_through_the_ssh_backend(
    service: Service, profiles: Profiles, monkeypatch: pytest.MonkeyPatch, record_property: Any
) -> None:
    # Short-lived workers: each case's worker (and its subdirectory) is gone soon after its case.
    lifetime = 3
    name = profiles.add("conformance", lifetime_seconds=lifetime)
    # The cases' roots go beneath DIR/host-only: paths that exist only on the host's side, like a
    # remote machine's (the worker creates its own at the same paths, on the server's side).
    cases = service.host_only / profiles.workspace.name
    cases.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(cases))
    # Every case is a conversation of its own (the backend makes a fresh id for each connection).
    monkeypatch.delenv("WUU_CONVERSATION", raising=False)
    elapsed = await passes_every_case(
        profiles.command(name), "through ssh", timeout=30, must_run=tool_cases_here()
    )
    record_property("ssh_conformance_seconds", round(elapsed, 1))
    # The suite removed each case's directory on the server too (once the worker that bound it to remove it
    # on exit had idled out), not only its own copy here.
    remote = server_side(service, cases)
    await until(
        lambda: not [entry.name for entry in remote.iterdir() if entry.name.startswith("wuu-conformance-")],
        f"the cases' directories in {cases} on the server to go",
        lifetime + IDLE_MARGIN,
    )
    # Every case's conversation had its subdirectory, removed once its worker's idle timeout passed.
    await until(
        lambda: not any(profiles.workspace.iterdir()),
        f"every conversation's directories in {profiles.workspace} to go",
        lifetime + IDLE_MARGIN,
    )


# --- host keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize("known", ["changed", "unknown"])
async def test_a_host_key_that_is_not_known_is_refused_with_how_to_verify_it(
    service: Service, profiles: Profiles, backend: Any, tmp_path: Path, known: str
) -> None:
    import asyncssh

    known_hosts = tmp_path / "known_hosts"
    if known == "changed":
        other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
        known_hosts.write_text(f"[127.0.0.1]:{service.port} {other}\n", encoding="utf-8")
    else:
        known_hosts.write_text("", encoding="utf-8")
    name = profiles.add("wrong-key", known_hosts_file=str(known_hosts))
    with pytest.raises(SshUnavailable) as refused:
        await backend.SshEnvironment(profiles.profile(name), {"WUU_CONVERSATION": "key"}).start()
    message = str(refused.value)
    assert f"host key of {service.user}@127.0.0.1 port {service.port}" in message, message
    assert f"is not in {known_hosts}" in message and "refused" in message, message
    assert f"ssh -p {service.port} -o UserKnownHostsFile={known_hosts}" in message, message
    assert "check the fingerprint" in message, message

    # Through the adapter: the host gets no worker, and the adapter says why, on stderr.
    client = await profiles.connect(name, "key")
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(client.request("initialize", binding(profiles.workspace)), DEADLINE)
    outcome = await client.close(DEADLINE)
    assert outcome.returncode == 2 and not outcome.killed, outcome
    assert b"wuu-host: profile 'wrong-key': the host key of" in outcome.stderr, outcome.stderr
    assert not profiles.workspace.exists(), "nothing was created on a server that was not verified"


# --- the conversation's subdirectory and retention ----------------------------------------------------


async def test_the_subdirectory_is_the_root_and_is_removed_after_the_idle_timeout(profiles: Profiles) -> None:
    lifetime = 2
    name = profiles.add("ephemeral", lifetime_seconds=lifetime)
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    subdirectory, rundir = profiles.subdirectory(conversation), profiles.rundir(conversation)
    client = await profiles.connect(name, conversation)
    try:
        await request_ok(client, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
        written = await request_ok(
            client,
            "execute",
            tool_request("write_file", mode="unconfined", path="made.txt", content="x"),
            timeout_s=DEADLINE,
        )
        assert not written["is_error"], written
        where = await request_ok(
            client,
            "execute",
            tool_request("exec_command", mode="unconfined", argv=["sh", "-c", "pwd; id -un"]),
            timeout_s=DEADLINE,
        )
        assert where["output"].splitlines() == [str(subdirectory), profiles.service.user], where
    finally:
        outcome = await client.close(DEADLINE)
    assert outcome.clean, outcome
    # The worker's files are beside the root, never in it.
    assert sorted(path.name for path in subdirectory.iterdir()) == ["made.txt"]
    assert (rundir / "worker.sock").is_socket(), "the detached worker waits for a reconnect"
    sock = str(rundir / "worker.sock")
    assert [len(found) for found in detached_workers(sock)] == [1, 1], "one detached worker"
    await until(
        lambda: not subdirectory.exists() and not rundir.exists(),
        "the subdirectory's removal after the idle timeout",
        lifetime + IDLE_MARGIN,
    )
    assert not processes(sock, "serve"), "the worker exited"


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
async def test_no_remote_process_outlives_the_idle_timeout_however_the_adapter_ends(
    profiles: Profiles, signum: signal.Signals
) -> None:
    lifetime = 2
    name = profiles.add("signalled", lifetime_seconds=lifetime)
    conversation = f"s-{uuid.uuid4().hex[:8]}"
    subdirectory, rundir = profiles.subdirectory(conversation), profiles.rundir(conversation)
    sock = str(rundir / "worker.sock")
    client = await profiles.connect(name, conversation)
    await request_ok(client, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
    start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": "op-signal"}
    record = await request_ok(client, "process/start", start, timeout_s=DEADLINE)
    assert processes(sock, "attach") and processes(sock, "serve")
    assert client.process is not None
    client.process.send_signal(signum)
    # SIGTERM and SIGINT shut down like EOF (status 0); SIGKILL drops the SSH connection.
    returncode = await asyncio.wait_for(client.process.wait(), DEADLINE)
    assert returncode == (-signum if signum == signal.SIGKILL else 0), (await client.close()).stderr
    # The relay goes with the connection; the detached worker after its idle timeout, with its process
    # and (without retention) the conversation's directories.
    await until(lambda: not processes(sock, "attach"), "the relay to end", DEADLINE)
    await until(
        lambda: not processes(sock) and not alive(record["pid"]) and not subdirectory.exists(),
        "the detached worker to end after its idle timeout",
        lifetime + IDLE_MARGIN,
    )
    # The run directory goes last, once the worker and its socket are gone.
    await until(lambda: not rundir.exists(), "the run directory's removal", DEADLINE)
    await client.close()


async def test_shared_conversations_share_files_but_not_processes(profiles: Profiles) -> None:
    """One subdirectory for the profile's conversations, a worker each: what one writes the other reads,
    and neither lists, reads or stops the other's process. The subdirectory stays while a worker of either
    runs, and the last one to exit (after its idle timeout) removes it."""
    from wuu.host.backends.conversations import shared_environment

    lifetime = 1
    name = profiles.add("shared", shared=True, lifetime_seconds=lifetime)
    shared = profiles.workspace / shared_environment(profiles.profile(name))
    first, second = (f"{side}-{uuid.uuid4().hex[:8]}" for side in ("a", "b"))
    one = await profiles.connect(name, first)
    other = await profiles.connect(name, second)
    try:
        for client in (one, other):
            await request_ok(client, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
        write = tool_request("write_file", mode="unconfined", path="note.txt", content="from one")
        await request_ok(one, "execute", write, timeout_s=DEADLINE)
        read = tool_request("read_file", mode="unconfined", path="note.txt")
        assert "from one" in (await request_ok(other, "execute", read, timeout_s=DEADLINE))["output"]
        assert (shared / "note.txt").read_text(encoding="utf-8") == "from one"
        start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": "op-one"}
        record = await request_ok(one, "process/start", start, timeout_s=DEADLINE)
        assert (await request_ok(other, "process/list", {}, timeout_s=DEADLINE))["processes"] == []
        for method, data in (("process/get", {"id": record["id"]}), ("process/stop", {"id": record["id"]})):
            reply = await asyncio.wait_for(other.request(method, data), DEADLINE)
            assert code(reply) == "not_found", reply
        assert alive(record["pid"])
        assert (await one.close(DEADLINE)).clean
        # The first worker exits after its idle timeout, with its process; the second keeps the files.
        await until(
            lambda: not processes(str(profiles.rundir(first))) and not alive(record["pid"]),
            "the first conversation's worker to end",
            lifetime + IDLE_MARGIN,
        )
        assert (shared / "note.txt").exists(), "kept for the conversation still connected"
        assert "from one" in (await request_ok(other, "execute", read, timeout_s=DEADLINE))["output"]
    finally:
        assert (await other.close(DEADLINE)).clean
    await until(
        lambda: not shared.exists(), "the last worker's removal of the shared files", lifetime + IDLE_MARGIN
    )
    await until(lambda: not profiles.rundir(second).exists(), "the run directory's removal", DEADLINE)


async def test_a_persistent_workspace_outlives_its_worker(profiles: Profiles) -> None:
    lifetime = 2
    name = profiles.add("kept", persistent=True, lifetime_seconds=lifetime)
    conversation = f"k-{uuid.uuid4().hex[:8]}"
    subdirectory, rundir = profiles.subdirectory(conversation), profiles.rundir(conversation)
    client = await profiles.connect(name, conversation)
    try:
        await request_ok(client, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
        await request_ok(
            client,
            "execute",
            tool_request("write_file", mode="unconfined", path="kept.txt", content="still here"),
            timeout_s=DEADLINE,
        )
    finally:
        assert (await client.close(DEADLINE)).clean
    sock = str(rundir / "worker.sock")
    assert processes(sock, "serve"), "the detached worker runs"
    await until(
        lambda: not processes(sock, "serve"),
        "the worker's exit after its idle timeout",
        lifetime + IDLE_MARGIN,
    )
    # Once the worker has exited, its launcher removes a non-persistent worker's directories, then ends.
    await until(
        lambda: not processes("wuu-worker-daemon", str(rundir)), "the worker's launcher to end", DEADLINE
    )
    assert (subdirectory / "kept.txt").read_text(encoding="utf-8") == "still here"

    # A later connection that requires the retained workspace binds the same subdirectory (a new worker).
    again = await profiles.connect(name, conversation)
    try:
        await request_ok(
            again,
            "initialize",
            {**binding(profiles.workspace), "require_existing_workspace": True},
            timeout_s=DEADLINE,
        )
        read = await request_ok(
            again,
            "execute",
            tool_request("read_file", mode="unconfined", path="kept.txt"),
            timeout_s=DEADLINE,
        )
        assert "still here" in read["output"], read
    finally:
        assert (await again.close(DEADLINE)).clean
    # Retained state that is missing is an error, never silently an empty workspace.
    missing = await profiles.connect(name, f"m-{uuid.uuid4().hex[:8]}")
    try:
        reply = await asyncio.wait_for(
            missing.request(
                "initialize", {**binding(profiles.workspace), "require_existing_workspace": True}
            ),
            DEADLINE,
        )
        assert reply.get("error", "").startswith("workspace_missing"), reply
    finally:
        assert (await missing.close(DEADLINE)).clean


async def test_a_reconnect_to_a_persistent_worker_finds_its_processes(profiles: Profiles) -> None:
    lifetime = 10
    name = profiles.add("persistent", persistent=True, lifetime_seconds=lifetime)
    conversation = f"p-{uuid.uuid4().hex[:8]}"
    first = await profiles.connect(name, conversation)
    await request_ok(first, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
    start = {
        "argv": ["sh", "-c", "echo started; exec sleep 300"],
        "permission_mode": "unconfined",
        "operation_id": "op-ssh",
    }
    record = await request_ok(first, "process/start", start, timeout_s=DEADLINE)
    assert (await first.close(DEADLINE)).clean
    sock = str(profiles.rundir(conversation) / "worker.sock")
    [worker], _ = detached_workers(sock)

    second = await profiles.connect(name, conversation)
    try:
        await request_ok(second, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
        listed = (await request_ok(second, "process/list", {}, timeout_s=DEADLINE))["processes"]
        assert [(p["id"], p["status"], p["operation_id"]) for p in listed] == [
            (record["id"], "running", "op-ssh")
        ]
        output = await request_ok(
            second, "process/read", {"Process": record["id"], "Wait": 5_000_000_000}, timeout_s=DEADLINE
        )
        assert "started" in json.dumps(output), output
        assert (await request_ok(second, "process/stop", {"id": record["id"]}, timeout_s=DEADLINE))[
            "status"
        ] == "stopped"
    finally:
        assert (await second.close(DEADLINE)).clean
    assert detached_workers(sock)[0] == [worker], "the same worker served both connections"


# --- failure -------------------------------------------------------------------------------------


# A worker command whose `serve` fails at once and whose `attach` is the real relay, which waits for it.
SERVE_FAILS = (
    'for a; do [ "$a" = serve ] && echo "cannot serve: broken on purpose" >&2 && exit 3; done; exec "$0" "$@"'
)


async def test_a_worker_that_cannot_start_is_reported_with_its_log(profiles: Profiles) -> None:
    python, *module = profiles.service.profile["worker"]
    name = profiles.add("unstartable", worker=["sh", "-c", SERVE_FAILS, python, *module])
    client = await profiles.connect(name)
    started = time.monotonic()
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(client.request("initialize", binding(profiles.workspace)), DEADLINE)
    # The launcher's watcher sees the worker give up within about a second, then ends the waiting relay.
    assert time.monotonic() - started < 5
    outcome = await client.close(DEADLINE)
    assert b"the worker did not start; the end of its log" in outcome.stderr, outcome.stderr
    assert b"cannot serve: broken on purpose" in outcome.stderr, outcome.stderr


@pytest.mark.parametrize("target", ["serve", "attach"], ids=["detached-worker", "relay"])
async def test_killing_the_worker_mid_request_is_a_clear_error_within_the_budget(
    profiles: Profiles, target: str
) -> None:
    budget_ms = 5000
    name = profiles.add("killed", shutdown_timeout_ms=budget_ms, lifetime_seconds=30)
    conversation = f"x-{uuid.uuid4().hex[:8]}"
    subdirectory = profiles.subdirectory(conversation)
    sock = str(profiles.rundir(conversation) / "worker.sock")
    client = await profiles.connect(name, conversation)
    await request_ok(client, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
    pending = asyncio.create_task(
        client.request("execute", tool_request("exec_command", mode="unconfined", argv=["sleep", "60"]))
    )
    # Mid-request: the worker runs the request's command when it is killed.
    await until(lambda: commands_in(subdirectory), "the worker to run the command", DEADLINE)
    assert not pending.done(), pending
    [pid] = detached_workers(sock)[1] if target == "serve" else processes(sock, target)
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(pending, budget_ms / 1000 + 5)
    assert time.monotonic() - started < budget_ms / 1000 + 5
    outcome = await client.close(budget_ms / 1000 + 5)
    assert not outcome.killed, "the adapter ended by itself, within its budget"
    if target == "attach":
        # The relay's death is a failed shutdown, and says what happened.
        assert outcome.returncode == 1, outcome
        assert b"the worker's relay on 127.0.0.1 was killed by SIGKILL" in outcome.stderr, outcome.stderr
        worker = processes(sock, "serve")
        assert worker, "the detached worker itself lives on"
        for pid in worker:
            os.kill(pid, signal.SIGKILL)
    else:
        # The relay saw its worker go and ended cleanly; the killed worker's directories are kept.
        assert outcome.returncode == 0, outcome
        assert subdirectory.is_dir()
    # The command the killed worker left behind is ours to end.
    for pid in commands_in(subdirectory):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # A next connection gets a new worker in place of the dead one.
    again = await profiles.connect(name, conversation)
    try:
        await request_ok(again, "initialize", binding(profiles.workspace), timeout_s=DEADLINE)
        assert (await request_ok(again, "process/list", {}, timeout_s=DEADLINE))["processes"] == []
    finally:
        assert (await again.close(DEADLINE)).clean
