"""The Docker Engine API, spoken over the engine's socket with the standard library only.

The docker backend makes a handful of calls (inspect, create, start, attach, exec, wait, remove). Each is one
HTTP/1.1 exchange on a connection of its own (`Connection: close`), or an upgraded connection that becomes the
two-way stream of an attach or an exec. An HTTP client library would cost an adapter, a fresh process per
connection, a tenth of a second to import (the docker SDK with requests; http.client alone, a third of that).

The engine is `DOCKER_HOST` (`unix://PATH` or a plain `tcp://HOST:PORT`), else the default socket. TLS engines
(`DOCKER_TLS_VERIFY`, `https://`) and `ssh://` engines are refused (`Unsupported`): the worker's stream is
the connection's own socket. Requests use the API version the engine reports (`GET /version`), as the docker
SDK does, so an engine of any supported version is spoken to in its own version.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

DEFAULT_HOST = "unix:///var/run/docker.sock"
TIMEOUT_S = 60.0
"""A request's timeout when the call names none (the docker SDK's default)."""
_HEAD_END = b"\r\n\r\n"
FRAME = struct.Struct(">BxxxL")
STDOUT, STDERR = 1, 2
"""The header and streams of a multiplexed (non-TTY) attach or exec: each chunk is an 8-byte header (stream, 0, 0, 0,
size) and its bytes."""


class EngineError(Exception):
    """The engine could not be reached, or refused a request."""


class Unreachable(EngineError):
    """No exchange with the engine: the connection failed, timed out, or was cut."""


class Unsupported(EngineError):
    """`DOCKER_HOST` (or `DOCKER_TLS_VERIFY`) names an engine this client does not speak to."""


class ApiError(EngineError):
    """The engine answered a request with an error status."""

    def __init__(self, status: int, explanation: str) -> None:
        super().__init__(f"{status}: {explanation}")
        self.status = status
        self.explanation = explanation


class NotFound(ApiError):
    """404: no such container, exec or image."""


def engine_address(environ: Mapping[str, str]) -> tuple[socket.AddressFamily, str | tuple[str, int]]:
    """The socket family and address of the engine `environ` names."""
    host = environ.get("DOCKER_HOST") or DEFAULT_HOST
    if environ.get("DOCKER_TLS_VERIFY"):
        raise Unsupported(f"DOCKER_TLS_VERIFY is set: TLS engines are not supported (DOCKER_HOST={host})")
    scheme, separator, rest = host.partition("://")
    if not separator:
        raise Unsupported(f"DOCKER_HOST={host!r} has no scheme (unix:// or tcp://)")
    if scheme == "unix":
        return socket.AF_UNIX, rest
    if scheme in ("tcp", "http"):
        address, _, port = rest.partition("/")[0].rpartition(":")
        if not address or not port.isdigit():
            raise Unsupported(f"DOCKER_HOST={host!r} is not tcp://HOST:PORT")
        return socket.AF_INET6 if ":" in address else socket.AF_INET, (address.strip("[]"), int(port))
    raise Unsupported(f"DOCKER_HOST={host!r}: only unix:// and plain tcp:// engines are supported")


def demultiplex(stream: bytes) -> tuple[bytes, bytes]:
    """The stdout and stderr bytes of a multiplexed stream."""
    parts: dict[int, list[bytes]] = {STDOUT: [], STDERR: []}
    offset = 0
    while offset + FRAME.size <= len(stream):
        kind, size = FRAME.unpack_from(stream, offset)
        start = offset + FRAME.size
        parts.setdefault(kind, []).append(stream[start : start + size])
        offset = start + size
    return b"".join(parts[STDOUT]), b"".join(parts[STDERR])


def _checked(status: int, body: bytes) -> bytes:
    """`body` when `status` is a success; else ApiError (NotFound for 404) with the engine's message."""
    if status < 400:
        return body
    try:
        explanation = str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        explanation = body.decode(errors="replace").strip()
    raise (NotFound if status == 404 else ApiError)(status, explanation)


