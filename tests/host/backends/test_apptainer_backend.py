"""The apptainer and singularity backends: the runtime's command line, the workspace's directory and its
retention, through `wuu-host adapter`.

No Apptainer or Singularity runtime can be installed here, so most tests run the backend against a FAKE
runtime (`fake_apptainer.py`: it records the command line and runs the worker in bubblewrap with the
same bind). The live test runs the conformance suite in a real container when WUU_EXECUTION_E2E_SIF names
a SIF image of the worker (build one from the docker image:
`apptainer build wuu.sif docker-daemon://wuu-execution:local`), and is skipped otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import binding, code, passes_every_case, request_ok, tool_request, until
from wuu.host.backends.apptainer import ApptainerEnvironment
from wuu.host.backends.conversations import environment_directory, shared_environment
from wuu.host.errors import BackendUnavailable
from wuu.host.profiles import parse
from wuu.worker.client import ConnectionLost, WorkerClient

WORKSPACE = "/srv/workspace"
DEADLINE = 30.0
FAKE = Path(__file__).with_name("fake_apptainer.py")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the fake runtime needs bubblewrap")


class Runtime:
    """A configuration file of apptainer profiles, the fake runtime on PATH, and a Wuu home of its own."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.config = directory / "config.json"
        self.home = directory / "wuu-home"
        self.log = directory / "runtime.log"
        self.image = directory / "worker.sif"
        self.image.write_bytes(b"not read by the fake runtime")
        bin_dir = directory / "bin"
        bin_dir.mkdir()
        for name in ("apptainer", "singularity"):
            program = bin_dir / name
            program.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n', encoding="utf-8")
            program.chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "WUU_HOME": str(self.home),
            "FAKE_APPTAINER_LOG": str(self.log),
        }
        self.profiles: dict[str, dict[str, Any]] = {}

    def add(self, name: str, **settings: Any) -> str:
        """Add profile `name` (apptainer, the fake image, WORKSPACE) with `settings`; its name."""
        self.profiles[name] = {
            "backend": "apptainer",
            "image": str(self.image),
            "workspace": WORKSPACE,
            **settings,
        }
        document = {"execution_environments": {"profiles": self.profiles}}
        self.config.write_text(json.dumps(document), encoding="utf-8")
        return name

    async def connect(self, name: str, conversation: str) -> WorkerClient:
        """A client of a fresh adapter serving profile `name` for `conversation`."""
        argv = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(self.config), "--profile", name]
        return await WorkerClient.spawn(argv, env={**self.env, "WUU_CONVERSATION": conversation})

    def directory_of(self, name: str, identity: str) -> Path:
        """The directory of this machine that holds the workspace of environment `identity` of profile `name`."""
        profile = parse({"execution_environments": {"profiles": self.profiles}}).select(name)
        return environment_directory(profile, identity, self.env)

    def runs(self) -> list[list[str]]:
        """The fake runtime's command lines so far."""
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    return Runtime(tmp_path)


def environment(settings: dict[str, Any], environ: dict[str, str]) -> ApptainerEnvironment:
    profile = parse({"execution_environments": {"profiles": {"p": settings}}}).select("p")
    return ApptainerEnvironment(profile, environ)


