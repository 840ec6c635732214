"""Bad input over the Unix socket: a seeded generator sends thousands of malformed or adversarial messages
(bad JSON, invalid UTF-8, wrong envelopes, wrong types in every field, unknown methods, huge ids, deep
nesting, over-limit lines) mixed with valid requests to a user host running as a process.

The host must never crash, answer every request with a usable id exactly once and everything else by the
spec (a null id, `parse_error` or `invalid_request`), and keep serving a second client, connected all along,
without delaying its calls beyond 2x of their delay without the fuzzer.

`WUU_CHAOS_SCALE=N` sends N times as many messages (`make chaos`); `WUU_FUZZ_SEED` replays another seed. A
failure names the seed and the index of the message it is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import DEADLINE, ROOT, until
from wuu.generated.catalog import USERHOST_MAX_FRAME_BYTES, USERHOST_PROTOCOL_VERSION
from wuu.generated.models import UserHostErrorCode

SCALE = int(os.environ.get("WUU_CHAOS_SCALE", "1"))
SEED = int(os.environ.get("WUU_FUZZ_SEED", "20261201"))
MESSAGES = 10_000 * SCALE
OVER_LIMIT_LINES = 3 * SCALE
MAX_INTEGER_ID = 2**53 - 1
NUMBERS = {
    "parse_error": -32700,
    "invalid_request": -32600,
    "unsupported_method": -32601,
    "invalid_params": -32602,
    "internal": -32603,
}
"""JsonRpcError.code fixed by `data.code` (the spec's JsonRpcError description); every other code: -32000."""
KNOWN_CODES = frozenset(code.value for code in UserHostErrorCode)
HOST_MODULE = "tests.host.userhost.fixtures.host_with_test_plugin"


# --- a host process and raw connections --------------------------------------------------------------


@dataclass
class HostProcess:
    """A user host with the test plugin, run as a process listening on `socket`."""

    process: asyncio.subprocess.Process
    socket: Path
    home: Path

    @property
    def pid(self) -> int:
        return self.process.pid


async def start_host(home: Path, socket: Path, env: dict[str, str] | None = None) -> HostProcess:
    """Start `host_with_test_plugin` on `socket` (with `env` added to the environment) and wait until it
    accepts connections."""
    # Its log (a traceback for every request that fails on purpose) goes to a file beside its home.
    with (home.parent / "host.log").open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            HOST_MODULE,
            str(home),
            "--listen",
            str(socket),
            cwd=ROOT,
            stderr=log,
            env={**os.environ, **(env or {})},
        )

    def listening() -> bool:
        assert process.returncode is None, f"the host process ended with {process.returncode}"
        return socket.exists()

    await until(listening, f"the host to listen on {socket}")
    return HostProcess(process, socket, home)


async def stop_host(host: HostProcess) -> None:
    """SIGTERM the host and wait for it (killed if it does not end)."""
    if host.process.returncode is None:
        host.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(host.process.wait(), DEADLINE)
        except TimeoutError:
            host.process.kill()
            await host.process.wait()


@pytest.fixture
async def host_process(home: Path, run_dir: Path) -> AsyncIterator[HostProcess]:
    """A user host process with the test plugin on a socket in `run_dir`; stopped after the test."""
    host = await start_host(home, run_dir / "userhost.sock")
    yield host
    await stop_host(host)


