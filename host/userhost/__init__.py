"""The user host (`wuu.host.userhost`): one execution authority bound to a user space and product domain,
served to clients over NDJSON (stdio, a Unix socket), gRPC and authenticated HTTP by the user-host RPC of
spec/schema/userhost/.

The embedding API: `UserHost.start(...)` binds and starts the authority; `serve_stdio`, `UnixServer.start`,
`GrpcServer.start` and `HttpServer.start` (with the space's `TokenStore`) attach transports; plugins
(`Plugin`) serve the catalog's plugin methods. The clients are in `wuu.host.userhost.client`. Where a space's
data lives, and the presence lock a host holds for its life, are `wuu.host.userhost.storage`; the legacy
review-ledger migration (`wuu.host.userhost.review`) builds on the user host, which never imports it.
"""

from typing import TYPE_CHECKING, Any

from .address import GrpcAddress, GrpcAddressError, HttpAddress, HttpAddressError
from .authority import UserHost
from .errors import UserHostError, UserHostStartError
from .plugins import Plugin, PluginCall
from .services import Caller, HostServices
from .stdio import serve_stdio
from .storage.layout import StorageLayout
from .tokens import TokenError, TokenStore
from .unix import SocketInUse, UnixServer

__all__ = [
    "Caller",
    "GrpcAddress",
    "GrpcAddressError",
    "GrpcServer",
    "HostServices",
    "HttpAddress",
    "HttpAddressError",
    "HttpServer",
    "Plugin",
    "PluginCall",
    "SocketInUse",
    "StorageLayout",
    "TokenError",
    "TokenStore",
    "UnixServer",
    "UserHost",
    "UserHostError",
    "UserHostStartError",
    "serve_stdio",
]

if TYPE_CHECKING:
    from .grpc_service import GrpcServer
    from .http import HttpServer


def __getattr__(name: str) -> Any:
    # The gRPC and HTTP servers load their libraries (grpc, aiohttp) only when first named: a host that serves
    # NDJSON alone starts without them.
    if name == "GrpcServer":
        from .grpc_service import GrpcServer

        return GrpcServer
    if name == "HttpServer":
        from .http import HttpServer

        return HttpServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
