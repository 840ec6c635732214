"""The authority of a user host (spec/schema/userhost/initialize.schema.json): what `initialize` reports, the
start checks of the binding, the isolation mode and the directories under the home, which refuse to start
before anything is written, and one authority per home, user space and product domain.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.host.userhost.conftest import Connect
from wuu.generated import validators
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.authority import SERVER_INFO
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.errors import UserHostStartError
from wuu.host.userhost.storage import PresenceLock, StorageLayout

INIT_PARAMS: dict[str, Any] = {"protocol_version": 1, "client_info": {"name": "t", "version": "1"}}


def everything_under(home: Path) -> list[str]:
    """Every directory and file below `home`, as relative paths."""
    found = []
    for root, dirs, files in os.walk(home):
        found += [os.path.relpath(os.path.join(root, name), home) for name in [*dirs, *files]]
    return found


async def initialize_result(client: UserHostClient, params: dict[str, Any] = INIT_PARAMS) -> dict[str, Any]:
    """The raw result of `initialize`, checked against the spec's result def."""
    response = await client.request("initialize", params, request_id=1)
    assert "result" in response, response
    result: dict[str, Any] = response["result"]
    validators.validate("UserHostInitializeResult", result)
    return result


@pytest.fixture
async def serve(run_dir: Path) -> AsyncIterator[Callable[[UserHost], Awaitable[UserHostClient]]]:
    """Serves a host started by the test on a socket, and connects a client to it; all closed after."""
    opened: list[tuple[UserHost, UnixServer, UserHostClient]] = []

    async def open_client(host: UserHost) -> UserHostClient:
        server = await UnixServer.start(host, run_dir / f"host-{len(opened)}.sock")
        client = await UserHostClient.connect_unix(server.path)
        opened.append((host, server, client))
        return client

    yield open_client
    for host, server, client in opened:
        await client.close()
        await server.close()
        await host.close()


async def test_initialize_reports_the_binding_the_isolation_and_the_graph(connect: Connect) -> None:
    client = await connect()
    assert await initialize_result(client) == {
        "protocol_version": 1,
        "server_info": SERVER_INFO.to_wire(),
        "user_space_id": "local",
        "product_domain": "personal",
        "user_host_isolation": {"memory": "logical", "host": "unverified"},
        "composition_profile": None,
        "graph_generation": 1,
        "plugins": [{"plugin_id": "wuu.test", "fingerprint": "test-1"}],
        "capabilities": [],
    }


async def test_capabilities_the_host_does_not_know_are_ignored(connect: Connect) -> None:
    client = await connect()
    result = await initialize_result(client, {**INIT_PARAMS, "capabilities": ["x.future", "y"]})
    assert result["capabilities"] == []


def modes_under(home: Path) -> dict[str, int]:
    """The permission bits of every directory and file below `home`, by relative path."""
    return {name: stat.S_IMODE((home / name).stat().st_mode) for name in everything_under(home)}


async def test_the_storage_is_created_private_under_the_bound_space(home: Path) -> None:
    host = await UserHost.start(user_space_id="alice.1", product_domain="coding", home=home)
    record = "user-spaces/alice.1/coding/state/authority.json"
    try:
        assert modes_under(home) == {
            "user-spaces": 0o700,
            "user-spaces/alice.1": 0o700,
            "user-spaces/alice.1/coding": 0o700,
            "user-spaces/alice.1/coding/files": 0o700,
            "user-spaces/alice.1/coding/state": 0o700,
            record: 0o600,
        }
        assert json.loads((home / record).read_text()) == {"pid": os.getpid(), "transports": []}
        host.announce(["unix:/run/a.sock", "stdio"])
        assert json.loads((home / record).read_text()) == {
            "pid": os.getpid(),
            "transports": ["unix:/run/a.sock", "stdio"],
        }
    finally:
        await host.close()
    assert not (home / record).exists()  # a host that stopped leaves no record


async def test_a_missing_home_is_created_private_whatever_the_umask(tmp_path: Path) -> None:
    home = tmp_path / "a" / "wuu"
    previous = os.umask(0)
    try:
        host = await UserHost.start(user_space_id="local", product_domain="personal", home=home)
    finally:
        os.umask(previous)
    await host.close()
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert set(modes_under(tmp_path / "a").values()) == {0o700}


