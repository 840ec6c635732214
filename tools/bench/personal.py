"""The Personal store's figures: durable `agents.send` throughput from 1 and from 16 clients beside raw
SQLite single-row commits on the same disk, and history search over a large conversation beside the raw
FTS5 query on the same file.

The targeted send figures measure admission: a host whose agent takes no action (`personal_host.py`, the
embedding API), its store a real SQLite file in WAL mode with `synchronous=FULL`. Every send is
acknowledged only once its receipt is durable, so the baseline is what one durable commit costs on this
disk (one row, one transaction, the same settings). A diagnostic row runs the real command
(`python -m wuu.host.userhost serve --composition-profile personal`), whose stand-in agent answers every
input: two more durable writes per input (its `read_at`, its reply), which the sends then share the writer
with. Two more diagnostic rows are the floors under the host (`send_floor.py`): a bare server committing one
row per request through the store's writer, and the same server committing the store's own admission
transaction. Every side is sent the same request lines by the same bare clients (`Lane`). Beside each rate,
the server's CPU per send is read from /proc: its event loop's thread, and its other threads and child processes
together (the store's reader thread and writer process), which tells where a host spends what a floor does
not.

The searched conversation is built straight into a store file (the schema's migrations, then rows in bulk:
building a million messages through `agents.send` would take most of the run) and then served by a host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from wuu.generated.catalog import USERHOST_PROTOCOL_VERSION
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import PLUGIN_ID
from wuu.host.userhost.personal.sqlite.database import connect
from wuu.host.userhost.personal.sqlite.schema import migrate
from wuu.host.userhost.personal.sqlite.store import STORE_FILE

from .config import Config
from .samples import Samples, alternate, percentile

CLIENTS = 16
MAIN_SESSION = {"plugin_id": PLUGIN_ID, "method": "agents.main_session", "params": {}}
START_DEADLINE_S = 30.0
SPACE = "bench"
MAIN = "ses_main_bench"
# Search terms: a rare one in one message of 100,000 and a common one in one of 20 (trigram queries).
RARE, COMMON = "quokka", "meeting"
WORDS = ("plan", "trip", "flight", "hotel", "dinner", "review", "notes", "budget", "garden", "receipt",
         "invoice", "call", "email", "family", "weekend", "project", "draft", "photo", "music", "lunch",
         "train", "ticket", "doctor", "school", "report")  # fmt: skip


HERE = Path(__file__).resolve().parent


SERVERS = ("idle", "stand_in", "floor_row", "floor_admission")
"""What serves the send figures: the host with an idle agent, the real command with its stand-in agent, and
the two floors of `send_floor.py`."""


class PersonalHost:
    """A Personal host process on `home`, serving a Unix socket in `directory`: the real command with its
    stand-in agent (`stand_in`), the embedding of `personal_host.py` (`idle`), or a floor of `send_floor.py`
    (`floor_row`, `floor_admission`; its store is a file in `home`)."""

    def __init__(self, directory: Path, home: Path, server: str = "stand_in") -> None:
        assert server in SERVERS, server
        self.dir = directory
        self.home = home
        self.server = server
        self.process: asyncio.subprocess.Process | None = None
        self.clients: list[UserHostClient] = []

    @property
    def socket(self) -> Path:
        return self.dir / "personal.sock"

    async def __aenter__(self) -> PersonalHost:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        if self.server == "idle":
            argv = [str(HERE / "personal_host.py"), str(self.home), str(self.socket)]
        elif self.server == "stand_in":
            argv = [
                "-m", "wuu.host.userhost", "serve", "--user-space", SPACE, "--product-domain", "personal",
                "--composition-profile", "personal", "--home", str(self.home), "--listen", f"unix:{self.socket}",
            ]  # fmt: skip
        else:
            self.home.mkdir(mode=0o700, exist_ok=True)
            mode = self.server.removeprefix("floor_")
            argv = [str(HERE / "send_floor.py"), mode, str(self.home / STORE_FILE), str(self.socket)]
        with open(self.dir / "personal.log", "wb") as log:
            self.process = await asyncio.create_subprocess_exec(sys.executable, *argv, stderr=log)
        deadline = time.monotonic() + START_DEADLINE_S
        while not self.socket.exists():
            if time.monotonic() > deadline or self.process.returncode is not None:
                raise RuntimeError(f"the Personal host did not listen on {self.socket}: see {self.dir}")
            await asyncio.sleep(0.02)
        return self

    async def client(self) -> UserHostClient:
        """An initialized client."""
        client = await UserHostClient.connect_unix(self.socket)
        await client.initialize()
        self.clients.append(client)
        return client

    async def __aexit__(self, *exc_info: object) -> None:
        for client in self.clients:
            await client.close()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            await self.process.wait()


async def plugin(client: UserHostClient, method: str, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One Personal call; its result (RuntimeError for an error response)."""
    request = {"plugin_id": PLUGIN_ID, "method": method, "params": params, **extra}
    reply = await client.request("plugin/client/request", request)
    if "result" not in reply:
        raise RuntimeError(f"{method} failed: {reply}")
    result: dict[str, Any] = reply["result"]["result"]
    return result