async def test_the_conformance_suite_passes_through_the_backend_on_the_fake_runtime(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every case, each connection with a workspace directory of its own: what the fake cannot show is what a
    real container changes (the live test's)."""
    name = runtime.add("conformance")
    for variable in ("PATH", "WUU_HOME", "FAKE_APPTAINER_LOG"):
        monkeypatch.setenv(variable, runtime.env[variable])
    monkeypatch.delenv("WUU_CONVERSATION", raising=False)
    command = [
        sys.executable,
        "-m",
        "wuu.host",
        "adapter",
        "--config",
        str(runtime.config),
        "--profile",
        name,
    ]
    await passes_every_case(command, "through the apptainer backend (fake runtime)", DEADLINE)
    assert len(runtime.runs()) > 50
    [kept] = (runtime.home / "environments" / "apptainer").iterdir()
    assert list(kept.iterdir()) == [], "every connection's workspace directory is gone"


def test_the_profile_maps_onto_the_runtimes_options(runtime: Runtime) -> None:
    settings = {
        "backend": "apptainer",
        "image": "/images/worker.sif",
        "workspace": "/work",
        "host_workspace": "/home/me/project",
        "mount_read_only": True,
        "cpus": 1.5,
        "memory_mb": 512,
        "network": "none",
    }
    made = environment(settings, runtime.env)
    program = str(runtime.directory / "bin" / "apptainer")
    assert made.command(program) == [
        program, "exec", "--containall", "--pwd", "/work", "--bind", "/home/me/project:/work:ro",
        "--cpus", "1.5", "--memory", "512M", "--memory-swap", "512M", "--net", "--network", "none",
        "/images/worker.sif", "python3", "-m", "wuu.worker",
    ]  # fmt: skip
    singularity = environment(
        {
            "backend": "singularity",
            "image": "/i.sif",
            "workspace": "/w",
            "network": "bridge",
            "worker": ["w"],
        },
        {**runtime.env, "WUU_CONVERSATION": "c1"},
    )
    singularity.new = True  # a profile's own worker is run as given, a new workspace or not
    bound = str(runtime.home / "environments" / "singularity")
    [command] = [singularity.command("singularity")]
    assert command[:6] == ["singularity", "exec", "--containall", "--pwd", "/w", "--bind"]
    assert command[6].startswith(bound) and command[6].endswith("/c1:/w")
    assert command[7:] == ["--net", "--network", "bridge", "/i.sif", "w"]


def test_a_runtime_that_is_not_installed_is_a_clear_error(tmp_path: Path) -> None:
    settings = {"backend": "apptainer", "image": "/i.sif", "workspace": "/w"}
    with pytest.raises(BackendUnavailable, match=r"profile 'p': the apptainer runtime is not installed here"):
        environment(settings, {"PATH": str(tmp_path)})


async def test_the_workspace_is_the_conversations_and_goes_after_a_clean_close(runtime: Runtime) -> None:
    name = runtime.add("plain")
    client = await runtime.connect(name, "conv-1")
    directory = runtime.directory_of(name, "conv-1")
    try:
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
        write = tool_request("write_file", mode="unconfined", path="note.txt", content="hello")
        await request_ok(client, "execute", write, timeout_s=DEADLINE)
        assert (directory / "note.txt").read_text(encoding="utf-8") == "hello"
        assert oct(directory.stat().st_mode & 0o777) == oct(0o700)
    finally:
        assert (await client.close(DEADLINE)).clean
    assert not directory.exists(), "removed without persistent"
    [run] = runtime.runs()
    assert run[:7] == [
        "exec",
        "--containall",
        "--pwd",
        WORKSPACE,
        "--bind",
        f"{directory}:{WORKSPACE}",
        str(runtime.image),
    ]
    assert run[7:] == ["python3", "-m", "wuu.worker", "--new-environment"]


async def test_a_persistent_workspace_stays_and_missing_it_is_an_error(runtime: Runtime) -> None:
    name = runtime.add("kept", persistent=True)
    directory = runtime.directory_of(name, "conv-k")
    reconnect = binding(WORKSPACE, require_existing_workspace=True)
    first = await runtime.connect(name, "conv-k")
    await request_ok(first, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    write = tool_request("write_file", mode="unconfined", path="kept.txt", content="still here")
    await request_ok(first, "execute", write, timeout_s=DEADLINE)
    assert (await first.close(DEADLINE)).clean
    assert (directory / "kept.txt").exists()

    again = await runtime.connect(name, "conv-k")
    try:
        await request_ok(again, "initialize", reconnect, timeout_s=DEADLINE)
        read = tool_request("read_file", mode="unconfined", path="kept.txt")
        assert "still here" in (await request_ok(again, "execute", read, timeout_s=DEADLINE))["output"]
    finally:
        assert (await again.close(DEADLINE)).clean
    assert runtime.runs()[-1][-3:] == ["python3", "-m", "wuu.worker"], "not new: the worker is not told so"

    shutil.rmtree(directory)  # the retained state goes outside Wuu
    missing = await runtime.connect(name, "conv-k")
    reply = await asyncio.wait_for(missing.request("initialize", reconnect), DEADLINE)
    assert code(reply) == "workspace_missing", reply
    assert (await missing.close(DEADLINE)).clean
    assert not directory.exists(), "the directory made for the refused reconnect is removed again"


async def test_a_shared_workspace_stays_until_its_last_connection_closes(runtime: Runtime) -> None:
    name = runtime.add("shared", shared=True)
    profile = parse({"execution_environments": {"profiles": runtime.profiles}}).select(name)
    directory = runtime.directory_of(name, shared_environment(profile))
    one, other = await runtime.connect(name, "conv-1"), await runtime.connect(name, "conv-2")
    for client in (one, other):
        await request_ok(client, "initialize", binding(WORKSPACE), timeout_s=DEADLINE)
    write = tool_request("write_file", mode="unconfined", path="note.txt", content="from one")
    await request_ok(one, "execute", write, timeout_s=DEADLINE)
    read = tool_request("read_file", mode="unconfined", path="note.txt")
    assert "from one" in (await request_ok(other, "execute", read, timeout_s=DEADLINE))["output"]
    start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": "op-one"}
    record = await request_ok(one, "process/start", start, timeout_s=DEADLINE)
    assert (await request_ok(other, "process/list", {}, timeout_s=DEADLINE))["processes"] == []
    reply = await asyncio.wait_for(other.request("process/stop", {"id": record["id"]}), DEADLINE)
    assert code(reply) == "not_found", reply
    assert (await one.close(DEADLINE)).clean
    assert (directory / "note.txt").exists(), "kept for the connection still open"
    assert (await other.close(DEADLINE)).clean
    assert not directory.exists(), "removed by the last connection"


async def test_an_option_the_runtime_refuses_ends_the_connection_with_its_message(runtime: Runtime) -> None:
    name = runtime.add("limited", cpus=2)
    client = await runtime.connect(name, "conv-c")
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(client.request("initialize", binding(WORKSPACE)), DEADLINE)
    outcome = await client.close(DEADLINE)
    await until(lambda: b"FATAL" in outcome.stderr, "the runtime's message", DEADLINE)
    assert b"cgroups" in outcome.stderr and outcome.returncode != 0, outcome


@pytest.mark.skipif(
    not os.environ.get("WUU_EXECUTION_E2E_SIF"), reason="WUU_EXECUTION_E2E_SIF names no SIF image"
)
async def test_the_conformance_suite_passes_in_a_real_container(tmp_path: Path) -> None:
    runtime = "apptainer" if shutil.which("apptainer") else "singularity"
    image = os.environ["WUU_EXECUTION_E2E_SIF"]
    config = tmp_path / "config.json"
    profile = {"backend": runtime, "image": image, "workspace": "/workspace", "network": "none"}
    config.write_text(
        json.dumps({"execution_environments": {"profiles": {"live": profile}}}), encoding="utf-8"
    )
    command = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(config), "--profile", "live"]
    os.environ.setdefault("WUU_CONVERSATION", f"live-{uuid.uuid4().hex[:8]}")
    await passes_every_case(command, f"through {runtime}", DEADLINE)
