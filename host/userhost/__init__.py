"""The user host (`wuu.host.userhost`): one execution authority bound to a user space and product domain,
served to clients over NDJSON (stdio, a Unix socket) by the user-host RPC of spec/schema/userhost/.

The embedding API: `UserHost.start(...)` binds and starts the authority; `serve_stdio` and
`UnixServer.start` attach transports; plugins (`Plugin`) serve the catalog's plugin methods.
"""

from .authority import StorageLayout, UserHost
from .errors import UserHostError, UserHostStartError
from .plugins import Plugin, PluginCall
from .services import Caller, HostServices
from .stdio import serve_stdio
from .unix import SocketInUse, UnixServer

__all__ = [
    "Caller",
    "HostServices",
    "Plugin",
    "PluginCall",
    "SocketInUse",
    "StorageLayout",
    "UnixServer",
    "UserHost",
    "UserHostError",
    "UserHostStartError",
    "serve_stdio",
]
