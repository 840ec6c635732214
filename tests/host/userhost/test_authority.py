"""The authority of a user host (spec/schema/userhost/initialize.schema.json): what `initialize` reports, and
the start checks of the binding and the isolation mode, which refuse to start before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.host.userhost.conftest import Connect
from wuu.generated import validators
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UnixServer, UserHost
from wuu.host.userhost.authority import SERVER_INFO, StorageLayout
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.errors import UserHostStartError

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


async def test_the_storage_is_created_private_under_the_bound_space(home: Path) -> None:
    host = await UserHost.start(user_space_id="alice.1", product_domain="coding", home=home)
    try:
        assert sorted(everything_under(home)) == [
            "user-spaces",
            "user-spaces/alice.1",
            "user-spaces/alice.1/coding",
            "user-spaces/alice.1/coding/files",
            "user-spaces/alice.1/coding/state",
        ]
        for leaf in ("files", "state"):
            assert (home / "user-spaces/alice.1/coding" / leaf).stat().st_mode & 0o777 == 0o700
    finally:
        await host.close()


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