class RawConnection:
    """A client of the host's socket that sends bytes as given and collects every message it receives."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.received: list[dict[str, Any]] = []
        self.eof = asyncio.Event()
        self._reader = reader
        self._arrived = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, path: Path) -> RawConnection:
        # Responses are small: the stream limit only needs to admit one maximal frame for the exactly-limit
        # request's echo-free answer.
        reader, writer = await asyncio.open_unix_connection(str(path), limit=USERHOST_MAX_FRAME_BYTES)
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while line := await self._reader.readline():
                self.received.append(orjson.loads(line))
                self._arrived.set()
        except ConnectionError:
            pass
        finally:
            self.eof.set()
            self._arrived.set()

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, request_id: str | int) -> dict[str, Any]:
        """Wait for the response with `request_id` (a response, not a notification)."""
        deadline = time.monotonic() + DEADLINE
        while True:
            for message in self.received:
                if "method" not in message and message.get("id") == request_id:
                    return message
            if self.eof.is_set():
                raise AssertionError(f"the host closed the connection before answering {request_id!r}")
            self._arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no response to {request_id!r} within {DEADLINE:g} s")
            with contextlib.suppress(TimeoutError):  # the deadline is checked above
                await asyncio.wait_for(self._arrived.wait(), remaining)

    async def close(self) -> None:
        self.writer.close()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def request(request_id: str | int, method: str, params: dict[str, Any] | None = None) -> bytes:
    """One JSON-RPC request line."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)


INITIALIZE = {"protocol_version": USERHOST_PROTOCOL_VERSION, "client_info": {"name": "fuzz", "version": "1"}}
MAIN_SESSION = {"plugin_id": "wuu.test", "method": "agents.main_session", "params": {}}


def response_problem(message: dict[str, Any]) -> str | None:
    """What is wrong with a message from the host by the spec; None when it is a valid response or notice."""
    if "method" in message:
        if set(message) != {"jsonrpc", "method", "params"} or message["method"] != "plugin/client/invalidate":
            return "not a plugin/client/invalidate notification"
        return None
    if message.get("jsonrpc") != "2.0":
        return "jsonrpc is not 2.0"
    if set(message) not in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}):
        return f"the members of a response are {sorted(message)}"
    if message["id"] is not None and usable_id(message["id"]) is None:
        return "the id is neither a JsonRpcId nor null"
    if "result" in message:
        return None if isinstance(message["result"], dict) else "the result is not an object"
    error = message["error"]
    if not isinstance(error, dict) or set(error) != {"code", "message", "data"}:
        return "the error is not a JsonRpcError"
    data = error["data"]
    if (
        not isinstance(data, dict)
        or data.get("code") not in KNOWN_CODES
        or not set(data) <= {"code", "field"}
    ):
        return "error.data is not a UserHostErrorData with a known code"
    if error["code"] != NUMBERS.get(data["code"], -32000):
        return f"error.code {error['code']} does not match {data['code']}"
    if not isinstance(error["message"], str) or len(error["message"]) > 4096:
        return "error.message is not a string of at most 4096 characters"
    return None


def usable_id(value: object) -> str | int | None:
    """A JsonRpcId by the spec: a string of 1 to 256 characters, or an integer within ±(2^53 - 1)."""
    if isinstance(value, str) and 1 <= len(value) <= 256:
        return value
    if type(value) is int and -MAX_INTEGER_ID <= value <= MAX_INTEGER_ID:
        return value
    return None


# --- the generator -----------------------------------------------------------------------------------


@dataclass
class Case:
    """One message the fuzzer sends: its bytes (one line, or an unfinished one when `eof` ends it)."""

    index: int
    data: bytes
    eof: bool = False
    """The input ends after `data` (no newline): the host answers `parse_error` and closes."""
    over_limit: bool = False

    @property
    def expected(self) -> tuple[str, str | int | None]:
        """What the host must answer: ("id", id), ("null", None) or ("none", None) for a notification."""
        if self.over_limit or self.eof:
            return "null", None
        try:
            message = orjson.loads(self.data)
        except orjson.JSONDecodeError:
            return "null", None
        if not isinstance(message, dict):
            return "null", None
        if "id" not in message and "method" in message:
            return "none", None
        found = usable_id(message.get("id"))
        return ("null", None) if found is None else ("id", found)

    @property
    def shutdown(self) -> bool:
        """A valid `shutdown`: the host answers it and then closes the connection."""
        kind, _ = self.expected
        if kind != "id":
            return False
        message = orjson.loads(self.data)
        return bool(message.get("method") == "shutdown" and message.get("jsonrpc") == "2.0")


