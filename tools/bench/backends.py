"""One connection through each backend of `wuu-host adapter`, beside the worker alone and the backend's
transport floor, all measured in the same round.

A connection is what a host pays per conversation: spawn the command, `initialize`, EOF, and the
command's exit (the environment's cleanup included: a removed container, a closed SSH connection).
The sides:

- worker alone: `python -m wuu.worker` spawned directly;
- local, command: the adapter with a `local` profile, and with a `command` profile running the same
  worker; their bound is the worker alone + 50 ms (the bridge's own cost). Their floor is the adapter
  alone: its interpreter, its imports and the validation of the file, measured by asking it for a
  profile the file does not have (it exits 2 then, having started no worker). A `local` worker starts
  while the adapter validates, so local costs about the longer of the two; a `command` adapter starts
  its worker only once the file is valid, so command costs about both;
- docker: a profile of the worker image (network none); its floor is the container lifecycle the backend
  drives, with a trivial command in place of the worker: connect (the engine's version), create, start,
  exec `true` and wait for it, remove; through the docker SDK (a client not this project's), in this
  process, so no client's import is in it;
- ssh: the server of `tools/services/sshd.sh` (WUU_SSH_TEST_DIR); its floor is an asyncssh connection
  with the profile's options (connect, key exchange, authentication), one `true` on a channel, and close,
  in this process, so asyncssh's import is not in it. Two more floors say what an adapter, a fresh process
  per connection, cannot avoid: the same connection from a fresh interpreter that imports asyncssh first,
  and the OpenSSH client (`ssh HOST true` with the profile's key and known-hosts file), the other
  transport an adapter could use. What the ssh adapter adds to the worker alone is set beside the first.

The bound of docker and ssh is 1.5 x floor + the worker alone: what the backend adds to the worker is at
most one and a half times what its transport costs. A backend that cannot run here has no samples; its
rows say why (`Samples.absent`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from wuu.worker.client import WorkerClient

from .config import Config
from .samples import Samples, alternate, share
from .workers import NATIVE_COMMAND, SESSION

IMAGE = os.environ.get("WUU_DOCKER_IMAGE", "wuu-execution:local")
CONTAINER_WORKSPACE = "/workspace"
BRIDGE_MS = 50.0
TRANSPORT_FACTOR = 1.5
DEADLINE_S = 60.0


def docker_problem() -> str | None:
    """Why the docker rows cannot be measured here, or None."""
    try:
        import docker
        import docker.errors
    except ImportError:
        return "the docker SDK is not installed"
    try:
        client = docker.from_env()
    except docker.errors.DockerException as error:
        return f"no Docker engine is reachable ({error})"
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return f"the image {IMAGE} is absent (make docker-image)"
    except docker.errors.DockerException as error:
        return f"the Docker engine failed: {error}"
    finally:
        client.close()
    return None


def ssh_profile() -> dict[str, Any] | str:
    """The ssh profile of the test server (WUU_SSH_TEST_DIR), or why there is none."""
    try:
        import asyncssh  # noqa: F401
    except ImportError:
        return "asyncssh is not installed"
    directory = os.environ.get("WUU_SSH_TEST_DIR")
    if not directory:
        return "WUU_SSH_TEST_DIR is unset (tools/services/sshd.sh start DIR)"
    try:
        profile: dict[str, Any] = json.loads((Path(directory) / "service.json").read_text())["profile"]
    except (OSError, ValueError, KeyError) as error:
        return f"{directory}/service.json is not readable: {error}"
    return profile


def docker_floor() -> float:
    """Seconds of the docker backend's container lifecycle with `true` as its command (blocking)."""
    import docker

    began = time.perf_counter()
    client = docker.from_env()
    try:
        container = client.containers.create(
            IMAGE,
            ["sleep", "infinity"],
            detach=True,
            network_mode="none",
            labels={"wuu.profile": "bench-floor"},
        )
        try:
            container.start()
            result = container.exec_run(["true"])
            assert result.exit_code == 0, result
        finally:
            container.remove(force=True)
    finally:
        client.close()
    return time.perf_counter() - began


async def ssh_floor(profile: dict[str, Any]) -> float:
    """Seconds of an SSH connection with the profile's options, one `true`, and its close."""
    import asyncssh

    user, _, host = profile["host"].rpartition("@")
    began = time.perf_counter()
    connection = await asyncssh.connect(
        host,
        port=profile.get("port", 22),
        username=user or None,
        client_keys=[profile["identity_file"]],
        agent_path=None,
        known_hosts=profile["known_hosts_file"],
    )
    try:
        result = await connection.run("true", check=True)
        assert result.exit_status == 0
    finally:
        connection.close()
        await connection.wait_closed()
    return time.perf_counter() - began


FRESH_SSH_FLOOR = """
import asyncio, json, sys
import asyncssh

async def main(profile):
    user, _, host = profile["host"].rpartition("@")
    connection = await asyncssh.connect(
        host, port=profile.get("port", 22), username=user or None, client_keys=[profile["identity_file"]],
        agent_path=None, known_hosts=profile["known_hosts_file"],
    )
    async with connection:
        await connection.run("true", check=True)

asyncio.run(main(json.loads(sys.argv[1])))
"""
"""`ssh_floor` as a program of its own: `python -c FRESH_SSH_FLOOR PROFILE_JSON`."""


def openssh_argv(profile: dict[str, Any], command: str) -> list[str]:
    """The OpenSSH client running `command` with the profile's port, key (only it) and known-hosts file."""
    port = ["-p", str(profile["port"])] if profile.get("port") else []
    return [
        "ssh", "-T", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
        "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={profile['known_hosts_file']}",
        "-i", profile["identity_file"], *port, profile["host"], command,
    ]  # fmt: skip


