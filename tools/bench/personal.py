"""The Personal store's figures: durable `agents.send` throughput from 1 and from 16 clients beside raw
SQLite single-row commits on the same disk, and history search over a large conversation beside the raw
FTS5 query on the same file.

The targeted send figures measure admission: a host whose agent never steps (`personal_host.py`, the
embedding API), its store a real SQLite file in WAL mode with `synchronous=FULL`. Every send is
acknowledged only once its receipt is durable, so the baseline is what one durable commit costs on this
disk (one row, one transaction, the same settings). A diagnostic row runs the real command
(`python -m wuu.host.userhost serve --composition-profile personal`), whose stand-in agent answers every
input: two more durable writes per input (its `read_at`, its reply), which the sends then share the writer
with.

The searched conversation is built straight into a store file (the schema's migrations, then rows in bulk:
building a million messages through `agents.send` would take most of the run) and then served by a host.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.personal import PLUGIN_ID
from wuu.host.userhost.personal.sqlite.database import connect
from wuu.host.userhost.personal.sqlite.schema import migrate
from wuu.host.userhost.personal.sqlite.store import STORE_FILE

from .config import Config
from .samples import Samples, alternate, percentile

CLIENTS = 16
START_DEADLINE_S = 30.0
SPACE = "bench"
MAIN = "ses_main_bench"
# Search terms: a rare one in one message of 100,000 and a common one in one of 20 (trigram queries).
RARE, COMMON = "quokka", "meeting"
WORDS = ("plan", "trip", "flight", "hotel", "dinner", "review", "notes", "budget", "garden", "receipt",
         "invoice", "call", "email", "family", "weekend", "project", "draft", "photo", "music", "lunch",
         "train", "ticket", "doctor", "school", "report")  # fmt: skip


HERE = Path(__file__).resolve().parent


class PersonalHost:
    """A Personal host process on `home`, serving a Unix socket in `directory`: the real command with its
    stand-in agent, or with `idle_agent` the embedding of `personal_host.py`."""

    def __init__(self, directory: Path, home: Path, *, idle_agent: bool = False) -> None:
        self.dir = directory
        self.home = home
        self.idle_agent = idle_agent
        self.process: asyncio.subprocess.Process | None = None
        self.clients: list[UserHostClient] = []

    @property
    def socket(self) -> Path:
        return self.dir / "personal.sock"

    async def __aenter__(self) -> PersonalHost:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        argv = (
            [str(HERE / "personal_host.py"), str(self.home), str(self.socket)]
            if self.idle_agent
            else [
                "-m", "wuu.host.userhost", "serve", "--user-space", SPACE, "--product-domain", "personal",
                "--composition-profile", "personal", "--home", str(self.home), "--listen", f"unix:{self.socket}",
            ]
        )  # fmt: skip
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


async def sends(clients: list[UserHostClient], session_id: str, count: int, tag: str) -> float:
    """Sends per second of `count` small text inputs spread over `clients`, each client sending one after
    another (so at most one in flight per client)."""
    remaining = iter(range(count))

    async def lane(client: UserHostClient) -> None:
        for number in remaining:
            ident = f"{tag}-{number}"
            user_input = {"client_input_id": ident, "request_id": ident, "text": f"note {number}"}
            await plugin(client, "agents.send", {"session_id": session_id}, user_input=user_input)

    began = time.perf_counter()
    await asyncio.gather(*(lane(client) for client in clients))
    return count / (time.perf_counter() - began)


async def personal_round(config: Config, samples: Samples, directory: Path, index: int) -> None:
    """Round `index` of the send figures, with hosts and a raw file of its own in `directory`."""
    directory.mkdir(mode=0o700)
    raw = await asyncio.to_thread(raw_commits, directory / "raw.sqlite", config.personal_sends)
    samples.add("personal_send/raw_sqlite", raw)
    for agent in alternate(("idle", "stand_in"), index):
        home = directory / f"home-{agent}"
        async with PersonalHost(directory / f"host-{agent}", home, idle_agent=agent == "idle") as host:
            clients = [await host.client() for _ in range(CLIENTS)]
            main = (await plugin(clients[0], "agents.main_session", {}))["session_id"]
            await sends(clients[:1], main, config.warmup, "warm")
            for count, lane in ((1, clients[:1]), (CLIENTS, clients)):
                rate = await sends(lane, main, config.personal_sends, f"c{count}")
                samples.add(f"personal_send_{count}/{agent}", rate)


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
