"""The cloud backends (`modal`, `daytona`, `vercel`): MAPPING TESTS, never end-to-end. No provider can be
reached without its credentials, so these check, offline, what the profile becomes in each provider's own
SDK request objects, that no credential of the host's environment is in them, and the failure modes that
need no provider (a missing SDK, a shared profile). A live run needs the provider's login.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wuu.host.backends import cloud_transport
from wuu.host.backends.cloud import TRANSPORT, CloudEnvironment
from wuu.host.backends.conversations import environment_directory
from wuu.host.errors import BackendUnavailable
from wuu.host.profiles import parse

SECRET = "credential-that-must-not-travel"


def environment(settings: dict[str, Any], environ: dict[str, str] | None = None) -> CloudEnvironment:
    profile = parse({"execution_environments": {"profiles": {"p": settings}}}).select("p")
    return CloudEnvironment(profile, {"WUU_HOME": "/home/me/.wuu", **(environ or {})})


def config(backend: str, **settings: Any) -> cloud_transport.Config:
    made = environment(
        {"backend": backend, "image": "registry.example/wuu:1", "workspace": "/ws", **settings}
    )
    found: cloud_transport.Config = made.config  # type: ignore[assignment]
    return found


def test_the_adapter_runs_the_transport_with_the_profiles_interpreter() -> None:
    made = environment(
        {
            "backend": "modal",
            "image": "i",
            "workspace": "/ws",
            "persistent": True,
            "python": "/opt/sdk/bin/python",
        },
        {"WUU_CONVERSATION": "conv-1"},
    )
    argv = list(made._argv)
    assert argv[:3] == ["/opt/sdk/bin/python", "-I", TRANSPORT]
    sent = json.loads(argv[3])
    assert sent == made.config
    again = environment(
        {"backend": "modal", "image": "i", "workspace": "/ws", "persistent": True},
        {"WUU_CONVERSATION": "conv-1"},
    )
    assert again.config["name"] == sent["name"], "a persistent sandbox's name is stable per conversation"
    profile = parse(
        {
            "execution_environments": {
                "profiles": {"p": {"backend": "modal", "image": "i", "workspace": "/ws"}}
            }
        }
    ).select("p")
    assert (
        sent["state"]
        == str(environment_directory(profile, "conv-1", {"WUU_HOME": "/home/me/.wuu"})) + ".json"
    )
    one, two = (environment({"backend": "vercel", "image": "i", "workspace": "/ws"}) for _ in range(2))
    assert one.config["name"] != two.config["name"], "without retention, a sandbox of its own each time"


def test_a_shared_cloud_profile_is_refused() -> None:
    with pytest.raises(
        BackendUnavailable, match="shared: a daytona sandbox shared by conversations is not available"
    ):
        environment({"backend": "daytona", "image": "i", "workspace": "/ws", "shared": True})


def test_a_missing_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vercel", None)  # as if it were not installed
    with pytest.raises(
        BackendUnavailable, match=r"the vercel backend needs its SDK: pip install 'wuu\[vercel\]'"
    ):
        environment({"backend": "vercel", "image": "i", "workspace": "/ws"})


@pytest.mark.skipif(shutil.which("python3") is None, reason="no system python3 to stand for an interpreter")
def test_an_interpreter_without_the_sdk_is_a_clear_error(tmp_path: Path) -> None:
    """The transport run by an interpreter that lacks the SDK (`python3 -I` has none of this venv's) exits 2
    saying so, before it provisions anything."""
    settings = {"backend": "modal", "image": "i", "workspace": "/ws"}
    sent = json.dumps(environment(settings).config)
    probe = subprocess.run(["python3", "-I", "-c", "import modal"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("the system python3 has the modal SDK")
    run = subprocess.run(
        ["python3", "-I", TRANSPORT, sent], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 2, run
    assert "wuu modal: the modal SDK is not installed for" in run.stderr


@pytest.mark.parametrize(
    ("backend", "says"),
    [
        ("modal", "AuthError: Token missing"),
        ("daytona", "DaytonaAuthenticationError: Authentication credentials not found"),
        ("vercel", "SandboxCredentialsError: Missing credentials"),
    ],
)
async def test_missing_credentials_end_the_connection_with_the_providers_message(
    tmp_path: Path, backend: str, says: str
) -> None:
    """Through `wuu-host adapter`, with no login of the provider (and its API pointed at a closed local
    port, so nothing leaves this machine): the connection ends before `initialize`, saying why."""
    from wuu.worker.client import ConnectionLost, WorkerClient

    path = tmp_path / "config.json"
    profile = {"backend": backend, "image": "registry.example/wuu:1", "workspace": "/ws"}
    path.write_text(
        json.dumps({"execution_environments": {"profiles": {"cloud": profile}}}), encoding="utf-8"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "MODAL_SERVER_URL": "http://127.0.0.1:9",
        "DAYTONA_API_URL": "http://127.0.0.1:9/api",
    }
    argv = [sys.executable, "-m", "wuu.host", "adapter", "--config", str(path), "--profile", "cloud"]
    client = await WorkerClient.spawn(argv, env=env, cwd=tmp_path)
    with pytest.raises(ConnectionLost):
        await asyncio.wait_for(
            client.request("initialize", {"version": 4, "root": "/ws", "session": "s"}), 60
        )
    outcome = await client.close(60)
    assert outcome.returncode != 0
    assert f"wuu {backend}: {says}".encode() in outcome.stderr, outcome.stderr


# --- Modal ------------------------------------------------------------------------------------------


def test_modal_maps_onto_the_sandbox_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    import modal
    from modal._utils.async_utils import synchronizer
    from modal.sandbox._common import SandboxCreateArgs, SandboxCreateCommon
    from modal.secret import _secret_sources
    from modal_proto import api_pb2

    monkeypatch.setenv("MODAL_TOKEN_ID", SECRET)
    monkeypatch.setenv("MODAL_TOKEN_SECRET", SECRET)
    mapped = config("modal", cpus=1.5, memory_mb=2048, network="none", lifetime_seconds=900)
    image = synchronizer._translate_in(modal.Image.from_id("im-retained"))
    arguments = cloud_transport.modal_create_arguments(mapped, image)
    definition = SandboxCreateCommon(
        SandboxCreateArgs(args=("sleep", "infinity"), **arguments), secrets=[]
    ).definition(cloud_bucket_mounts=[])
    assert definition.image_id == "im-retained"
    assert definition.resources.milli_cpu == 1500 and definition.resources.memory_mb == 2048
    assert definition.timeout_secs == 900
    assert definition.network_access.network_access_type == api_pb2.NetworkAccess.BLOCKED
    assert _secret_sources([], arguments["env"]) == [], "no environment variable is sent"
    assert SECRET.encode() not in definition.SerializeToString()
    outbound = cloud_transport.modal_create_arguments(config("modal"), image)
    assert outbound["block_network"] is False and outbound["cpu"] is None and outbound["memory"] is None
    assert outbound["timeout"] == 600, "0 or omitted lifetime is 600 s"


# --- Daytona ----------------------------------------------------------------------------------------


async def captured_daytona_request(params: Any) -> dict[str, Any]:
    """The CreateSandbox request the Daytona SDK builds from `params`, caught before it is sent."""
    from daytona import AsyncDaytona, DaytonaConfig

    client = AsyncDaytona(DaytonaConfig(api_key="offline", api_url="http://127.0.0.1:9/api", target="us"))
    seen: dict[str, Any] = {}

    async def create_sandbox(request: Any, **_: Any) -> Any:
        seen["request"] = request
        raise RuntimeError("offline")

    client._sandbox_api.create_sandbox = create_sandbox  # type: ignore[method-assign]
    try:
        with pytest.raises(Exception, match="offline"):
            await client.create(params, timeout=0)
    finally:
        await client.close()
    found: dict[str, Any] = seen["request"].to_dict()
    return found


async def test_daytona_maps_onto_the_create_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", SECRET)
    mapped = config("daytona", cpus=2, memory_mb=1500, network="none", lifetime_seconds=90, persistent=True)
    request = await captured_daytona_request(cloud_transport.daytona_create_params(mapped))
    assert request["cpu"] == 2 and request["memory"] == 2, "whole cores; 1500 MiB rounds up to 2 GiB"
    assert request["networkBlockAll"] is True
    assert request["autoStopInterval"] == 2, "90 s is 2 whole minutes"
    assert request["autoDeleteInterval"] == -1, "retained: never deleted"
    assert request["name"] == mapped["name"]
    assert request["buildInfo"]["dockerfileContent"] == "FROM registry.example/wuu:1\n"
    assert request.get("env", {}) == {} and SECRET not in json.dumps(request)
    ephemeral = await captured_daytona_request(cloud_transport.daytona_create_params(config("daytona")))
    assert ephemeral["autoDeleteInterval"] == 0 and ephemeral["networkBlockAll"] is False
    assert "cpu" not in ephemeral or ephemeral["cpu"] is None


# --- Vercel -----------------------------------------------------------------------------------------


def test_vercel_maps_onto_the_create_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from vercel.sandbox._internal.api_client import _CreateSandboxRequest

    monkeypatch.setenv("VERCEL_TOKEN", SECRET)
    mapped = config("vercel", cpus=2, network="none", lifetime_seconds=300, persistent=True)
    arguments = cloud_transport.vercel_create_arguments(mapped)
    body = _CreateSandboxRequest(
        project_id="prj_offline",
        timeout=arguments["execution_time_limit"],
        resources=arguments["resources"],
        persistent=arguments["persistent"],
        network_policy=arguments["network_policy"],
        env=arguments["env"],
    ).to_api_dict()
    assert body["timeout"] == 300_000, "the lifetime, in milliseconds"
    assert body["resources"] == {"vcpus": 2}
    assert body["persistent"] is True
    assert body["networkPolicy"] == {"mode": "deny-all"}
    assert body.get("env", {}) == {} and SECRET not in json.dumps(body)
    assert arguments["name"] == mapped["name"] and arguments["image"] == "registry.example/wuu:1"
    assert cloud_transport.vercel_create_arguments(config("vercel"))["network_policy"] is None


# --- the transport's own rules ----------------------------------------------------------------------


def test_the_worker_is_told_when_nothing_was_retained() -> None:
    mapped = config("modal")
    assert cloud_transport.worker_argv(mapped, new=True) == [
        "python3",
        "-m",
        "wuu.worker",
        "--new-environment",
    ]
    assert cloud_transport.worker_argv(mapped, new=False) == ["python3", "-m", "wuu.worker"]
    own = config("modal", worker=["/opt/w", "--x"])
    assert cloud_transport.worker_argv(own, new=True) == ["/opt/w", "--x"], (
        "a profile's own worker runs as given"
    )


def test_a_reconnect_is_an_initialize_that_requires_the_workspace() -> None:
    frame = {"id": "h1", "method": "initialize", "data": {"version": 4, "require_existing_workspace": True}}
    assert cloud_transport.is_reconnect(json.dumps(frame).encode() + b"\n")
    for other in (
        {**frame, "data": {"version": 4, "require_existing_workspace": False}},
        {**frame, "method": "execute"},
        {"id": "h1", "error": "require_existing_workspace initialize"},
    ):
        assert not cloud_transport.is_reconnect(json.dumps(other).encode()), other
    assert not cloud_transport.is_reconnect(b'{"method": "initialize", require_existing_workspace')


def test_the_transport_imports_nothing_of_wuu() -> None:
    """It runs in the profile's interpreter, which may have the SDK and nothing else."""
    source = Path(TRANSPORT).read_text(encoding="utf-8")
    assert "import wuu" not in source and "from wuu" not in source and "from ." not in source
    assert asyncio.iscoroutinefunction(cloud_transport.relay)
