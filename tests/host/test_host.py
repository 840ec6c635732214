"""Profiles and the `wuu-host adapter` bridge: configuration errors, defaults from the schema, backends that
cannot be served, and the lifecycle rules of spec/schema/config/execution_environments.schema.json."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    DEADLINE,
    NATIVE_WORKER,
    ROOT,
    SDK_WORKER,
    alive,
    binding,
    children,
    code,
    initialize,
    ok,
    tool_request,
    until,
)
from wuu.generated import models, plain, validators
from wuu.host.backends import environment_for
from wuu.host.errors import BackendUnavailable, EnvironmentUnavailable, ProfileError
from wuu.host.profiles import backend_defaults, parse
from wuu.worker.client import ConnectionLost, WorkerClient

SPEC_EXAMPLE = {
    "execution_environments": {
        "default": "isolated",
        "profiles": {
            "isolated": {
                "backend": "docker",
                "image": "wuu-execution:local",
                "workspace": "/workspace",
                "network": "none",
                "cpus": 2,
                "memory_mb": 2048,
                "persistent": True,
            }
        },
    }
}


def config(tmp_path: Path, **profiles: dict[str, Any]) -> Path:
    """A configuration file in `tmp_path` holding `profiles` (by name)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"execution_environments": {"profiles": profiles}}))
    return path


def command_profile(argv: list[str], **extra: Any) -> dict[str, Any]:
    """A `command` profile that runs `argv` as its worker, with `extra` settings."""
    return {"backend": "command", "command": argv, "workspace": "/workspace", **extra}


async def adapter(path: Path, profile: str, env: dict[str, str] | None = None) -> WorkerClient:
    """`wuu-host adapter` serving `profile` of the configuration at `path`, with `env` added to ours."""
    argv = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(path), "--profile", profile]
    return await WorkerClient.spawn(argv, env={**os.environ, **(env or {})})


# --- profiles -----------------------------------------------------------------------------------------


def test_a_docker_profile_loads_as_its_typed_model_with_its_defaults() -> None:
    profile = parse(SPEC_EXAMPLE).select()
    settings = profile.settings
    assert isinstance(settings, plain.DockerExecutionProfile)
    assert (profile.name, profile.backend, settings.shutdown_timeout_ms, settings.lifetime_seconds) == (
        "isolated",
        "docker",
        7000,
        600,
    )
    assert (settings.cpus, settings.memory_mb, settings.network) == (
        2,
        2048,
        models.ContainerNetworkMode.NONE,
    )


@pytest.mark.parametrize(
    ("settings", "timeout_ms", "lifetime"),
    [
        ({"backend": "command", "command": ["x"], "workspace": "/w"}, 60_000, None),
        ({"backend": "modal", "image": "i", "workspace": "/w"}, 90_000, 600),
        (
            {
                "backend": "ssh",
                "host": "h",
                "workspace": "/w",
                "lifetime_seconds": 0,
                "shutdown_timeout_ms": 0,
            },
            7000,
            600,
        ),
        (
            {
                "backend": "ssh",
                "host": "h",
                "workspace": "/w",
                "lifetime_seconds": 5,
                "shutdown_timeout_ms": 1,
            },
            1,
            5,
        ),
    ],
)
def test_defaults_come_from_the_spec(settings: dict[str, Any], timeout_ms: int, lifetime: int | None) -> None:
    resolved = parse({"execution_environments": {"profiles": {"p": settings}}}).select("p").settings
    assert (resolved.shutdown_timeout_ms, resolved.model_dump().get("lifetime_seconds")) == (
        timeout_ms,
        lifetime,
    )


def test_the_models_defaults_are_the_specs_backend_defaults() -> None:
    # An omitted field takes its model's default, a zero one `x-backend-defaults`: both must be the same.
    defs = validators.bundle()["$defs"]
    for branch in defs["ExecutionProfile"]["oneOf"]:
        name = branch["$ref"].rsplit("/", 1)[-1]
        model = getattr(models, name)
        backend = defs[name]["properties"]["backend"]["const"]
        defaulted = {
            field: info.default
            for field, info in model.model_fields.items()
            if not info.is_required() and info.default is not None
        }
        assert defaulted == backend_defaults(backend), name
        twin = getattr(plain, name)
        plain_defaulted = {
            attribute: default
            for attribute, _, required, default in twin.__fields__
            if not required and default is not None
        }
        assert plain_defaulted == backend_defaults(backend), name