WEIRD_STRINGS = ["", "x" * 129, "\u0000", "é", "💥", "\ud7ff", "a\nb", " ", "null", "0", "initialize "]
METHODS = [
    "initialize",
    "plugin/client/request",
    "plugin/client/cancel",
    "user_question/answer",
    "user_question/dismiss",
    "push/register",
    "push/unregister",
    "plugin/client/invalidate",
    "agents.main_session",
    "thread/start",
    "workspace/list",
    "rpc.discover",
    "Initialize",
]


class Fuzzer:
    """Messages from one seed: each a mutation of a valid request, or garbage, or a valid request."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._ids = 0

    def fresh_id(self) -> str | int:
        self._ids += 1
        return self._ids if self.rng.random() < 0.5 else f"f-{self._ids}"

    def value(self, depth: int = 0) -> Any:
        """A JSON value of a random type (the wrong type of a field, most of the time)."""
        rng = self.rng
        kind = rng.randrange(10 if depth < 3 else 7)
        if kind == 0:
            return None
        if kind == 1:
            return rng.choice([True, False])
        if kind == 2:
            return rng.choice(
                [0, -1, 1, 2**31, -(2**53), 2**53, 2**63 - 1, -(2**63), rng.randrange(-999, 999)]
            )
        if kind == 3:
            return rng.choice([0.5, -0.0, 1e300, -1e-300, 3.0])
        if kind in (4, 5):
            return rng.choice(WEIRD_STRINGS)
        if kind == 6:
            return "".join(chr(rng.randrange(0x20, 0xD7FF)) for _ in range(rng.randrange(1, 12)))
        if kind in (7, 8):
            return [self.value(depth + 1) for _ in range(rng.randrange(3))]
        return {rng.choice(["a", "id", "params", "method", "code"]): self.value(depth + 1) for _ in range(2)}

    def valid(self, request_id: str | int) -> dict[str, Any]:
        """A request that is valid (mostly) and cheap for the host."""
        rng = self.rng
        choice = rng.randrange(8)
        if choice == 0:
            method, params = "initialize", dict(INITIALIZE)
        elif choice == 1:
            method, params = "plugin/client/request", dict(MAIN_SESSION)
        elif choice == 2:
            query = rng.choice(["sleep:0.01", "sleep:0", "fail", "nothing"])
            search = {"session_id": "main", "query": query}
            method = "plugin/client/request"
            params = {"plugin_id": "wuu.test", "method": "agents.history.search", "params": search}
        elif choice == 3:
            react = {
                "session_id": "main",
                "message_seq": rng.randrange(100),
                "emoji": "👍",
                "expected_revision": 0,
                "request_id": f"r-{rng.randrange(10**6)}",
            }
            method = "plugin/client/request"
            params = {"plugin_id": "wuu.test", "method": "agents.react", "params": react}
        elif choice == 4:
            method, params = "plugin/client/cancel", {"id": rng.choice([1, "f-1", rng.randrange(10**6)])}
        elif choice == 5:
            method, params = rng.choice(["push/register", "push/unregister", "user_question/dismiss"]), {}
        elif choice == 6:
            method, params = "plugin/client/request", {**MAIN_SESSION, "plugin_id": "nope"}
        else:
            method, params = "plugin/client/request", {**MAIN_SESSION, "plugin_fingerprint": "other"}
        # A deep copy: mutations must not reach the shared templates.
        return copy.deepcopy({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})

    def mutate(self, message: dict[str, Any]) -> dict[str, Any]:
        """The message with one member, at any depth, replaced by a value of another type, removed, or added."""
        rng = self.rng
        paths: list[tuple[Any, Any]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for key, child in node.items():
                    paths.append((node, key))
                    walk(child)

        walk(message)
        parent, key = rng.choice(paths)
        action = rng.randrange(4)
        if action == 0:
            del parent[key]
        elif action == 1:
            parent[rng.choice(["extra", "Id", "jsonrpc ", "params"])] = self.value()
        else:
            parent[key] = self.value()
        return message

    def odd_id(self) -> Any:
        """An id a host might choke on: huge integers, floats, long strings, other types."""
        rng = self.rng
        return rng.choice(
            [
                2**53,
                -(2**53),
                MAX_INTEGER_ID,
                -MAX_INTEGER_ID,
                2**64,
                10**30,
                1.0,
                0.0,
                -1.5,
                True,
                False,
                None,
                "",
                "i" * 257,
                f"{'i' * 250}{self._ids:06d}"[-256:],
                [],
                [1],
                {},
                {"id": 1},
            ]
        )

    def garbage(self) -> bytes:
        """A line that is not a JSON object, or not UTF-8, or not JSON at all (no newline inside)."""
        rng = self.rng
        valid = orjson.dumps(self.valid(self.fresh_id()))
        choice = rng.randrange(12)
        if choice == 0:
            return valid[: rng.randrange(1, len(valid))]  # truncated
        if choice == 1:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))).replace(b"\n", b" ")
        if choice == 2:  # invalid UTF-8 inside a string, or a lone surrogate
            bad = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf5\x80\x80\x80", b"\x80"])
            return valid.replace(b'"2.0"', b'"2.0' + bad + b'"', 1)
        if choice == 3:
            return rng.choice([b"", b" ", b"\t", b"\r", b"{", b"}", b"{}}", b'{"a":1,}', b"{'id':1}"])
        if choice == 4:
            return rng.choice(
                [b"1", b"-0", b'"initialize"', b"null", b"true", b"1e400", b"NaN", b"[]", b"[{}]"]
            )
        if choice == 5:
            return valid + rng.choice([b"x", b"{}", b" 1", b"]"])  # trailing garbage
        if choice == 6:  # a batch
            return orjson.dumps([self.valid(self.fresh_id()) for _ in range(rng.randrange(1, 4))])
        if choice == 7:  # an id out of range as raw JSON text
            text = rng.choice([b"1e400", b"-1e400", b"123456789012345678901234567890", b"9007199254740992.0"])
            return b'{"jsonrpc":"2.0","id":' + text + b',"method":"initialize","params":{}}'
        if choice == 8:  # nested beyond any parser's depth
            depth = rng.choice([1100, 5000, 100_000])
            return (
                b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":' + b"[" * depth + b"]" * depth + b"}}"
            )
        if choice == 9:
            return valid.replace(b'"jsonrpc"', b'"jsonrpc":"2.0","jsonrpc"', 1)  # a duplicate member
        if choice == 10:  # an escaped lone surrogate
            return valid.replace(b'"2.0"', b'"2.0\\ud800"', 1)
        data = bytearray(valid)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data).replace(b"\n", b" ")

    def message(self) -> tuple[bytes, bool]:
        """One line's bytes (without its newline), and whether the input ends after it unfinished."""
        rng = self.rng
        choice = rng.randrange(100)
        if choice < 20:
            message = self.valid(self.fresh_id())
        elif choice < 45:
            message = self.mutate(self.valid(self.fresh_id()))
        elif choice < 55:
            message = self.valid(self.fresh_id())
            message["id"] = self.odd_id()
        elif choice < 60:
            message = self.valid(self.fresh_id())
            del message["id"]  # a notification: never answered
        elif choice < 65:
            message = {
                "jsonrpc": "2.0",
                "id": self.fresh_id(),
                "method": rng.choice(METHODS + WEIRD_STRINGS + ["x" * 128, "m" * rng.randrange(1, 200)]),
                "params": rng.choice([{}, [], "p", None, 1, {"protocol_version": "1"}]),
            }
        elif choice < 68:  # nested deep, but within the parser's depth
            depth = rng.choice([50, 200, 255, 300, 600, 1000])
            message = self.valid(self.fresh_id())
            message["params"][rng.choice(["params", "client_info", "extra"])] = "NESTED"
            # Built as text: orjson does not write what is this deep.
            return orjson.dumps(message).replace(b'"NESTED"', b"[" * depth + b"]" * depth), False
        else:
            return self.garbage(), rng.random() < 0.002
        # The json module writes integers beyond 64 bits, which orjson refuses to.
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode(), False

    def cases(self, count: int, over_limit: int) -> list[Case]:
        """`count` messages, `over_limit` of them over the frame limit and one exactly at it."""
        cases = []
        specials = {self.rng.randrange(count): "over" for _ in range(over_limit)}
        specials[self.rng.randrange(count)] = "exact"
        for index in range(count):
            special = specials.get(index)
            if special == "over":
                body = b'{"jsonrpc":"2.0","id":"big","method":"initialize","params":{"p":"'
                cases.append(Case(index, body + b"x" * USERHOST_MAX_FRAME_BYTES + b'"}}\n', over_limit=True))
                continue
            if special == "exact":
                # Exactly the limit with its newline: JSON whitespace pads a valid request.
                line = request(f"exact-{index}", "plugin/client/request", MAIN_SESSION)
                padded = line[:-2] + b" " * (USERHOST_MAX_FRAME_BYTES - len(line)) + line[-2:]
                cases.append(Case(index, padded))
                continue
            data, eof = self.message()
            cases.append(Case(index, data if eof else data + b"\n", eof=eof))
        return cases


