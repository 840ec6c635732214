"""The user host (`wuu.host.userhost`): one execution authority bound to a user space and product domain,
served to clients over NDJSON (stdio, a Unix socket), gRPC and authenticated HTTP by the user-host RPC of
spec/schema/userhost/.

The embedding API: `UserHost.start(...)` binds and starts the authority; `serve_stdio`, `UnixServer.start`,
`GrpcServer.start` and `HttpServer.start` (with the space's `TokenStore`) attach transports; plugins
(`Plugin`) serve the catalog's plugin methods. The clients are in `wuu.host.userhost.client`. Where a space's
data lives, and the presence lock a host holds for its life, are `wuu.host.userhost.storage`; the legacy
review-ledger migration (`wuu.host.userhost.review`) builds on the user host, which never imports it.

The names below load on first use (PEP 562): a process that runs one part of the user host (the store's
writer process, a client) does not pay for the rest, nor a host that serves NDJSON alone for grpc and
aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wuu.worker.lazy_names import loader

if TYPE_CHECKING:
    from .address import GrpcAddress, GrpcAddressError, HttpAddress, HttpAddressError
    from .authority import UserHost
    from .errors import UserHostError, UserHostStartError
    from .grpc_service import GrpcServer
    from .http import HttpServer
    from .plugins import Plugin, PluginCall
    from .services import Caller, HostServices
    from .stdio import serve_stdio
    from .storage.layout import StorageLayout
    from .tokens import TokenError, TokenStore
    from .unix import SocketInUse, UnixServer

_MODULE_OF = {
    "Caller": "services",
    "GrpcAddress": "address",
    "GrpcAddressError": "address",
    "GrpcServer": "grpc_service",
    "HostServices": "services",
    "HttpAddress": "address",
    "HttpAddressError": "address",
    "HttpServer": "http",
    "Plugin": "plugins",
    "PluginCall": "plugins",
    "SocketInUse": "unix",
    "StorageLayout": "storage.layout",
    "TokenError": "tokens",
    "TokenStore": "tokens",
    "UnixServer": "unix",
    "UserHost": "authority",
    "UserHostError": "errors",
    "UserHostStartError": "errors",
    "serve_stdio": "stdio",
}

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


__getattr__ = loader(__name__, _MODULE_OF)