# --- one authority per home, user space and product domain -----------------------------------------


async def start_local(home: Path, product_domain: str = "personal", user_space_id: str = "local") -> UserHost:
    return await UserHost.start(user_space_id=user_space_id, product_domain=product_domain, home=home)


async def test_a_second_host_of_the_space_is_refused_naming_the_first(
    home: Path, serve: Callable[[UserHost], Awaitable[UserHostClient]]
) -> None:
    first = await start_local(home)
    client = await serve(first)
    first.announce(["unix:/run/first.sock", "grpc 127.0.0.1:5000"])
    with pytest.raises(UserHostStartError) as raised:
        await start_local(home)
    assert raised.value.code is UserHostErrorCode.USER_HOST_ALREADY_RUNNING
    message = raised.value.message
    assert f"pid {os.getpid()}" in message and "unix:/run/first.sock, grpc 127.0.0.1:5000" in message
    assert str(home / "user-spaces/local/personal/state") in message
    assert (await initialize_result(client))["user_space_id"] == "local"  # the first still serves
    # Another domain, or another space, of the same home has an authority of its own.
    for other in (await start_local(home, "coding"), await start_local(home, user_space_id="other")):
        await other.close()


async def test_a_stopped_host_frees_the_space_and_a_stale_record_does_not_block(home: Path) -> None:
    first = await start_local(home)
    await first.close()
    second = await start_local(home)
    await second.close()
    # What a killed host leaves: its record, naming a process that has ended.
    state = home / "user-spaces/local/personal/state"
    dead = subprocess.Popen(["true"])
    dead.wait()
    (state / "authority.json").write_text(json.dumps({"pid": dead.pid, "transports": ["stdio"]}))
    third = await start_local(home)
    try:
        assert json.loads((state / "authority.json").read_text())["pid"] == os.getpid()
    finally:
        await third.close()


async def test_a_holder_without_a_record_is_named_as_such(home: Path) -> None:
    """The migration holds the lock without a record; so does a host before it has recorded itself. A
    record left by an ended process names nobody."""
    state = home / "user-spaces/local/personal/state"
    state.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (state / "authority.json").write_text(json.dumps({"pid": dead.pid, "transports": ["stdio"]}))
    with PresenceLock.acquire(state), pytest.raises(UserHostStartError) as raised:
        await start_local(home)
    assert raised.value.code is UserHostErrorCode.USER_HOST_ALREADY_RUNNING
    assert "a maintenance command such as `wuu state migrate-personal-review`" in raised.value.message
    assert f"pid {dead.pid}" not in raised.value.message
    assert sorted(path.name for path in state.iterdir()) == [
        "authority.json"
    ]  # the refused host wrote nothing


# --- directories under the home that are not the user's alone --------------------------------------

SPACE_DIRECTORIES = [
    ".",
    "user-spaces",
    "user-spaces/local",
    "user-spaces/local/personal",
    "user-spaces/local/personal/state",
    "user-spaces/local/personal/files",
]


@pytest.mark.parametrize("directory", SPACE_DIRECTORIES)
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
async def test_a_group_or_world_writable_directory_is_refused_before_anything_is_written(
    home: Path, directory: str, mode: int
) -> None:
    (home / directory).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home / directory, mode)
    before = everything_under(home)
    with pytest.raises(UserHostStartError) as raised:
        await start_local(home)
    assert raised.value.code is UserHostErrorCode.USER_HOST_STORAGE_UNSAFE
    assert f"{os.path.normpath(home / directory)} is mode {mode:04o}" in raised.value.message
    assert everything_under(home) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("directory", SPACE_DIRECTORIES)
async def test_a_directory_of_another_user_is_refused_before_anything_is_written(
    home: Path, directory: str
) -> None:
    (home / directory).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home / directory, 0o700)
    os.chown(home / directory, 65534, 65534)
    before = everything_under(home)
    with pytest.raises(UserHostStartError) as raised:
        await start_local(home)
    assert raised.value.code is UserHostErrorCode.USER_HOST_STORAGE_UNSAFE
    assert f"{os.path.normpath(home / directory)} is mode 0700 and owned by uid 65534" in raised.value.message
    assert everything_under(home) == before