# --- the probe: a second client at a steady rate, in a process of its own ----------------------------

# A blocking client in its own process, so that neither the fuzzer's work nor the GIL delays its timing:
# it initializes, prints "ready", then calls agents.main_session every INTERVAL seconds until its stdin
# ends, and prints one line per call: the monotonic send and receive times and whether it succeeded.
PROBE = r"""
import json, select, socket, sys, time
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
stream = sock.makefile("rwb")
interval = float(sys.argv[2])
def call(request_id, method, params):
    stream.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode() + b"\n")
    stream.flush()
    while True:
        line = stream.readline()
        if not line:
            return None
        message = json.loads(line)
        if "method" not in message and message.get("id") == request_id:
            return message
init = call(0, "initialize", {"protocol_version": 1, "client_info": {"name": "probe", "version": "1"}})
print("ready" if init and "result" in init else f"failed {init}", flush=True)
samples = []
due = time.monotonic()
request_id = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    request_id += 1
    sent = time.monotonic()
    main_session = {"plugin_id": "wuu.test", "method": "agents.main_session", "params": {}}
    reply = call(request_id, "plugin/client/request", main_session)
    received = time.monotonic()
    good = reply is not None and reply.get("result", {}).get("result") == {"session_id": "main"}
    samples.append(f"{sent} {received} {int(good)} {json.dumps(reply)[:200] if not good else ''}")
    if reply is None:
        break
    due += interval
    time.sleep(max(0.0, due - time.monotonic()))
print("\n".join(samples), flush=True)
"""
PROBE_INTERVAL = 0.004


