"""The docker backend against a real Docker engine: the conformance suite, limits, mounts, retention, failure.

Needs an engine (DOCKER_HOST, e.g. from `tools/services/dockerd.sh start DIR`) and the worker image
(`tools/docker/build-image.sh`, default tag `wuu-execution:local`, or WUU_DOCKER_IMAGE). Without them the
tests skip, saying why; with WUU_REQUIRE_DOCKER=1 (CI) they fail instead. Every test uses profiles of its
own name (the containers' `wuu.profile` label), so they run in parallel and clean up only their own.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import TOOL_CASES, binding, code, passes_every_case, request_ok, tool_request, until
from wuu.worker.client import ConnectionLost, WorkerClient

IMAGE = os.environ.get("WUU_DOCKER_IMAGE", "wuu-execution:local")
REQUIRED = os.environ.get("WUU_REQUIRE_DOCKER") == "1"
WORKSPACE = "/workspace"
DEADLINE = 30.0
"""Seconds a request or a shutdown through the backend may take (more than tests.helpers.DEADLINE: a
container starts and stops within it)."""


def _unavailable() -> str | None:
    """Why these tests cannot run here, or None."""
    try:
        import docker
        import docker.errors
    except ImportError:
        return "the docker SDK is not installed (pip install 'docker>=7')"
    where = os.environ.get("DOCKER_HOST", "the default socket (DOCKER_HOST is unset)")
    try:
        client = docker.from_env()
    except docker.errors.DockerException as error:
        return f"no Docker engine is reachable at {where}: {error}"
    try:
        client.ping()
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"the worker image {IMAGE} is absent (tools/docker/build-image.sh builds it)"
    except docker.errors.DockerException as error:
        return f"no Docker engine is reachable at {where}: {error}"
    finally:
        client.close()
    return None


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    """The docker SDK client, or a skip (a failure with WUU_REQUIRE_DOCKER=1) saying what is missing."""
    problem = _unavailable()
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"WUU_REQUIRE_DOCKER=1, but {problem}")
        pytest.skip(problem)
    import docker

    client = docker.from_env()
    yield client
    client.close()


class Profiles:
    """A configuration file of docker profiles named for one test, and the containers they leave."""

    def __init__(self, engine: Any, directory: Path) -> None:
        self.engine = engine
        self.path = directory / "config.json"
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self.profiles: dict[str, dict[str, Any]] = {}

    def add(self, suffix: str, **settings: Any) -> str:
        """Add a profile named for this test and `suffix`, with `settings`; its name."""
        name = f"{self.prefix}-{suffix}"
        self.profiles[name] = {
            "backend": "docker",
            "image": IMAGE,
            "workspace": WORKSPACE,
            "network": "none",
            **settings,
        }
        document = {"execution_environments": {"profiles": self.profiles}}
        self.path.write_text(json.dumps(document), encoding="utf-8")
        return name

    def command(self, name: str) -> list[str]:
        """The adapter command that serves profile `name`."""
        return [sys.executable, "-m", "wuu.host", "adapter", "--config", str(self.path), "--profile", name]

    async def connect(self, name: str, conversation: str | None = None) -> WorkerClient:
        """A client of a fresh adapter serving profile `name`, for `conversation` when given (the host's
        `WUU_CONVERSATION`)."""
        env = None if conversation is None else {**os.environ, "WUU_CONVERSATION": conversation}
        return await WorkerClient.spawn(self.command(name), env=env)

    def containers(self, name: str) -> list[Any]:
        """The containers of profile `name`, running or not (one that is being removed meanwhile is not)."""
        found: list[Any] = self.engine.containers.list(
            all=True, filters={"label": f"wuu.profile={name}"}, ignore_removed=True
        )
        return found

    def remove_all(self) -> None:
        """Remove every container of this test's profiles."""
        for name in self.profiles:
            for container in self.containers(name):
                container.remove(force=True)


@pytest.fixture
def profiles(engine: Any, tmp_path: Path) -> Iterator[Profiles]:
    """The test's own profiles; their containers are removed after it."""
    made = Profiles(engine, tmp_path)
    yield made
    made.remove_all()


async def run(client: WorkerClient, script: str) -> dict[str, Any]:
    """Run a python3 script in the environment (unconfined: the container is the boundary here)."""
    return await request_ok(
        client,
        "execute",
        tool_request("exec_command", mode="unconfined", argv=["python3", "-c", script]),
        timeout_s=DEADLINE,
    )


# --- the conformance suite -----------------------------------------------------------------------