async def test_a_file_where_a_directory_belongs_is_refused(home: Path) -> None:
    (home / "user-spaces").write_text("")
    with pytest.raises(UserHostStartError) as raised:
        await start_local(home)
    assert raised.value.code is UserHostErrorCode.USER_HOST_STORAGE_UNSAFE
    assert f"{home / 'user-spaces'} is not a directory" in raised.value.message


async def refused(root: Path, code: UserHostErrorCode, **options: Any) -> None:
    """`UserHost.start` with `options` (home: `root` unless given) fails with `code`, and nothing at all is
    written under `root`."""
    binding: dict[str, Any] = {"user_space_id": "local", "product_domain": "personal", "home": root}
    with pytest.raises(UserHostStartError) as raised:
        await UserHost.start(**{**binding, **options})
    assert raised.value.code is code
    assert raised.value.to_wire()["data"] == {"code": code.value}
    assert everything_under(root) == []


async def test_verified_host_without_a_verifier_is_refused_before_any_file(home: Path) -> None:
    await refused(home, UserHostErrorCode.USER_HOST_ISOLATION_REQUIRED, isolation="verified_host")


def raising(layout: StorageLayout) -> bool:
    raise RuntimeError("no attestation service")


async def false_later(layout: StorageLayout) -> bool:
    return False


@pytest.mark.parametrize(
    "verifier",
    [lambda layout: False, raising, false_later, lambda layout: None],
    ids=["false", "raises", "async-false", "none"],
)
async def test_a_failed_verification_is_refused_before_any_file(
    home: Path, verifier: Callable[[StorageLayout], Any]
) -> None:
    await refused(
        home, UserHostErrorCode.USER_HOST_ISOLATION_REQUIRED, isolation="verified_host", verifier=verifier
    )


async def test_a_passed_verification_reports_a_verified_host(
    home: Path, serve: Callable[[UserHost], Awaitable[UserHostClient]]
) -> None:
    seen: list[tuple[Path, list[str]]] = []

    async def verifier(layout: StorageLayout) -> bool:
        # The verifier runs before the host creates any private state.
        seen.append((layout.root, everything_under(home)))
        return True

    host = await UserHost.start(
        user_space_id="local",
        product_domain="personal",
        home=home,
        isolation="verified_host",
        verifier=verifier,
    )
    assert seen == [(home / "user-spaces" / "local" / "personal", [])]
    result = await initialize_result(await serve(host))
    assert result["user_host_isolation"] == {"memory": "logical", "host": "verified"}


async def test_logical_memory_never_reports_verified(
    home: Path, serve: Callable[[UserHost], Awaitable[UserHostClient]]
) -> None:
    # Even a verifier that would pass does not make a logical_memory host verified.
    host = await UserHost.start(
        user_space_id="local", product_domain="personal", home=home, verifier=lambda layout: True
    )
    result = await initialize_result(await serve(host))
    assert result["user_host_isolation"] == {"memory": "logical", "host": "unverified"}


@pytest.mark.parametrize("mode", ["sandbox", "", "LOGICAL_MEMORY", "verified"])
async def test_an_unknown_isolation_mode_is_refused_before_any_file(home: Path, mode: str) -> None:
    await refused(home, UserHostErrorCode.UNKNOWN_ISOLATION_MODE, isolation=mode)


@pytest.mark.parametrize(
    "options",
    [
        {"user_space_id": ""},
        {"user_space_id": "../escape"},
        {"user_space_id": ".hidden"},
        {"user_space_id": "a" * 129},
        {"product_domain": ""},
        {"product_domain": "Personal"},
        {"product_domain": "personal/../x"},
        {"home": Path("relative/home")},
        # The binding is checked first: a bad binding is reported even with a bad isolation.
        {"user_space_id": "", "isolation": "verified_host"},
        {"product_domain": "", "isolation": "sandbox"},
    ],
    ids=[
        "space-empty",
        "space-dots",
        "space-hidden",
        "space-129",
        "domain-empty",
        "domain-upper",
        "domain-path",
        "home-relative",
        "space-and-isolation",
        "domain-and-isolation",
    ],
)
async def test_a_missing_or_invalid_binding_is_refused_before_any_file(
    home: Path, options: dict[str, Any]
) -> None:
    await refused(home, UserHostErrorCode.USER_HOST_BINDING_REQUIRED, **options)
