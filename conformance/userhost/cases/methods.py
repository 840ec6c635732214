"""Cases of the methods a user host serves (spec/schema/userhost/envelope.schema.json, JsonRpcRequest
`method`): exactly the catalog's client-to-host requests; Coding methods, the host-to-client notification and
plugin methods sent on their own get `unsupported_method`, before initialize too."""

from __future__ import annotations

from ..session import HostSession
from ..suite import USERHOST

CODING_METHODS = [
    "thread/start",
    "thread/list",
    "thread/resume",
    "turn/start",
    "workspace/list",
    "workspace/open",
    "storage/read",
    "storage/write",
    "config/read",
    "config/set",
    "configuration/update",
    "package/install",
    "package/remove",
]
"""Generic Coding thread, workspace, storage, configuration and package methods."""
INVALIDATE_PARAMS = {
    "graph_generation": 1,
    "plugin_id": "wuu.personal",
    "topic": "reactions",
    "session_id": "conformance",
    "message_seqs": [1],
}
"""Params a `plugin/client/invalidate` notification could carry: were the name served as a request, they
would not be what makes it fail."""
PLUGIN_METHODS = ["agents.main_session", "agents.send", "agents.history.read", "host.session.attachment.read"]
"""Plugin methods, which travel only inside `plugin/client/request`."""


async def refused(host: HostSession, methods: list[str], params: dict[str, object]) -> None:
    """Each method gets unsupported_method before initialize and after it."""
    for method in methods:
        await host.error(method, params, "unsupported_method")
    await host.initialize()
    for method in methods:
        await host.error(method, params, "unsupported_method")


@USERHOST.case("methods.coding-refused")
async def coding_refused(host: HostSession) -> None:
    """thread/*, turn/start, workspace/*, storage/*, config/*, configuration/update and package/* get
    unsupported_method, before initialize (not not_initialized) and after it."""
    await refused(host, CODING_METHODS, {})


@USERHOST.case("methods.notification-method-refused")
async def notification_method_refused(host: HostSession) -> None:
    """A request named plugin/client/invalidate, with notification-shaped params, gets unsupported_method
    before initialize and after it."""
    await refused(host, ["plugin/client/invalidate"], INVALIDATE_PARAMS)


@USERHOST.case("methods.plugin-method-wrapped")
async def plugin_method_wrapped(host: HostSession) -> None:
    """agents.main_session, agents.send, agents.history.read and host.session.attachment.read as request
    methods of their own get unsupported_method before initialize and after it."""
    await refused(host, PLUGIN_METHODS, {})