@dataclass
class Probe:
    process: asyncio.subprocess.Process

    @classmethod
    async def start(cls, socket: Path) -> Probe:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PROBE,
            str(socket),
            str(PROBE_INTERVAL),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        ready = await asyncio.wait_for(process.stdout.readline(), DEADLINE)
        assert ready == b"ready\n", ready
        return cls(process)

    async def finish(self) -> list[tuple[float, float, bool, str]]:
        """Stop the probe; its samples (sent, received, succeeded, the reply when it did not)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        out = await asyncio.wait_for(self.process.stdout.read(), DEADLINE)
        await asyncio.wait_for(self.process.wait(), DEADLINE)
        samples = []
        for line in out.decode().splitlines():
            sent, received, good, *reply = line.split(" ", 3)
            samples.append((float(sent), float(received), good == "1", " ".join(reply)))
        return samples


# --- the test ----------------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the fuzzer sent on one connection and what it must get back."""

    ids: dict[str | int, int] = field(default_factory=dict)
    """Every usable id sent, with the index of its message."""
    nulls: list[int] = field(default_factory=list)
    """The messages that must be answered with a null id."""


BATCH = 25
# The fuzzer's pace: a batch, then its round trip, then a pause so that the host is busy with fuzz for about
# a third of the time. The probe's median then meets a host as loaded as the fuzz makes it, and a message
# that made the host burn its CPU or block would show as a probe median beyond 2x.
PAUSE = 0.006