def test_local_is_always_there_and_the_default() -> None:
    profile = parse({}).select()
    assert (profile.name, profile.backend, profile.settings.shutdown_timeout_ms) == ("local", "local", 7000)


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"backend": "nomad"}, "profile 'p': backend: 'nomad' is not one of"),
        ({"backend": "docker", "workspace": "/w"}, "profile 'p': image: 'image' is a required property"),
        (
            {"backend": "docker", "image": "i", "workspace": "/w", "shutdown_timeout_ms": 2_147_483_648},
            "profile 'p': shutdown_timeout_ms: 2147483648 is greater than the maximum",
        ),
        (
            {"backend": "docker", "image": "i", "workspace": "/w", "shutdown_timeout_ms": -1},
            "shutdown_timeout_ms",
        ),
        (
            {"backend": "docker", "image": "i", "workspace": "/w", "host_workspace": "rel"},
            "profile 'p': host_workspace",
        ),
        ({"backend": "ssh", "host": "h", "workspace": "/w", "port": 0}, "profile 'p': port: 0 is less than"),
        (
            {"backend": "docker", "image": "i", "workspace": "/w", "gpus": 1},
            "profile 'p': gpus: Additional properties",
        ),
    ],
)
def test_a_bad_profile_is_an_error_naming_profile_and_field(profile: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError) as raised:
        parse({"execution_environments": {"profiles": {"p": profile}}}, "cfg.json")
    assert str(raised.value).startswith("cfg.json: ") and message in str(raised.value)


def test_a_bad_profile_names_every_error_at_once(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        ok={"backend": "local"},
        p={"backend": "docker", "image": "i", "workspace": "relative", "cpus": -1, "memory_mb": "2048"},
    )
    with pytest.raises(ProfileError) as raised:
        parse(json.loads(path.read_text()), str(path))
    lines = str(raised.value).splitlines()
    assert sorted(line.split(": ")[2] for line in lines) == ["cpus", "memory_mb", "workspace"], lines
    assert all(line.startswith(f"{path}: profile 'p': ") for line in lines), lines


async def test_the_adapter_reports_every_error_of_a_bad_file_before_running_anything(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        a={"backend": "ssh", "host": "h", "workspace": "/w", "port": 0},
        b=command_profile(["x"], shutdown_grace_ms=5),
    )
    client = await adapter(path, "a")
    outcome = await client.close(budget=DEADLINE)
    assert outcome.returncode == 2
    assert outcome.stderr.decode().splitlines() == [
        f"wuu-host: {path}: profile 'a': port: 0 is less than the minimum of 1",
        f"wuu-host: {path}: profile 'b': shutdown_grace_ms: Additional properties are not allowed "
        "('shutdown_grace_ms' was unexpected)",
    ]


def test_a_default_that_names_no_profile_is_an_error() -> None:
    with pytest.raises(ProfileError, match=r"execution_environments\.default: no profile is named 'nope'"):
        parse({"execution_environments": {"default": "nope"}})


def test_local_cannot_name_a_profile() -> None:
    with pytest.raises(ProfileError, match="profile 'local': the name is reserved"):
        parse({"execution_environments": {"profiles": {"local": {"backend": "local"}}}})


def test_a_missing_forwarded_variable_is_named() -> None:
    profile = parse(
        {"execution_environments": {"profiles": {"p": command_profile(["x"], forward_env=["A", "B"])}}}
    )
    with pytest.raises(ProfileError, match="profile 'p': forward_env: B not set"):
        profile.select("p").forwarded_environment({"A": "1"})
    assert profile.select("p").forwarded_environment({"A": "1", "B": "2", "C": "3"}) == {"A": "1", "B": "2"}


# --- backends that cannot be served -----------------------------------------------------------------


def test_an_environment_that_cannot_be_served_is_unavailable_not_a_bad_profile() -> None:
    settings = {"backend": "modal", "image": "i", "workspace": "/w", "shared": True}
    profile = parse({"execution_environments": {"profiles": {"cloud": settings}}}).select("cloud")
    with pytest.raises(BackendUnavailable, match="profile 'cloud': shared: a modal sandbox shared by"):
        environment_for(profile)
    assert issubclass(BackendUnavailable, EnvironmentUnavailable)
    assert not issubclass(EnvironmentUnavailable, ProfileError) and not issubclass(
        ProfileError, EnvironmentUnavailable
    )