# --- durable sends --------------------------------------------------------------------------------------


def raw_commits(path: Path, count: int) -> float:
    """Single-row durable commits per second: the store's settings, one INSERT per transaction."""
    connection = connect(path)
    connection.execute("CREATE TABLE IF NOT EXISTS receipts (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
    began = time.perf_counter()
    for number in range(count):
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO receipts VALUES (?, ?)", (f"r{time.time_ns()}-{number}", "x" * 200))
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - began
    connection.close()
    return count / elapsed


class Lane:
    """A bare client connection of the send figures: it writes request lines and reads their replies, one
    request at a time, checking only that each is a result, so that every server is sent the same bytes at the
    same client cost."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = iter(range(1, sys.maxsize))

    @classmethod
    async def open(cls, socket: Path) -> Lane:
        """A connection that has completed `initialize`."""
        reader, writer = await asyncio.open_unix_connection(socket, limit=1 << 24)
        lane = cls(reader, writer)
        info = {"name": "wuu-bench", "version": "0"}
        await lane.request("initialize", {"protocol_version": USERHOST_PROTOCOL_VERSION, "client_info": info})
        return lane

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request's result (RuntimeError for an error response)."""
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        self._writer.write(orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE))
        reply = orjson.loads(await self._reader.readline())
        if "result" not in reply:
            raise RuntimeError(f"{method} failed: {reply}")
        result: dict[str, Any] = reply["result"]
        return result

    async def send(self, session_id: str, ident: str, text: str) -> None:
        """One `agents.send` of a text input whose request and client input IDs are `ident`."""
        user_input = {"client_input_id": ident, "request_id": ident, "text": text}
        params = {"session_id": session_id}
        request = {
            "plugin_id": PLUGIN_ID,
            "method": "agents.send",
            "params": params,
            "user_input": user_input,
        }
        await self.request("plugin/client/request", request)

    def close(self) -> None:
        self._writer.close()


