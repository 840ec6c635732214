"""`HOST:PORT`, as the TCP listeners' flags take it (`--http`, `--grpc`) and as they name where they listen."""

from __future__ import annotations

import ipaddress


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
