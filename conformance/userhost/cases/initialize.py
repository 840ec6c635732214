"""Cases of `initialize` (spec/schema/userhost/initialize.schema.json): the binding and isolation report,
the protocol version, params the client may not send, initialize once, capabilities, the graph every client
sees, calls before it."""

from __future__ import annotations

from typing import Any

from wuu.generated.catalog import USERHOST_PROTOCOL_VERSION

from ..session import USER_SPACE, HostSession, initialize_params
from ..suite import USERHOST


@USERHOST.case("initialize.binding-reported")
async def binding_reported(host: HostSession) -> None:
    """initialize names the user space and domain given to the host, the version asked for, and
    `{"memory": "logical", "host": "unverified"}`."""
    result = await host.initialize()
    host.expect(result["user_space_id"] == USER_SPACE, f"user_space_id is {result['user_space_id']!r}")
    host.expect(
        result["product_domain"] == host.product_domain, f"product_domain is {result['product_domain']!r}"
    )
    host.expect(
        result["protocol_version"] == USERHOST_PROTOCOL_VERSION, "protocol_version is not the one asked"
    )
    isolation = result["user_host_isolation"]
    host.expect(isolation == {"memory": "logical", "host": "unverified"}, f"the isolation is {isolation}")


@USERHOST.case("initialize.first")
async def first(host: HostSession) -> None:
    """`shutdown` and `plugin/client/request` before initialize get not_initialized."""
    await host.error("shutdown", {}, "not_initialized")
    await host.error(
        "plugin/client/request", host.plugin_params("agents.main_session", {}), "not_initialized"
    )
    await host.initialize()


@USERHOST.case("initialize.version-mismatch")
async def version_mismatch(host: HostSession) -> None:
    """initialize asking for version 2 or 2147483647 gets unsupported_protocol_version; the connection stays
    uninitialized (shutdown gets not_initialized) until an initialize for version 1 succeeds."""
    for version in (2, 2_147_483_647):
        await host.error(
            "initialize", initialize_params(protocol_version=version), "unsupported_protocol_version"
        )
        await host.error("shutdown", {}, "not_initialized")
    await host.initialize()


@USERHOST.case("initialize.no-client-binding")
async def no_client_binding(host: HostSession) -> None:
    """initialize naming user_space_id (even the host's own), product_domain, or another unknown field
    (workspace, isolation) gets invalid_params; the connection stays uninitialized until a plain initialize,
    whose binding is still the host's."""
    for extra in (
        {"user_space_id": USER_SPACE},
        {"user_space_id": "someone-else"},
        {"product_domain": host.product_domain},
        {"product_domain": "coding" if host.product_domain == "personal" else "personal"},
        {"workspace": "/tmp"},
        {"user_host_isolation": {"memory": "logical", "host": "verified"}},
    ):
        await host.error("initialize", initialize_params(**extra), "invalid_params")
        await host.error("shutdown", {}, "not_initialized")
    result = await host.initialize()
    host.expect(
        (result["user_space_id"], result["product_domain"]) == (USER_SPACE, host.product_domain),
        f"the binding is {result['user_space_id']!r}/{result['product_domain']!r}",
    )


@USERHOST.case("initialize.params-validated")
async def params_validated(host: HostSession) -> None:
    """initialize without protocol_version or client_info, with a string version, version 0, a client_info
    without version, or a capability name that breaks its pattern gets invalid_params; the connection stays
    uninitialized until a valid initialize."""
    params = initialize_params()
    for bad in (
        {"client_info": params["client_info"]},
        {"protocol_version": params["protocol_version"]},
        initialize_params(protocol_version="1"),
        initialize_params(protocol_version=0),
        initialize_params(client_info={"name": "wuu-conformance"}),
        initialize_params(capabilities=["Not A Name"]),
        initialize_params(capabilities="none"),
    ):
        await host.error("initialize", bad, "invalid_params")
        await host.error("shutdown", {}, "not_initialized")
    await host.initialize()


@USERHOST.case("initialize.already-initialized")
async def already_initialized(host: HostSession) -> None:
    """A second initialize (the same params, or another version) gets already_initialized, and the connection
    stays initialized: a cancel is still answered."""
    await host.initialize()
    await host.error("initialize", initialize_params(), "already_initialized")
    await host.error("initialize", initialize_params(protocol_version=2), "already_initialized")
    result = await host.ok("plugin/client/cancel", {"id": "conformance-nothing"})
    host.expect(result == {"cancelled": False}, f"plugin/client/cancel answered {result}")


UNKNOWN_CAPABILITIES = ["conformance.unknown", "x-wuu-conformance-never-defined"]


@USERHOST.case("initialize.capabilities")
async def capabilities(host: HostSession) -> None:
    """initialize listing capabilities no version defines succeeds, and its result lists only capabilities
    that were asked for; on the socket, a client that lists none, or an empty list, gets none."""
    result = await host.initialize(capabilities=UNKNOWN_CAPABILITIES)
    extra = sorted(set(result["capabilities"]) - set(UNKNOWN_CAPABILITIES))
    host.expect(not extra, f"initialize reports capabilities the client did not ask for: {extra}")
    asking: list[dict[str, Any]] = [{}, {"capabilities": []}]
    for params in asking:
        connection = await host.connect()
        result = await host.initialize(on=connection, **params)
        host.expect(
            result["capabilities"] == [],
            f"with the params {params}, initialize reports {result['capabilities']}",
        )


SHARED = (
    "user_space_id",
    "product_domain",
    "user_host_isolation",
    "composition_profile",
    "graph_generation",
    "plugins",
)
"""What initialize reports alike to every client of an unchanged host."""


@USERHOST.case("initialize.same-graph")
async def same_graph(host: HostSession) -> None:
    """The stdio client and two clients on the socket see the same binding, isolation, composition profile,
    graph generation and plugin inventory."""
    first = await host.initialize()
    for _ in range(2):
        result = await host.initialize(on=await host.connect())
        for name in SHARED:
            host.expect(
                result[name] == first[name],
                f"a socket client sees {name} {result[name]!r}; the stdio client saw {first[name]!r}",
            )


@USERHOST.case("initialize.inventory-ordered")
async def inventory_ordered(host: HostSession) -> None:
    """The plugin inventory lists each plugin_id once, in ascending (code point) order."""
    plugins = [entry["plugin_id"] for entry in (await host.initialize())["plugins"]]
    host.expect(plugins == sorted(set(plugins)), f"the inventory is not ordered by plugin_id: {plugins}")