def _json(body: bytes) -> Any:
    """An answer's body as JSON (None when empty); Unreachable when it is not JSON."""
    try:
        return json.loads(body) if body else None
    except ValueError:
        raise Unreachable(f"the engine's answer is not JSON: {body[:80]!r}") from None


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest.partition(" ")[0]
    if not version.startswith("HTTP/") or not code.isdigit():
        raise Unreachable(f"the engine's answer is not HTTP: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(code), headers


def _dechunk(body: bytes) -> bytes:
    """The body of a `Transfer-Encoding: chunked` answer."""
    parts: list[bytes] = []
    offset = 0
    while True:
        line_end = body.find(b"\r\n", offset)
        if line_end < 0:
            raise Unreachable("the engine's chunked answer is truncated")
        try:
            size = int(body[offset:line_end].split(b";")[0], 16)
        except ValueError:
            raise Unreachable(
                f"the engine's chunked answer has a bad chunk size: {body[offset:line_end][:20]!r}"
            ) from None
        if size == 0:
            return b"".join(parts)
        start = line_end + 2
        parts.append(body[start : start + size])
        offset = start + size + 2


def _drain(sock: socket.socket, received: bytes, where: str) -> bytes:
    """`received` and everything after it until the engine closes the connection; the socket is closed."""
    chunks = [received]
    try:
        while data := sock.recv(1 << 16):
            chunks.append(data)
    except OSError as error:
        raise Unreachable(f"{where}: {error or type(error).__name__}") from None
    finally:
        sock.close()
    return b"".join(chunks)


def _body(headers: Mapping[str, str], rest: bytes) -> bytes:
    """An answer's body: the bytes after its head, dechunked or cut at its Content-Length."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return _dechunk(rest)
    length = headers.get("content-length", "")
    return rest[: int(length)] if length.isdigit() else rest


class Engine:
    """A Docker engine, spoken to in the API version it reports."""

    def __init__(self, family: socket.AddressFamily, address: str | tuple[str, int], version: str) -> None:
        self.family = family
        self.address = address
        self.version = version

    @classmethod
    def connect(cls, environ: Mapping[str, str]) -> Engine:
        """The engine `environ` names (DOCKER_HOST), once it has said which API version it speaks."""
        family, address = engine_address(environ)
        engine = cls(family, address, "")
        reported = engine.call("GET", "/version")
        if not isinstance(reported, dict) or not isinstance(reported.get("ApiVersion"), str):
            raise Unreachable(f"the engine's /version names no ApiVersion: {reported!r}")
        engine.version = reported["ApiVersion"]
        return engine

    def path(self, *segments: str, query: Mapping[str, str] | None = None) -> str:
        """`/vVERSION/SEGMENT/...?QUERY`, each segment escaped."""
        prefix = f"/v{self.version}" if self.version else ""
        path = prefix + "".join("/" + quote(segment, safe="") for segment in segments)
        return f"{path}?{urlencode(query)}" if query else path

    def call(self, method: str, path: str, body: Any = None, *, timeout: float | None = TIMEOUT_S) -> Any:
        """The decoded JSON of the answer to one request on a connection of its own (None without a body);
        ApiError for an error status."""
        where = f"{method} {path}"
        answer = _drain(self._send(method, path, body, upgrade=False, timeout=timeout), b"", where)
        head, separator, rest = answer.partition(_HEAD_END)
        if not separator:
            raise Unreachable(f"{where}: the engine closed the connection before answering")
        status, headers = _parse_head(head)
        return _json(_checked(status, _body(headers, rest)))

    def upgrade(self, method: str, path: str, body: Any = None) -> tuple[socket.socket, bytes]:
        """A request whose connection becomes a two-way stream (an attach, an exec's start): the blocking
        socket, and the stream's bytes that arrived with the answer's head."""
        where = f"{method} {path}"
        sock = self._send(method, path, body, upgrade=True, timeout=TIMEOUT_S)
        received = b""
        try:
            while _HEAD_END not in received:
                data = sock.recv(1 << 16)
                if not data:
                    raise Unreachable(f"{where}: the engine closed the connection before answering")
                received += data
            head, _, pending = received.partition(_HEAD_END)
            status, headers = _parse_head(head)
        except OSError as error:
            sock.close()
            raise Unreachable(f"{where}: {error or type(error).__name__}") from None
        except Unreachable:
            sock.close()
            raise
        if status >= 400:
            _checked(status, _body(headers, _drain(sock, pending, where)))
        sock.settimeout(None)
        return sock, pending

    def output(self, method: str, path: str, body: Any = None) -> bytes:
        """The whole stream of an upgraded request, read until the engine closes it (an exec's output)."""
        sock, received = self.upgrade(method, path, body)
        sock.settimeout(TIMEOUT_S)
        return _drain(sock, received, f"{method} {path}")

    def _send(
        self, method: str, path: str, body: Any, *, upgrade: bool, timeout: float | None
    ) -> socket.socket:
        """A connection to the engine with the request written on it."""
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(self.address)
        except OSError as error:
            sock.close()
            raise Unreachable(f"connecting to {self.address}: {error or type(error).__name__}") from None
        try:
            sock.sendall(self._request(method, path, body, upgrade=upgrade))
        except OSError as error:
            sock.close()
            raise Unreachable(f"{method} {path}: {error or type(error).__name__}") from None
        return sock

    @staticmethod
    def _request(method: str, path: str, body: Any, *, upgrade: bool) -> bytes:
        payload = b"" if body is None else json.dumps(body).encode()
        lines = [f"{method} {path} HTTP/1.1", "Host: docker", "User-Agent: wuu-host"]
        if upgrade:
            lines += ["Connection: Upgrade", "Upgrade: tcp"]
        else:
            lines.append("Connection: close")
        if body is not None:
            lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(payload)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