class Run:
    """The fuzzing of one host: connections opened in turn, each checked once it ends."""

    def __init__(self, socket: Path, seed: int) -> None:
        self.socket = socket
        self.seed = seed
        self.ended_connections = 0
        self.answered = 0
        self._syncs = 0

    def fail(self, index: int | None, what: str, case: Case | None = None) -> str:
        shown = "" if case is None else f"; the message: {case.data[:300]!r}"
        where = "" if index is None else f", message {index}"
        return f"seed {self.seed}{where}: {what}{shown} (replay with WUU_FUZZ_SEED={self.seed})"

    async def run(self, cases: list[Case]) -> None:
        """Send `cases` in order, over as many connections as the host closes."""
        connection, ledger = await RawConnection.open(self.socket), Ledger()
        by_index = {case.index: case for case in cases}
        batch: list[Case] = []
        for case in cases:
            kind, found = case.expected
            if kind == "id" and (found in ledger.ids or found == "big"):
                continue  # a mutation hit an id already in use: its answers would be ambiguous
            batch.append(case)
            if kind == "id":
                ledger.ids[found] = case.index  # type: ignore[index]
            elif kind == "null":
                ledger.nulls.append(case.index)
            if case.eof or case.shutdown:
                # The host closes this connection: everything sent must be answered first.
                await self._send(connection, batch[:-1])
                await self._settle(connection, ledger, by_index)
                await connection.send(case.data)
                if case.eof:
                    connection.writer.write_eof()
                await self._end(connection, ledger, by_index)
                connection, ledger, batch = await RawConnection.open(self.socket), Ledger(), []
            elif len(batch) == BATCH:
                await self._send(connection, batch)
                await self._sync(connection, ledger, batch)
                batch = []
                await asyncio.sleep(PAUSE)
        await self._send(connection, batch)
        await self._settle(connection, ledger, by_index)
        connection.writer.write_eof()
        await self._end(connection, ledger, by_index)

    async def _send(self, connection: RawConnection, batch: list[Case]) -> None:
        for case in batch:
            await connection.send(case.data)

    async def _sync(self, connection: RawConnection, ledger: Ledger, batch: list[Case]) -> None:
        """A round trip: its answer follows the envelope answers of everything sent before."""
        self._syncs += 1
        sync_id = f"sync-{self._syncs}"
        ledger.ids[sync_id] = -1
        await connection.send(request(sync_id, "no/such/method"))
        try:
            await connection.response(sync_id)
        except AssertionError as error:
            # The connection broke in this batch: name its first request that got no answer.
            got = {message.get("id") for message in connection.received if "method" not in message}
            unanswered = [case for case in batch if case.expected[0] == "id" and case.expected[1] not in got]
            culprit = unanswered[0] if unanswered else None
            raise AssertionError(
                self.fail(
                    culprit and culprit.index, f"{error} (the batch's first unanswered request)", culprit
                )
            ) from None

    async def _settle(self, connection: RawConnection, ledger: Ledger, cases: dict[int, Case]) -> None:
        """Wait until every id sent on this connection is answered (plugin calls answer later)."""

        def answered() -> bool:
            if connection.eof.is_set():
                return True
            got = {message.get("id") for message in connection.received if "method" not in message}
            return all(request_id in got for request_id in ledger.ids)

        try:
            await until(answered, "the answers to every request on the connection")
        except AssertionError:
            got = {message.get("id") for message in connection.received}
            missing = [ledger.ids[rid] for rid in ledger.ids if rid not in got]
            index = missing[0]
            raise AssertionError(self.fail(index, "no response", cases.get(index))) from None

    async def _end(self, connection: RawConnection, ledger: Ledger, cases: dict[int, Case]) -> None:
        """Wait for the host to close the connection, then check what came back on it."""
        try:
            await asyncio.wait_for(connection.eof.wait(), DEADLINE)
        except TimeoutError:
            raise AssertionError(self.fail(None, "the host did not close a connection that ended")) from None
        await connection.close()
        self.ended_connections += 1
        counts: dict[str | int, int] = {}
        nulls = []
        for message in connection.received:
            problem = response_problem(message)
            assert problem is None, self.fail(None, f"{problem}: {message}")
            if "method" in message:
                continue
            if message["id"] is None:
                nulls.append(message)
                continue
            assert message["id"] in ledger.ids, self.fail(None, f"a response to an id never sent: {message}")
            counts[message["id"]] = counts.get(message["id"], 0) + 1
        for request_id, index in ledger.ids.items():
            times = counts.get(request_id, 0)
            assert times == 1, self.fail(index, f"{times} responses to id {request_id!r}", cases.get(index))
        # Null-id answers come in the order of the messages that caused them.
        for position, index in enumerate(ledger.nulls):
            assert position < len(nulls), self.fail(index, "no null-id response", cases[index])
            code = nulls[position]["error"]["data"]["code"]
            assert code in {"parse_error", "invalid_request"}, self.fail(
                index, f"a null-id answer {code}", cases[index]
            )
            if cases[index].over_limit or cases[index].eof:
                assert code == "parse_error", self.fail(index, f"{code} for an over-limit line", cases[index])
        assert len(nulls) == len(ledger.nulls), self.fail(
            None, f"{len(nulls)} null-id responses for {len(ledger.nulls)} messages that call for one"
        )
        self.answered += len(ledger.ids)


