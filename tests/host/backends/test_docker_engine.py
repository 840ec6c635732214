"""The docker backend's Engine API client: which engines it speaks to, and how it reads the engine's answers.

The answers here come from a server on a real Unix socket that writes what an engine writes (chunked bodies,
errors, an upgrade, a connection cut short); the backend's suite (test_docker_backend.py) runs the client
against a real engine.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wuu.host.backends.docker_engine import (
    ApiError,
    Engine,
    NotFound,
    Unreachable,
    Unsupported,
    demultiplex,
    engine_address,
)


@pytest.mark.parametrize(
    ("environ", "family", "address"),
    [
        ({}, socket.AF_UNIX, "/var/run/docker.sock"),
        ({"DOCKER_HOST": "unix:///tmp/d.sock"}, socket.AF_UNIX, "/tmp/d.sock"),
        ({"DOCKER_HOST": "tcp://127.0.0.1:2375"}, socket.AF_INET, ("127.0.0.1", 2375)),
        ({"DOCKER_HOST": "tcp://[::1]:2375"}, socket.AF_INET6, ("::1", 2375)),
        ({"DOCKER_HOST": "tcp://docker.internal:2375/"}, socket.AF_INET, ("docker.internal", 2375)),
    ],
)
def test_docker_host_names_the_engine_as_the_docker_cli_reads_it(
    environ: dict[str, str], family: socket.AddressFamily, address: object
) -> None:
    assert engine_address(environ) == (family, address)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"DOCKER_HOST": "ssh://me@box"},
            "DOCKER_HOST='ssh://me@box': only unix:// and plain tcp:// engines",
        ),
        (
            {"DOCKER_HOST": "https://box:2376"},
            "DOCKER_HOST='https://box:2376': only unix:// and plain tcp://",
        ),
        (
            {"DOCKER_HOST": "tcp://box:2376", "DOCKER_TLS_VERIFY": "1"},
            "DOCKER_TLS_VERIFY is set: TLS engines are not supported (DOCKER_HOST=tcp://box:2376)",
        ),
        ({"DOCKER_HOST": "box:2375"}, "DOCKER_HOST='box:2375' has no scheme (unix:// or tcp://)"),
        ({"DOCKER_HOST": "tcp://box"}, "DOCKER_HOST='tcp://box' is not tcp://HOST:PORT"),
    ],
)
def test_an_engine_the_client_cannot_speak_to_is_refused_naming_the_variable(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(Unsupported) as refused:
        engine_address(environ)
    assert str(refused.value).startswith(message)


def test_a_multiplexed_stream_splits_into_stdout_and_stderr() -> None:
    frames = b"\x01\x00\x00\x00\x00\x00\x00\x03out\x02\x00\x00\x00\x00\x00\x00\x03err\x01\x00\x00\x00\x00\x00\x00\x01!"
    assert demultiplex(frames) == (b"out!", b"err")


class CannedEngine:
    """A server on a Unix socket that reads one request per connection and writes the next canned answer."""

    def __init__(self, path: Path, answers: list[bytes]) -> None:
        self.path = str(path)
        self.answers = answers
        self.requests: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for answer in self.answers:
            connection, _ = self.server.accept()
            with connection:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += connection.recv(65536)
                head, _, body = request.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.startswith(b"Content-Length")
                    ),
                    0,
                )
                while len(body) < length:
                    body += connection.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                connection.sendall(answer)

    def engine(self) -> Engine:
        return Engine(socket.AF_UNIX, self.path, "1.41")


Canned = Callable[[list[bytes]], CannedEngine]


@pytest.fixture
def canned(tmp_path: Path) -> Iterator[Canned]:
    servers: list[CannedEngine] = []

    def start(answers: list[bytes]) -> CannedEngine:
        server = CannedEngine(tmp_path / f"engine{len(servers)}.sock", answers)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.server.close()


def test_a_request_carries_its_json_body_and_the_version_prefix(canned: Canned) -> None:
    server = canned(
        [b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"Id":"c1"}\n']
    )
    engine = server.engine()
    created = engine.call(
        "POST", engine.path("containers", "create", query={"name": "wuu-a b"}), {"Image": "i"}
    )
    assert created == {"Id": "c1"}
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v1.41/containers/create?name=wuu-a+b HTTP/1.1"
    assert b"Connection: close" in head and b"Content-Type: application/json" in head
    assert json.loads(body) == {"Image": "i"}


def test_a_chunked_answer_is_decoded(canned: Canned) -> None:
    server = canned(
        [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'5\r\n{"Sta\r\n9\r\ntusCode":\r\n3\r\n 0}\r\n0\r\n\r\n'
        ]
    )
    assert server.engine().call("POST", "/v1.41/containers/c1/wait") == {"StatusCode": 0}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "the engine's answer is not JSON: b'hello'"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            "the engine's chunked answer has a bad chunk size: b'zz'",
        ),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "the engine's answer is not HTTP: 'SSH-2.0-OpenSSH_9.2'"),
    ],
)
def test_an_answer_that_is_not_json_http_or_well_chunked_is_unreachable(
    canned: Canned, answer: bytes, message: str
) -> None:
    with pytest.raises(Unreachable) as garbled:
        canned([answer]).engine().call("GET", "/v1.41/version")
    assert str(garbled.value) == message


def test_an_error_status_raises_with_the_engines_message(canned: Canned) -> None:
    server = canned(
        [
            b'HTTP/1.1 404 Not Found\r\nContent-Length: 37\r\n\r\n{"message":"No such container: nope"}',
            b"HTTP/1.1 409 Conflict\r\nContent-Length: 9\r\n\r\nin use \r\n",
        ]
    )
    engine = server.engine()
    with pytest.raises(NotFound) as missing:
        engine.call("GET", engine.path("containers", "nope", "json"))
    assert (missing.value.status, missing.value.explanation) == (404, "No such container: nope")
    with pytest.raises(ApiError) as conflict:
        engine.call("DELETE", engine.path("containers", "c1"))
    assert not isinstance(conflict.value, NotFound)
    assert (conflict.value.status, conflict.value.explanation) == (409, "in use")


def test_an_upgrade_returns_the_stream_and_the_bytes_that_came_with_the_answer(canned: Canned) -> None:
    server = canned(
        [
            b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n\x01\x00\x00\x00\x00\x00\x00\x02hi"
        ]
    )
    engine = server.engine()
    stream, pending = engine.upgrade(
        "POST", engine.path("exec", "e1", "start"), {"Detach": False, "Tty": False}
    )
    with stream:
        assert pending == b"\x01\x00\x00\x00\x00\x00\x00\x02hi"
        assert stream.recv(10) == b""  # the canned engine has closed it
    head = server.requests[0].partition(b"\r\n\r\n")[0]
    assert b"Connection: Upgrade" in head and b"Upgrade: tcp" in head


def test_an_upgrade_the_engine_refuses_raises_with_its_message(canned: Canned) -> None:
    server = canned(
        [b'HTTP/1.1 409 Conflict\r\nContent-Length: 46\r\n\r\n{"message":"Container c1 is not running"}     ']
    )
    engine = server.engine()
    with pytest.raises(ApiError) as refused:
        engine.upgrade("POST", engine.path("containers", "c1", "exec"), {})
    assert (refused.value.status, refused.value.explanation) == (409, "Container c1 is not running")


def test_an_engine_that_closes_without_answering_or_is_absent_is_unreachable(
    canned: Canned, tmp_path: Path
) -> None:
    server = canned([b""])
    with pytest.raises(Unreachable, match="closed the connection before answering"):
        server.engine().call("GET", "/version")
    absent = Engine(socket.AF_UNIX, str(tmp_path / "absent.sock"), "")
    with pytest.raises(Unreachable, match=r"connecting to .*absent\.sock: .*No such file"):
        absent.call("GET", "/version")


def test_the_docker_backend_imports_no_http_client() -> None:
    """An adapter is a fresh process per connection: the SDK (requests, urllib3) or http.client would cost it
    from 30 ms to a tenth of a second."""
    script = (
        "import sys, wuu.host.backends.docker; "
        "print(sorted(m for m in ('docker', 'requests', 'urllib3', 'http.client') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_an_adapter_refuses_an_ssh_engine_before_anything_starts(tmp_path: Path) -> None:
    config = tmp_path / "profiles.json"
    profile = {"backend": "docker", "image": "wuu-execution:local", "workspace": "/workspace"}
    config.write_text(json.dumps({"execution_environments": {"profiles": {"box": profile}}}))
    adapter = subprocess.run(
        [sys.executable, "-m", "wuu.host", "adapter", "--config", str(config), "--profile", "box"],
        input=b"",
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": "ssh://me@box"},
        timeout=60,
    )
    assert adapter.returncode == 2, adapter.stderr
    assert adapter.stderr.decode().strip() == (
        "wuu-host: profile 'box': DOCKER_HOST='ssh://me@box': only unix:// and plain tcp:// engines are supported"
    )
