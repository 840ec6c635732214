"""Cases of `initialize`: the binding and isolation report, the protocol version, calls before it."""

from __future__ import annotations

from wuu.generated.catalog import USERHOST_PROTOCOL_VERSION

from ..session import PRODUCT_DOMAIN, USER_SPACE, HostSession
from ..suite import USERHOST


@USERHOST.case("initialize.binding-reported")
async def binding_reported(host: HostSession) -> None:
    """initialize names the user space and domain given to the host, the version asked for, and
    `{"memory": "logical", "host": "unverified"}`."""
    result = await host.initialize()
    host.expect(result["user_space_id"] == USER_SPACE, f"user_space_id is {result['user_space_id']!r}")
    host.expect(result["product_domain"] == PRODUCT_DOMAIN, f"product_domain is {result['product_domain']!r}")
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
