"""`HOST:PORT` as both TCP listeners read and write it (host/userhost/address.py), and each listener's own
rules on top: HTTP takes any IP address or `localhost`, gRPC a Unix socket or a loopback IP address."""

from __future__ import annotations

from pathlib import Path

import pytest

from wuu.host.userhost.address import (
    GrpcAddress,
    GrpcAddressError,
    HttpAddress,
    HttpAddressError,
    is_loopback_ip,
    join_host_port,
    split_host_port,
)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:65535", ("localhost", 65535)),
        ("host:65536", ("host", None)),
        ("host:", ("host", None)),
        ("host:-1", ("host", None)),
        ("host:\u00b2", ("host", None)),
        ("host:\u0665", ("host", None)),
        (":80", ("", 80)),
        ("no-colon", None),
    ],
)
def test_split_host_port(text: str, parts: tuple[str, int | None] | None) -> None:
    assert split_host_port(text) == parts


def test_join_host_port_brackets_an_ipv6_host() -> None:
    assert join_host_port("::1", 50051) == "[::1]:50051"
    assert join_host_port("127.0.0.1", 8080) == "127.0.0.1:8080"
    for text in ("[::1]:50051", "127.0.0.1:8080"):
        host, port = split_host_port(text) or ("", None)
        assert port is not None and join_host_port(host, port) == text


def test_is_loopback_ip() -> None:
    assert is_loopback_ip("127.0.0.2") and is_loopback_ip("::1")
    assert not is_loopback_ip("10.0.0.1") and not is_loopback_ip("localhost") and not is_loopback_ip("")


def test_http_addresses() -> None:
    assert HttpAddress.parse("[::1]:8080") == HttpAddress("::1", 8080)
    assert HttpAddress.parse("localhost:0").loopback
    assert not HttpAddress.parse("0.0.0.0:80").loopback
    for text, message in [
        ("127.0.0.1", "'127.0.0.1' is not HOST:PORT"),
        ("[]:80", "'[]:80' is not HOST:PORT"),
        ("127.0.0.1:70000", "'127.0.0.1:70000' is not HOST:PORT"),
        ("127.0.0.1:\u00b2", "'127.0.0.1:\u00b2' is not HOST:PORT"),
        ("example.org:80", "'example.org' is not an IP address or localhost"),
    ]:
        with pytest.raises(HttpAddressError) as caught:
            HttpAddress.parse(text)
        assert str(caught.value) == message


def test_grpc_addresses() -> None:
    assert GrpcAddress.parse("[::1]:50051").target == "[::1]:50051"
    assert GrpcAddress.parse("unix:/run/x.sock") == GrpcAddress(socket=Path("/run/x.sock"))
    not_loopback = "the user host serves gRPC only on a Unix socket or on loopback"
    for text, message in [
        ("unix:x.sock", "the socket path must be absolute"),
        ("10.0.0.1:50051", not_loopback),
        ("localhost:50051", not_loopback),
        ("127.0.0.1", not_loopback),
        ("127.0.0.1:http", "the port must be a number from 0 to 65535"),
        ("127.0.0.1:\u00b2", "the port must be a number from 0 to 65535"),
    ]:
        with pytest.raises(GrpcAddressError) as caught:
            GrpcAddress.parse(text)
        assert message in str(caught.value)