async def test_the_conformance_suite_passes_through_the_docker_backend(
    profiles: Profiles, record_property: Any
) -> None:
    name = profiles.add("conformance", cpus=1, memory_mb=512)
    elapsed = await passes_every_case(
        profiles.command(name), "through docker", timeout=30, must_run=TOOL_CASES
    )
    record_property("docker_conformance_seconds", round(elapsed, 1))
    assert profiles.containers(name) == [], "every case's container is removed after its clean shutdown"


# --- limits and isolation --------------------------------------------------------------------------


async def test_the_memory_limit_kills_a_command_that_allocates_more(profiles: Profiles) -> None:
    client = await profiles.connect(profiles.add("memory", memory_mb=128))
    try:
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        small = await run(client, "b = b'x' * (16 << 20); print('allocated', len(b))")
        assert small["metadata"]["exit_code"] == 0 and "allocated" in small["output"], small
        big = await run(client, "b = b'x' * (300 << 20); print('allocated', len(b))")
        assert "allocated" not in big["output"], f"300 MB were allocated under a 128 MB limit: {big}"
        metadata = big["metadata"]
        killed = metadata["signal"] == "KILL" or metadata["exit_code"] == 137
        assert killed, f"the command was not killed by the kernel's OOM killer: {big}"
        # The worker itself survived its command's death.
        assert (await run(client, "print('still here')"))["output"] == "still here\n"
    finally:
        assert (await client.close(DEADLINE)).clean


CPU_QUOTA = """
import os
if os.path.exists("/sys/fs/cgroup/cpu.max"):  # cgroup v2: "quota period"
    quota, period = open("/sys/fs/cgroup/cpu.max").read().split()
else:  # cgroup v1
    base = next(p for p in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct") if os.path.isdir(p))
    quota, period = (open(f"{base}/cpu.cfs_{name}_us").read() for name in ("quota", "period"))
print(int(quota), int(period))
"""


async def test_cpus_caps_the_containers_cpu_time(profiles: Profiles) -> None:
    client = await profiles.connect(profiles.add("cpus", cpus=0.5))
    try:
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        found = await run(client, CPU_QUOTA)
        quota, period = (int(word) for word in found["output"].split())
        assert quota * 2 == period, f"half a CPU's time in every period: {found}"
    finally:
        assert (await client.close(DEADLINE)).clean


NO_ROUTE = """
import errno, socket
interfaces = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
routes = [line.split() for line in open("/proc/net/route").read().splitlines()[1:] if line.strip()]
print("interfaces", ",".join(interfaces))
print("routes", len(routes))
if routes:
    raise SystemExit(3)  # never try a connection that could leave the machine
try:
    socket.create_connection(("10.255.255.1", 9), 2)
except OSError as error:
    print("connect", errno.errorcode.get(error.errno, error.errno))
else:
    print("connect ok")
"""


async def test_network_none_has_only_loopback_and_no_route_out(profiles: Profiles) -> None:
    client = await profiles.connect(profiles.add("network"))
    try:
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        result = await run(client, NO_ROUTE)
        lines = result["output"].splitlines()
        assert lines[:2] == ["interfaces lo", "routes 0"], result
        # With no route the kernel refuses the connect itself: nothing is sent anywhere.
        assert lines[2] == "connect ENETUNREACH", result
        loopback = await run(
            client,
            "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
            "socket.create_connection(s.getsockname(), 2); print('loopback ok')",
        )
        assert loopback["output"] == "loopback ok\n", loopback
    finally:
        assert (await client.close(DEADLINE)).clean


async def test_a_read_only_host_mount_refuses_writes(profiles: Profiles, tmp_path: Path) -> None:
    host = tmp_path / "host-workspace"
    host.mkdir()
    (host / "given.txt").write_text("from the host\n", encoding="utf-8")
    name = profiles.add("readonly", host_workspace=str(host), mount_read_only=True)
    client = await profiles.connect(name)
    try:
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        read = await request_ok(
            client,
            "execute",
            tool_request("read_file", mode="unconfined", path="given.txt"),
            timeout_s=DEADLINE,
        )
        assert "from the host" in json.dumps(read), read
        written = await asyncio.wait_for(
            client.request(
                "execute", tool_request("write_file", mode="unconfined", path="new.txt", content="x")
            ),
            DEADLINE,
        )
        refused = "error" in written or written["data"]["is_error"]
        assert refused, f"write_file into the read-only mount succeeded: {written}"
        shell = await run(client, "open('/workspace/shell.txt', 'w').write('x')")
        assert shell["metadata"]["exit_code"] != 0 and "Read-only file system" in shell["output"], shell
        # On Linux the mount defaults to the host user, so files keep their owner.
        ids = await run(client, "import os; print(os.getuid(), os.getgid())")
        assert ids["output"] == f"{os.getuid()} {os.getgid()}\n", ids
    finally:
        assert (await client.close(DEADLINE)).clean
    assert sorted(path.name for path in host.iterdir()) == ["given.txt"]


