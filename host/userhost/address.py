"""`HOST:PORT`, as the TCP listeners' flags take it (`--http`, `--grpc`) and as they name where they listen, and
the addresses of the HTTP and gRPC servers (kept apart from the servers, so that parsing a flag imports no
server library)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path


def split_host_port(text: str) -> tuple[str, int | None] | None:
    """The host (without the brackets of `[IPV6]:PORT`) and the port of `HOST:PORT`; None when `text` has no
    colon, and the port None when it is not a number from 0 to 65535."""
    host, colon, port = text.rpartition(":")
    if not colon:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    # isdigit alone admits digits such as "²" that int() refuses.
    return host, int(port) if port.isascii() and port.isdigit() and int(port) <= 65535 else None


def join_host_port(host: str, port: int) -> str:
    """`HOST:PORT`, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback_ip(host: str) -> bool:
    """Whether `host` is an IP address only this machine can reach (a host name is not)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpAddressError(ValueError):
    """An `--http` address that is not HOST:PORT."""


@dataclass(frozen=True)
class HttpAddress:
    """Where the HTTP server listens: an IP address (or `localhost`) and a port (0 picks one)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> HttpAddress:
        """`127.0.0.1:8080`, `[::1]:8080` or `localhost:8080`."""
        host, port = split_host_port(text) or ("", None)
        if not host or port is None:
            raise HttpAddressError(f"{text!r} is not HOST:PORT")
        if host != "localhost":
            try:
                ipaddress.ip_address(host)
            except ValueError:
                raise HttpAddressError(f"{host!r} is not an IP address or localhost") from None
        return cls(host, port)

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the address."""
        return self.host == "localhost" or is_loopback_ip(self.host)


class GrpcAddressError(ValueError):
    """The address is neither `unix:PATH` (absolute) nor a loopback IP address with a port."""


@dataclass(frozen=True)
class GrpcAddress:
    """Where a user host serves gRPC: a Unix socket, or a loopback TCP address (port 0: any free port)."""

    socket: Path | None = None
    host: str = ""
    port: int = 0

    @classmethod
    def parse(cls, text: str) -> GrpcAddress:
        """`unix:PATH` or `IP:PORT` with a loopback IP (`127.0.0.1:50051`, `[::1]:50051`); GrpcAddressError
        for anything else, remote or wildcard addresses and host names included."""
        if text.startswith("unix:"):
            path = Path(text[5:])
            if not path.is_absolute():
                raise GrpcAddressError(f"{text!r}: the socket path must be absolute")
            return cls(socket=path)
        parts = split_host_port(text)
        if parts is None or not is_loopback_ip(parts[0]):
            raise GrpcAddressError(
                f"{text!r} is not unix:PATH or a loopback address with a port (127.0.0.1:PORT): "
                "the user host serves gRPC only on a Unix socket or on loopback"
            )
        host, port = parts
        if port is None:
            raise GrpcAddressError(f"{text!r}: the port must be a number from 0 to 65535")
        return cls(host=host, port=port)

    @property
    def target(self) -> str:
        """The address as gRPC names it."""
        if self.socket is not None:
            return f"unix:{self.socket}"
        return join_host_port(self.host, self.port)

    def __str__(self) -> str:
        return self.target