def test_a_missing_sdk_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = parse(
        {
            "execution_environments": {
                "profiles": {"remote": {"backend": "ssh", "host": "h", "workspace": "/w"}}
            }
        }
    ).select("remote")
    monkeypatch.delitem(sys.modules, "wuu.host.backends.ssh", raising=False)
    monkeypatch.setitem(sys.modules, "asyncssh", None)  # as if it were not installed
    with pytest.raises(
        BackendUnavailable, match=r"the ssh backend needs the asyncssh SDK: pip install 'wuu\[ssh\]'"
    ):
        environment_for(profile)


async def test_the_adapter_refuses_an_environment_it_cannot_serve_with_status_2(tmp_path: Path) -> None:
    path = config(tmp_path, cloud={"backend": "vercel", "image": "i", "workspace": "/w", "shared": True})
    client = await adapter(path, "cloud")
    outcome = await client.close(budget=DEADLINE)
    assert outcome.returncode == 2
    assert outcome.stderr == (
        b"wuu-host: profile 'cloud': shared: a vercel sandbox shared by conversations is not available yet "
        b"(omit `shared`: each conversation gets its own)\n"
    )


# --- the adapter bridge ---------------------------------------------------------------------------------


async def test_startup_with_a_missing_forwarded_variable_is_rejected_before_any_execution(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "never"
    path = config(tmp_path, p=command_profile(["sh", "-c", f"touch {marker}"], forward_env=["WUU_ABSENT"]))
    client = await adapter(path, "p")
    outcome = await client.close(budget=DEADLINE)
    assert outcome.returncode == 2
    assert b"forward_env: WUU_ABSENT not set" in outcome.stderr
    assert not marker.exists()


async def test_only_the_named_variables_travel_in_the_binding(tmp_path: Path) -> None:
    path = config(tmp_path, p=command_profile(NATIVE_WORKER, forward_env=["WUU_FORWARDED"]))
    client = await adapter(path, "p", {"WUU_FORWARDED": "yes", "WUU_NOT_FORWARDED": "no"})
    try:
        await initialize(client, tmp_path / "ws")
        reply = await client.request("execute", tool_request("exec_command", mode="unconfined", argv=["env"]))
        output = ok(reply)["output"]
        assert "WUU_FORWARDED=yes" in output and "WUU_NOT_FORWARDED" not in output
        again = await client.request("initialize", binding(tmp_path / "ws"))
        assert "data" in again, "an equal re-initialize stays equal after forwarding"
    finally:
        await client.close()


async def test_a_protocol_mismatch_stops_before_any_execution(tmp_path: Path) -> None:
    path = config(tmp_path, p=command_profile(NATIVE_WORKER))
    client = await adapter(path, "p")
    try:
        reply = await client.request("initialize", binding(tmp_path / "ws", version=3))
        assert code(reply) == "protocol_mismatch"
        write = tool_request("write_file", mode="unconfined", path="x", content="x")
        assert code(await client.request("execute", write)) == "not_initialized"
        assert not (tmp_path / "ws").exists()
    finally:
        await client.close()


async def test_the_shutdown_budget_bounds_eof_to_exit_and_a_miss_is_reported(tmp_path: Path) -> None:
    path = config(tmp_path, p=command_profile(SDK_WORKER, shutdown_timeout_ms=300))
    client = await adapter(path, "p", {"WUU_TEST_CLOSE_HANGS": "1"})
    await initialize(client, tmp_path / "ws")
    started = asyncio.get_running_loop().time()
    outcome = await client.close(budget=DEADLINE)
    assert asyncio.get_running_loop().time() - started < 5
    assert outcome.returncode == 1
    assert b"did not exit within its shutdown budget of 0.3 s" in outcome.stderr


async def test_a_worker_killed_mid_request_is_a_clear_error_not_a_hang(tmp_path: Path) -> None:
    path = config(tmp_path, p=command_profile(NATIVE_WORKER))
    client = await adapter(path, "p")
    await initialize(client, tmp_path / "ws")
    sleep = tool_request("exec_command", mode="unconfined", argv=["sleep", "1000"])
    pending = asyncio.create_task(client.request("execute", sleep))
    assert client.process is not None
    worker = children(client.process.pid)[0]
    # Mid-request: the worker runs the request's command when it is killed.
    await until(lambda: children(worker), "the worker to run the command")
    command = children(worker)[0]
    try:
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(ConnectionLost, match="outcome of the call is unknown"):
            await asyncio.wait_for(pending, DEADLINE)
        outcome = await client.close(budget=DEADLINE)
        assert outcome.returncode == 1
        assert b"the worker exited with status -9" in outcome.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(command, signal.SIGKILL)  # the killed worker could not end its command


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
@pytest.mark.parametrize("backend", ["local", "command"])
async def test_a_signal_ends_the_connection_like_eof(
    tmp_path: Path, backend: str, signum: signal.Signals
) -> None:
    profile = command_profile(NATIVE_WORKER) if backend == "command" else {"backend": "local"}
    client = await adapter(config(tmp_path, p=profile), "p")
    await initialize(client, tmp_path / "ws")
    start = {"argv": ["sleep", "300"], "permission_mode": "unconfined", "operation_id": "op-signal"}
    record = ok(await client.request("process/start", start))
    assert client.process is not None
    [worker] = children(client.process.pid)
    assert alive(record["pid"])
    client.process.send_signal(signum)
    # SIGTERM and SIGINT: the adapter ends by itself, after a clean shutdown (status 0). SIGKILL: the
    # worker's input closes with the adapter, so the worker ends all the same.
    returncode = await asyncio.wait_for(client.process.wait(), DEADLINE)
    assert returncode == (-signum if signum == signal.SIGKILL else 0), (await client.close()).stderr
    await until(lambda: not alive(worker) and not alive(record["pid"]), "the worker and its process to end")
    await client.close()


def test_the_readmes_profiles_are_valid() -> None:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Execution environments", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    configuration = parse(json.loads(block), "README.md")
    backends = {profile.backend for profile in configuration.profiles.values()}
    assert backends == {"local", "command", "docker", "ssh"}
    assert configuration.select().name == "isolated"


async def test_closing_a_local_environment_ends_no_other_child_of_its_process() -> None:
    # As in a user host, which runs its executors' workers itself: the process has a child of its own besides
    # the worker (the store's writer, another worker). Ending "orphans" there would end that child too.
    other = await asyncio.create_subprocess_exec("sleep", "600")
    try:
        profile = parse({"execution_environments": {"profiles": {"p": {"backend": "local"}}}}).select("p")
        environment = environment_for(profile)
        await environment.start()
        await environment.close(DEADLINE)  # EOF: the worker exits 0
        assert other.returncode is None and alive(other.pid), "closing the environment ended another child"
    finally:
        other.kill()
        await other.wait()


async def test_a_local_profile_gives_its_file_roots_to_a_binding_that_names_none(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    path = config(tmp_path, p={"backend": "local", "file_roots": [{"path": str(notes), "kind": "workspace"}]})
    client = await adapter(path, "p")
    try:
        await initialize(client, tmp_path / "ws")
        write = tool_request("write_file", path=str(notes / "a.txt"), content="through the profile")
        assert ok(await client.request("execute", write))["is_error"] is False
        assert (notes / "a.txt").read_text() == "through the profile"
        again = await client.request("initialize", binding(tmp_path / "ws"))
        assert "data" in again, "an equal re-initialize stays equal after the file roots are added"
    finally:
        await client.close()
    # A binding's own file roots (none at all, here) win over the profile's.
    client = await adapter(path, "p")
    try:
        await client.request("initialize", {**binding(tmp_path / "ws2"), "file_roots": []})
        write = tool_request("write_file", path=str(notes / "b.txt"), content="x")
        assert code(await client.request("execute", write)) == "path_outside_root"
    finally:
        await client.close()


async def test_a_local_profile_without_tcp_keeps_every_binding_off_tcp(tmp_path: Path) -> None:
    path = config(tmp_path, p={"backend": "local", "command_network": "no_tcp"})
    client = await adapter(path, "p")
    try:
        await initialize(client, tmp_path / "ws", command_network="unrestricted")
        bind = "import socket; socket.socket().bind(('127.0.0.1', 0)); print('bound')"
        reply = await client.request("execute", tool_request("exec_command", argv=["python3", "-c", bind]))
        assert "PermissionError" in ok(reply)["output"]
        again = await client.request("initialize", binding(tmp_path / "ws", command_network="unrestricted"))
        assert "data" in again, "an equal re-initialize stays equal after the profile's policy is applied"
    finally:
        await client.close()