async def test_a_writable_host_mount_shares_files_with_the_host(profiles: Profiles, tmp_path: Path) -> None:
    host = tmp_path / "host-workspace"
    host.mkdir()
    client = await profiles.connect(profiles.add("mounted", host_workspace=str(host)))
    try:
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        written = await request_ok(
            client,
            "execute",
            tool_request("write_file", mode="unconfined", path="made-inside.txt", content="inside\n"),
            timeout_s=DEADLINE,
        )
        assert not written["is_error"], written
    finally:
        assert (await client.close(DEADLINE)).clean
    made = host / "made-inside.txt"
    assert made.read_text(encoding="utf-8") == "inside\n"
    assert (made.stat().st_uid, made.stat().st_gid) == (os.getuid(), os.getgid())


# --- retention -----------------------------------------------------------------------------------


async def test_a_container_without_retention_is_removed_at_shutdown(profiles: Profiles) -> None:
    name = profiles.add("ephemeral")
    client = await profiles.connect(name)
    await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    assert len(profiles.containers(name)) == 1
    outcome = await client.close(DEADLINE)
    assert outcome.clean, outcome
    assert profiles.containers(name) == []


async def test_a_reconnect_to_a_persistent_worker_finds_its_processes(profiles: Profiles) -> None:
    name = profiles.add("persistent", persistent=True)
    first = await profiles.connect(name)
    await request_ok(first, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": "op-docker"}
    record = await request_ok(first, "process/start", start, timeout_s=DEADLINE)
    assert (await first.close(DEADLINE)).clean
    [container] = profiles.containers(name)
    assert container.status == "running", "a persistent container stays after a clean disconnect"

    second = await profiles.connect(name)
    try:
        await request_ok(second, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        listed = (await request_ok(second, "process/list", {}, timeout_s=DEADLINE))["processes"]
        assert [(p["id"], p["status"], p["operation_id"]) for p in listed] == [
            (record["id"], "running", "op-docker")
        ]
        stopped = await request_ok(second, "process/stop", {"id": record["id"]}, timeout_s=DEADLINE)
        assert stopped["status"] == "stopped"
    finally:
        assert (await second.close(DEADLINE)).clean
    assert [c.id for c in profiles.containers(name)] == [container.id], "the same container, still kept"


async def test_a_reconnect_whose_container_is_missing_is_refused_not_replaced(
    profiles: Profiles, engine: Any
) -> None:
    name = profiles.add("retained", persistent=True)
    reconnect = binding(WORKSPACE, require_existing_workspace=True)

    async def refused() -> None:
        client = await profiles.connect(name, "conv-r")
        reply = await asyncio.wait_for(client.request("initialize", reconnect), DEADLINE)
        assert code(reply) == "workspace_missing"
        assert "the retained environment the binding expects is missing" in reply["error"]
        assert (await client.close(DEADLINE)).clean
        assert profiles.containers(name) == [], "the container made for the refused reconnect is gone"

    await refused()  # no container was ever made for the conversation

    first = await profiles.connect(name, "conv-r")
    await request_ok(first, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    await run(first, "open('/workspace/saved.txt', 'w').write('kept')")
    assert (await first.close(DEADLINE)).clean
    again = await profiles.connect(name, "conv-r")
    try:
        await request_ok(again, "initialize", reconnect, timeout_s=DEADLINE)
        found = await run(again, "print(open('/workspace/saved.txt').read())")
        assert found["output"].strip() == "kept", found
    finally:
        assert (await again.close(DEADLINE)).clean

    [container] = profiles.containers(name)
    container.remove(force=True)  # the retained state goes outside Wuu
    await refused()


WORKERS = """
import os
found = []
for pid in os.listdir("/proc"):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"wuu.worker" in argv:
        found.append(pid)
print(len(found))
"""


async def test_a_persistent_worker_exits_after_its_lifetime_without_a_connection(profiles: Profiles) -> None:
    name = profiles.add("idle", persistent=True, lifetime_seconds=1)
    client = await profiles.connect(name)
    await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    assert (await client.close(DEADLINE)).clean
    [container] = profiles.containers(name)

    def workers() -> int:
        result = container.exec_run(["python3", "-c", WORKERS])
        assert result.exit_code == 0, result.output
        return int(result.output.decode())

    await until(lambda: workers() == 0, "the idle worker's exit", DEADLINE)
    container.reload()
    assert container.status == "running", "the container itself is kept"


def test_the_profiles_own_conversation_keeps_the_container_name_it_had() -> None:
    from wuu.host.backends.conversations import profile_conversation
    from wuu.host.backends.docker import container_name
    from wuu.host.profiles import parse

    settings = {"backend": "docker", "image": IMAGE, "workspace": WORKSPACE, "persistent": True}
    document = {"execution_environments": {"profiles": {"kept": settings}}}
    profile = parse(document).select("kept")
    before = hashlib.sha256("\0".join(("kept", WORKSPACE, "")).encode()).hexdigest()[:16]
    assert container_name(profile, profile_conversation(profile)) == f"wuu-kept-{before}"
    assert container_name(profile, "conv-1") != f"wuu-kept-{before}"


async def test_conversations_of_a_persistent_profile_are_kept_apart(profiles: Profiles) -> None:
    name = profiles.add("conversations", persistent=True)
    started = {}
    for conversation in ("conv-a", "conv-b"):
        client = await profiles.connect(name, conversation)
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        start = {
            "argv": ["sleep", "300"],
            "permission_mode": "unconfined",
            "operation_id": f"op-{conversation}",
        }
        started[conversation] = (await request_ok(client, "process/start", start, timeout_s=DEADLINE))["id"]
        assert (await client.close(DEADLINE)).clean
    kept = {c.labels["wuu.conversation"]: c.id for c in profiles.containers(name)}
    assert sorted(kept) == ["conv-a", "conv-b"], "a container of its own for each conversation"
    for conversation in ("conv-b", "conv-a"):
        client = await profiles.connect(name, conversation)
        try:
            await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
            listed = (await request_ok(client, "process/list", {}, timeout_s=DEADLINE))["processes"]
            assert [p["id"] for p in listed] == [started[conversation]], "only the conversation's own process"
        finally:
            assert (await client.close(DEADLINE)).clean
    assert {c.labels["wuu.conversation"]: c.id for c in profiles.containers(name)} == kept


async def test_shared_conversations_share_one_container_but_not_processes(profiles: Profiles) -> None:
    """One container for the profile's conversations, a worker each: what one writes the other reads, and
    neither lists, reads or stops the other's process. The container stays while either is connected and
    goes after the last one, even when that one's adapter is SIGKILLed."""
    name = profiles.add("shared", shared=True)
    one, other = await profiles.connect(name, "conv-1"), await profiles.connect(name, "conv-2")
    for client in (one, other):
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    [container] = profiles.containers(name)
    assert container.labels["wuu.shared"] == "true"
    await run(one, "open('/workspace/note.txt', 'w').write('from one')")
    assert (await run(other, "print(open('/workspace/note.txt').read())"))["output"] == "from one\n"
    start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": "op-one"}
    record = await request_ok(one, "process/start", start, timeout_s=DEADLINE)
    assert (await request_ok(other, "process/list", {}, timeout_s=DEADLINE))["processes"] == []
    for method in ("process/get", "process/stop"):
        reply = await asyncio.wait_for(other.request(method, {"id": record["id"]}), DEADLINE)
        assert code(reply) == "not_found", reply
    assert (await one.close(DEADLINE)).clean
    container.reload()
    assert container.status == "running", "kept for the conversation still connected"
    assert (await run(other, "print(open('/workspace/note.txt').read())"))["output"] == "from one\n"
    assert other.process is not None
    other.process.kill()
    await other.close()
    await until(lambda: profiles.containers(name) == [], "the shared container's removal", DEADLINE)

    # The next connection makes a new container: nothing was retained.
    again = await profiles.connect(name, "conv-1")
    try:
        await request_ok(again, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        found = await run(again, "import os; print(os.path.exists('/workspace/note.txt'))")
        assert found["output"] == "False\n"
    finally:
        assert (await again.close(DEADLINE)).clean
    await until(lambda: profiles.containers(name) == [], "the new container's removal", DEADLINE)


async def test_a_shared_persistent_container_keeps_each_conversations_worker(profiles: Profiles) -> None:
    name = profiles.add("shared-kept", shared=True, persistent=True)
    started = {}
    for conversation in ("conv-a", "conv-b"):
        client = await profiles.connect(name, conversation)
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": conversation}
        started[conversation] = (await request_ok(client, "process/start", start, timeout_s=DEADLINE))["id"]
        assert (await client.close(DEADLINE)).clean
    [container] = profiles.containers(name)
    for conversation in ("conv-b", "conv-a"):
        client = await profiles.connect(name, conversation)
        try:
            reconnect = binding(WORKSPACE, require_existing_workspace=True)
            await request_ok(client, "initialize", reconnect, timeout_s=DEADLINE)
            listed = (await request_ok(client, "process/list", {}, timeout_s=DEADLINE))["processes"]
            assert [p["id"] for p in listed] == [started[conversation]], "only the conversation's own process"
        finally:
            assert (await client.close(DEADLINE)).clean
    assert [c.id for c in profiles.containers(name)] == [container.id], "one container, still kept"


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
async def test_a_container_without_retention_is_gone_however_the_adapter_ends(
    profiles: Profiles, signum: signal.Signals
) -> None:
    name = profiles.add("signalled")
    client = await profiles.connect(name)
    await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": "op-signal"}
    await request_ok(client, "process/start", start, timeout_s=DEADLINE)
    [container] = profiles.containers(name)
    assert container.status == "running"
    assert client.process is not None
    client.process.send_signal(signum)
    # SIGTERM and SIGINT shut down like EOF (status 0); after SIGKILL the container's watchdog ends it.
    returncode = await asyncio.wait_for(client.process.wait(), DEADLINE)
    assert returncode == (-signum if signum == signal.SIGKILL else 0), (await client.close()).stderr
    await until(lambda: profiles.containers(name) == [], "the container's removal", DEADLINE)
    await client.close()


# --- failure -------------------------------------------------------------------------------------

KILL_WORKER = """
import os, signal, sys
pattern = sys.argv[1]
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"wuu.worker" in argv and (not pattern or pattern.encode() in argv):
        os.kill(int(pid), signal.SIGKILL)
        print("killed", pid, b" ".join(argv).decode())
"""


@pytest.mark.parametrize(
    ("persistent", "pattern"),
    [(False, ""), (True, "serve")],
    ids=["stdio-worker", "persistent-worker"],
)
async def test_killing_the_worker_mid_request_is_a_clear_error_within_the_budget(
    profiles: Profiles, persistent: bool, pattern: str
) -> None:
    budget_ms = 5000
    name = profiles.add("killed", persistent=persistent, shutdown_timeout_ms=budget_ms)
    client = await profiles.connect(name)
    await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    pending = asyncio.create_task(
        client.request("execute", tool_request("exec_command", mode="unconfined", argv=["sleep", "60"]))
    )
    [container] = profiles.containers(name)
    # Mid-request: the worker runs the request's command when it is killed.
    await until(
        lambda: any(row[-1] == "sleep 60" for row in container.top()["Processes"]),
        "the worker to run the command",
        DEADLINE,
    )
    assert not pending.done(), pending
    killed = container.exec_run(["python3", "-c", KILL_WORKER, pattern])
    assert killed.exit_code == 0 and b"killed" in killed.output, killed
    started = time.monotonic()
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(pending, budget_ms / 1000 + 5)
    assert time.monotonic() - started < budget_ms / 1000 + 5
    outcome = await client.close(budget_ms / 1000 + 5)
    assert not outcome.killed, "the adapter ended by itself, within its budget"
    if persistent:
        # The relay saw its worker go; the retained container stays for the next connection.
        assert outcome.returncode == 0, outcome
    else:
        # The worker's death is a failed cleanup: reported, and the container kept for inspection.
        assert outcome.returncode == 1, outcome
        assert b"exited with status 137" in outcome.stderr and b"kept" in outcome.stderr, outcome.stderr
        assert len(profiles.containers(name)) == 1


async def test_the_profile_user_runs_the_worker_and_owns_the_workspace(profiles: Profiles) -> None:
    client = await profiles.connect(profiles.add("user", user="1234:2345"))
    try:
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        ids = await run(client, "import os; print(os.getuid(), os.getgid())")
        assert ids["output"] == "1234 2345\n", ids
        written = await request_ok(
            client,
            "execute",
            tool_request("write_file", mode="unconfined", path="mine.txt", content="x"),
            timeout_s=DEADLINE,
        )
        assert not written["is_error"], written
        owner = await run(client, "import os; s = os.stat('/workspace/mine.txt'); print(s.st_uid, s.st_gid)")
        assert owner["output"] == "1234 2345\n", owner
    finally:
        assert (await client.close(DEADLINE)).clean