async def process_floor(argv: list[str]) -> float:
    """Seconds from spawning `argv` to its exit, which must be 0."""
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), DEADLINE_S)
    elapsed = time.perf_counter() - began
    if process.returncode != 0:
        raise RuntimeError(f"{argv}: exit status {process.returncode}: {stderr.decode()[-2000:]}")
    return elapsed


async def connection(argv: list[str], root: str) -> float:
    """Seconds from spawning `argv` to its exit after one initialize and EOF (a failure fails the run)."""
    began = time.perf_counter()
    client = await WorkerClient.spawn(argv)
    reply = await client.request("initialize", {"version": 4, "root": root, "session": SESSION})
    outcome = await client.close(DEADLINE_S)
    if "error" in reply or not outcome.clean:
        raise RuntimeError(
            f"{argv}: {reply.get('error')} {outcome.returncode}: {outcome.stderr.decode()[-2000:]}"
        )
    return time.perf_counter() - began


async def adapter_alone(argv: list[str]) -> float:
    """Seconds of the adapter `argv` (which names a profile the file lacks) until it exits 2, refusing it."""
    began = time.perf_counter()
    adapter = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(adapter.communicate(), DEADLINE_S)
    elapsed = time.perf_counter() - began
    if adapter.returncode != 2 or b"no profile is named" not in stderr:
        raise RuntimeError(f"{argv}: {adapter.returncode}: {stderr.decode()[-2000:]}")
    return elapsed


class BackendSides:
    """The sides this machine can run, their profiles in one configuration file, and why others cannot."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.root = workdir / "root"
        self.root.mkdir(exist_ok=True)
        self.config = workdir / "profiles.json"
        self.absent: dict[str, str] = {}
        profiles: dict[str, dict[str, Any]] = {
            "bench-local": {"backend": "local"},
            "bench-command": {"backend": "command", "command": NATIVE_COMMAND, "workspace": str(self.root)},
        }
        self.roots = {"local": str(self.root), "command": str(self.root)}
        problem = docker_problem()
        if problem is None:
            profiles["bench-docker"] = {
                "backend": "docker",
                "image": IMAGE,
                "workspace": CONTAINER_WORKSPACE,
                "network": "none",
            }
            self.roots["docker"] = CONTAINER_WORKSPACE
        else:
            self.absent["docker"] = problem
        found = ssh_profile()
        self.ssh: dict[str, Any] | None = None
        if isinstance(found, str):
            self.absent["ssh"] = found
        else:
            self.ssh = found
            workspace = f"{found['workspace']}/wuu-bench"
            # A short idle timeout: each connection's detached worker goes soon after it, with its
            # conversation's directories (a fresh one per connection: runs can share the workspace).
            profiles["bench-ssh"] = {**found, "workspace": workspace, "lifetime_seconds": 1}
            self.roots["ssh"] = workspace
            if not shutil.which("ssh"):
                self.absent["ssh_client_floor"] = "the OpenSSH client (ssh) is not installed"
        self.config.write_text(json.dumps({"execution_environments": {"profiles": profiles}}))

    def sides(self) -> dict[str, Callable[[], Awaitable[float]]]:
        """Every side this machine runs, by sample name, as a call that measures it once (seconds)."""
        calls: dict[str, Callable[[], Awaitable[float]]] = {
            "worker": lambda: connection(NATIVE_COMMAND, str(self.root))
        }
        adapter = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(self.config), "--profile"]
        for backend, root in self.roots.items():
            calls[backend] = functools.partial(connection, [*adapter, f"bench-{backend}"], root)
        calls["local_floor"] = functools.partial(adapter_alone, [*adapter, "bench-absent"])
        if "docker" in self.roots:
            calls["docker_floor"] = lambda: asyncio.to_thread(docker_floor)
        if self.ssh is not None:
            ssh = self.ssh
            calls["ssh_floor"] = lambda: ssh_floor(ssh)
            fresh = [sys.executable, "-c", FRESH_SSH_FLOOR, json.dumps(ssh)]
            calls["ssh_fresh_floor"] = functools.partial(process_floor, fresh)
            if "ssh_client_floor" not in self.absent:
                calls["ssh_client_floor"] = functools.partial(process_floor, openssh_argv(ssh, "true"))
        return calls


async def backend_round(config: Config, samples: Samples, workdir: Path, index: int) -> None:
    """Round `index`'s share of connections through every backend, beside the worker alone and the floors."""
    sides = BackendSides(workdir)
    for backend, why in sides.absent.items():
        samples.mark_absent(f"conn/{backend}", why)
    calls = sides.sides()
    timings: dict[str, list[float]] = defaultdict(list)
    for turn in range(share(config.cold_starts, config.rounds, index)):
        for side in alternate(list(calls), index + turn):
            timings[side].append(await calls[side]() * 1000)
    medians = {side: sorted(values)[len(values) // 2] for side, values in timings.items() if values}
    worker = medians.get("worker")
    if worker is None:
        return
    for side, value in medians.items():
        samples.add(f"conn/{side}", value)
    for backend in ("local", "command"):
        if backend in medians:
            samples.add(f"conn_bound/{backend}", worker + BRIDGE_MS)
    for backend in ("docker", "ssh"):
        if f"{backend}_floor" in medians:
            samples.add(f"conn_bound/{backend}", TRANSPORT_FACTOR * medians[f"{backend}_floor"] + worker)
    if "ssh" in medians:
        samples.add("conn/ssh_added", medians["ssh"] - worker)
    fresh = [medians[side] for side in ("ssh_fresh_floor", "ssh_client_floor") if side in medians]
    if fresh:
        # What an adapter, a fresh process with a fresh connection, cannot go below on either transport.
        samples.add("conn/ssh_fresh_bound", min(fresh) + worker)