def median(values: list[float]) -> float:
    return statistics.median(values)


async def test_fuzz_never_crashes_answers_by_the_spec_and_delays_nobody(host_process: HostProcess) -> None:
    fuzzer = Fuzzer(SEED)
    cases = fuzzer.cases(MESSAGES, OVER_LIMIT_LINES)
    probe = await Probe.start(host_process.socket)
    run = Run(host_process.socket, SEED)
    # Quiet and fuzz phases alternate, so that the probe's baseline and its fuzz samples share the
    # machine's conditions (other tests, other processes) as closely as possible.
    phases = 4
    fuzzing: list[tuple[float, float]] = []
    quiet_for = 0.5
    for phase in range(phases):
        await asyncio.sleep(quiet_for)  # the probe's quiet samples: the work of this phase is the probe's
        began = time.monotonic()
        part = cases[phase * len(cases) // phases : (phase + 1) * len(cases) // phases]
        await run.run(part)
        fuzzing.append((began, time.monotonic()))
        quiet_for = max(0.5, (fuzzing[-1][1] - began) / 2)
    await asyncio.sleep(quiet_for)
    samples = await probe.finish()

    log = (host_process.home.parent / "host.log").read_text(errors="replace")
    assert host_process.process.returncode is None, f"the host process crashed: {log[-3000:]}"
    fresh = await RawConnection.open(host_process.socket)
    await fresh.send(request(1, "initialize", INITIALIZE))
    assert "result" in await fresh.response(1)
    await fresh.close()

    failed = [sample for sample in samples if not sample[2]]
    assert not failed, f"seed {SEED}: the probe's calls failed: {failed[:3]}"
    assert run.answered >= MESSAGES // 4, f"only {run.answered} requests were answered"

    def during(sent: float, received: float) -> bool:
        return any(began <= received and sent <= ended for began, ended in fuzzing)

    margin = 0.05  # a call just before or after a fuzz phase is neither quiet nor fuzzed
    loaded = [received - sent for sent, received, _, _ in samples if during(sent, received)]
    quiet = [
        received - sent for sent, received, _, _ in samples if not during(sent - margin, received + margin)
    ]
    assert len(loaded) >= 200 and len(quiet) >= 200, (len(loaded), len(quiet))
    assert median(loaded) <= 2 * median(quiet), (
        f"seed {SEED}: the probe's median call took {median(loaded) * 1e3:.3f} ms during the fuzz, "
        f"{median(quiet) * 1e3:.3f} ms without ({len(loaded)} and {len(quiet)} calls)"
    )