def thread_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds that process `pid` has used so far (the scheduler's own count, in nanoseconds): its main
    thread's, which runs its event loop, and that of all its other threads and its child processes together
    (for a store, its reader thread and its writer process)."""
    loop = others = 0.0
    for tid in _tasks(pid):
        if int(tid) == pid:
            loop += _task_cpu(pid, tid)
        else:
            others += _task_cpu(pid, tid)
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as children:
                offspring = [int(child) for child in children.read().split()]
        except FileNotFoundError:
            continue
        others += sum(_task_cpu(child, task) for child in offspring for task in _tasks(child))
    return loop, others


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []  # a process that ended meanwhile


def _task_cpu(pid: int, tid: str) -> float:
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
            return int(schedstat.read().split()[0]) / 1e9
    except FileNotFoundError:
        return 0.0  # a thread that ended meanwhile


async def sends(lanes: list[Lane], session_id: str, count: int, tag: str) -> float:
    """Sends per second of `count` small text inputs spread over `lanes`, each lane sending one after
    another (so at most one in flight per lane)."""
    remaining = iter(range(count))

    async def send_all(lane: Lane) -> None:
        for number in remaining:
            await lane.send(session_id, f"{tag}-{number}", f"note {number}")

    began = time.perf_counter()
    await asyncio.gather(*(send_all(lane) for lane in lanes))
    return count / (time.perf_counter() - began)


async def personal_round(config: Config, samples: Samples, directory: Path, index: int) -> None:
    """Round `index` of the send figures, with hosts and a raw file of its own in `directory`."""
    directory.mkdir(mode=0o700)
    raw = await asyncio.to_thread(raw_commits, directory / "raw.sqlite", config.personal_sends)
    samples.add("personal_send/raw_sqlite", raw)
    for server in alternate(SERVERS, index):
        home = directory / f"home-{server}"
        async with PersonalHost(directory / f"host-{server}", home, server) as host:
            lanes = [await Lane.open(host.socket) for _ in range(CLIENTS)]
            try:
                main = MAIN  # a floor admits into its own main conversation, whatever the request names
                if not server.startswith("floor_"):
                    main = (await lanes[0].request("plugin/client/request", MAIN_SESSION))["result"][
                        "session_id"
                    ]
                await sends(lanes[:1], main, config.warmup, "warm")
                assert host.process is not None
                for count in (1, CLIENTS):
                    before = thread_cpu(host.process.pid)
                    rate = await sends(lanes[:count], main, config.personal_sends, f"c{count}")
                    samples.add(f"personal_send_{count}/{server}", rate)
                    after = thread_cpu(host.process.pid)
                    for side, was, now in zip(("loop", "threads"), before, after, strict=True):
                        per_send = (now - was) / config.personal_sends * 1e6
                        samples.add(f"personal_cpu_{count}_{side}/{server}", per_send)
            finally:
                for lane in lanes:
                    lane.close()


# --- search ---------------------------------------------------------------------------------------------


def build_conversation(home: Path, messages: int, seed: int = 7) -> dict[str, tuple[str, str]]:
    """Write a store with `messages` visible messages one second apart, alternating user and assistant;
    the time bounds (RFC 3339) of the searches: the middle tenth of the conversation."""
    state = home / "user-spaces" / SPACE / "personal" / "state"
    state.mkdir(parents=True, mode=0o700)
    connection = connect(state / STORE_FILE)
    migrate(connection)
    start = 1_700_000_000
    generator = random.Random(seed)
    connection.execute("BEGIN")
    connection.execute(
        "INSERT INTO space VALUES (1, ?, 'personal', ?, '2023-11-14T22:13:20Z')", (SPACE, MAIN)
    )
    connection.execute("INSERT INTO sessions VALUES (?, 'main', '2023-11-14T22:13:20Z')", (MAIN,))

    def rows() -> Any:
        for seq in range(1, messages + 1):
            words = generator.choices(WORDS, k=8)
            if seq % 20 == 0:
                words[3] = COMMON
            if seq % 100_000 == 50_000 or seq == messages // 2:
                words[5] = RARE
            moment = start + seq
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(moment))
            yield (
                seq,
                MAIN,
                seq,
                "user" if seq % 2 else "assistant",
                " ".join(words),
                stamp,
                moment * 1_000_000,
            )

    connection.executemany(
        "INSERT INTO messages (id, session_id, seq, role, text, created_at, created_us) VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows(),
    )
    connection.create_function("casefold", 1, str.casefold, deterministic=True)
    connection.execute("INSERT INTO messages_fts (rowid, text) SELECT id, casefold(text) FROM messages")
    connection.execute("UPDATE search_index SET indexed_through = (SELECT max(id) FROM messages)")
    connection.execute("COMMIT")
    connection.close()

    def at(seq: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + seq))

    return {"bounded": (at(messages * 45 // 100), at(messages * 55 // 100))}


def raw_search(database: Path, term: str, bounds: tuple[int, int] | None, count: int) -> list[float]:
    """The bare FTS5 query of a first page (21 rows, newest first), `count` times; each one's seconds."""
    connection = sqlite3.connect(database)
    sql = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
    arguments: list[Any] = [f'"{term}"']
    if bounds is not None:
        sql += " AND rowid BETWEEN ? AND ?"
        arguments += list(bounds)
    sql += " ORDER BY rowid DESC LIMIT 21"
    timings = []
    for _ in range(count):
        began = time.perf_counter()
        connection.execute(sql, arguments).fetchall()
        timings.append(time.perf_counter() - began)
    connection.close()
    return timings


async def timed(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    timings = []
    for _ in range(count):
        began = time.perf_counter()
        await call()
        timings.append(time.perf_counter() - began)
    return timings


async def search_figures(
    config: Config, samples: Samples, directory: Path, log: Callable[[str], None]
) -> None:
    """Build the large conversation once, then time every search kind on the host and raw, each round."""
    home = directory / "home"
    log(f"building a conversation of {config.search_messages:,} messages")
    began = time.perf_counter()
    bounds = (await asyncio.to_thread(build_conversation, home, config.search_messages))["bounded"]
    log(f"built in {time.perf_counter() - began:.0f} s")
    database = home / "user-spaces" / SPACE / "personal" / "state" / STORE_FILE
    middle = (config.search_messages * 45 // 100 + 1, config.search_messages * 55 // 100)
    async with PersonalHost(directory / "host", home) as host:
        client = await host.client()
        for index in range(config.rounds):
            for term_name, term in (("rare", RARE), ("common", COMMON)):
                for kind in ("all", "bounded"):
                    params: dict[str, Any] = {"session_id": MAIN, "query": term}
                    if kind == "bounded":
                        params["time_min"], params["time_max"] = bounds
                    key = f"{term_name}_{kind}"
                    host_times = await timed(
                        lambda p=params: plugin(client, "agents.history.search", p), config.searches
                    )
                    raw_times = await asyncio.to_thread(
                        raw_search, database, term, middle if kind == "bounded" else None, config.searches
                    )
                    for side, values in (("host", host_times), ("raw", raw_times)):
                        samples.add(f"search_p50_{key}/{side}", percentile(values, 0.50) * 1e3)
                        samples.add(f"search_p99_{key}/{side}", percentile(values, 0.99) * 1e3)
            log(f"search round {index + 1} of {config.rounds}")
