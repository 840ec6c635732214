"""Durability of the Personal store under SIGKILL, through a real `wuu-userhost serve` process.

Four clients load the host with sends (some with small attachments) and owner reactions on the stand-in
agent's answers, each recording what the host acknowledged. At a seeded random moment the process is killed
with SIGKILL and restarted on the same home; then every acknowledged receipt and reaction must be there as
acknowledged, retries must replay them, and what was in flight at the kill must be absent or there exactly
once. The campaign repeats this at least 20 times (`WUU_CHAOS_SCALE` multiplies the count; `WUU_CHAOS_SEED`
replays a campaign), and every failure names its seed. The approvals have kill campaigns of their own (during
a decision, an execution and a rule save): tools/chaos/approval_kills.py, and so have background tasks (during
grant revocations, their effects and their completion): tools/chaos/task_kills.py; `make test` runs both small.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import DEADLINE
from tests.host.userhost.personal.conftest import attachment, call, main_session, result, send, serve_command
from wuu.host.userhost.client import ConnectionLost, UserHostClient

KILLS = max(20, round(20 * float(os.environ.get("WUU_CHAOS_SCALE", "1"))))
CLIENTS = 4
LOAD_WINDOW_S = 0.3
"""The kill comes at a random moment of this window after the load has started."""
READY_DEADLINE_S = 20.0
EMOJI = ("👍", "🎉", "❤️", "🔥", "😂")
REACTIONS_PER_MESSAGE = 3
"""A client reacts to a message it claimed up to this many times, each on the revision it last saw."""


@dataclass
class Ledger:
    """What the clients know: what they sent, and what the host acknowledged (everything is keyed by the
    business request ID)."""

    acknowledged: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    """request_id -> (the user input, its acknowledged receipt), over the whole campaign."""
    in_flight: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Sends of this round without an answer (yet)."""
    reactions: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    """Reaction writes of this round: request_id -> (params, the acknowledged result)."""
    reactions_in_flight: dict[str, dict[str, Any]] = field(default_factory=dict)
    claimed: set[int] = field(default_factory=set)
    """Assistant messages a client has claimed to react to (each is claimed once in the campaign)."""
    round_sends: list[str] = field(default_factory=list)
    """The request IDs acknowledged in this round."""

    def next_round(self) -> None:
        self.in_flight.clear()
        self.reactions.clear()
        self.reactions_in_flight.clear()
        self.round_sends.clear()


async def start_host(home: Path, socket: Path, log: Path) -> asyncio.subprocess.Process:
    with open(log, "ab") as stderr:
        return await asyncio.create_subprocess_exec(
            *serve_command(home, socket),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )


async def connect_ready(process: asyncio.subprocess.Process, socket: Path, log: Path) -> UserHostClient:
    """An initialized client of the host, polling its socket until it answers (or the deadline)."""
    deadline = time.monotonic() + READY_DEADLINE_S
    while True:
        assert process.returncode is None, f"the host exited {process.returncode}: {log.read_text()[-2000:]}"
        try:
            client = await UserHostClient.connect_unix(socket)
        except (FileNotFoundError, ConnectionRefusedError):
            client = None
        if client is not None:
            try:
                await asyncio.wait_for(client.initialize(), 5)
                return client
            except (ConnectionLost, OSError, TimeoutError):
                with contextlib.suppress(OSError):
                    await client.close(timeout=1)
        assert time.monotonic() < deadline, f"the host did not answer on {socket}: {log.read_text()[-2000:]}"
        await asyncio.sleep(0.02)


async def reap(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    await process.wait()


# --- the load ---------------------------------------------------------------------------------------


async def load(client: UserHostClient, main: str, round_no: int, index: int, ledger: Ledger) -> None:
    """Send and react until the connection is lost, recording every acknowledgement."""
    mine: list[tuple[int, int]] = []  # (message_seq, revision acknowledged) of messages this client claimed
    n = 0
    while True:
        n += 1
        client_input_id = f"k{round_no}-c{index}-{n}"
        user_input: dict[str, Any] = {
            "client_input_id": client_input_id,
            "request_id": f"req-{client_input_id}",
            "text": f"kill {round_no} client {index} input {n}",
        }
        if n % 3 == 0:
            user_input["attachments"] = [
                attachment(f"bytes of {client_input_id}".encode(), f"{client_input_id}.txt")
            ]
        ledger.in_flight[user_input["request_id"]] = user_input
        receipt = result(await send(client, main, user_input))["receipt"]
        del ledger.in_flight[user_input["request_id"]]
        ledger.acknowledged[user_input["request_id"]] = (user_input, receipt)
        ledger.round_sends.append(user_input["request_id"])

        if n % 2:
            continue
        if mine and mine[-1][1] < REACTIONS_PER_MESSAGE:
            seq, revision = mine.pop()
        else:
            page = result(await call(client, "agents.history.read", {"session_id": main, "page_size": 10}))
            free = [
                m
                for m in page["messages"]
                if m["role"] == "assistant"
                and m["message_seq"] not in ledger.claimed
                and m["reaction_eligible"]
            ]
            if not free:
                continue
            seq, revision = free[0]["message_seq"], free[0]["reactions"]["revision"]
            ledger.claimed.add(seq)
        params = {
            "session_id": main,
            "message_seq": seq,
            "emoji": EMOJI[(n + index) % len(EMOJI)],
            "expected_revision": revision,
            "request_id": f"react-{client_input_id}",
        }
        ledger.reactions_in_flight[params["request_id"]] = params
        reacted = result(await call(client, "agents.react", params))
        del ledger.reactions_in_flight[params["request_id"]]
        ledger.reactions[params["request_id"]] = (params, reacted)
        mine.append((seq, reacted["reactions"]["revision"]))


def ended_by_the_kill(outcome: BaseException | None) -> bool:
    """A load ends with the connection: its call lost."""
    return isinstance(outcome, ConnectionLost)


# --- the checks after a restart -------------------------------------------------------------------


def identity(receipt: dict[str, Any]) -> dict[str, Any]:
    """What admission fixed in a receipt: everything but the read stage and the revision it bumps."""
    return {key: value for key, value in receipt.items() if key not in ("revision", "read_at")}


def file_rows(database: Path, sql: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(database)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


async def receipts_of(
    client: UserHostClient, main: str, client_input_ids: list[str]
) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(client_input_ids), 100):
        chunk = client_input_ids[start : start + 100]
        page = result(await call(client, "agents.receipts", {"session_id": main, "client_input_ids": chunk}))
        for receipt in page["receipts"]:
            assert receipt["client_input_id"] not in found, f"two receipts of {receipt['client_input_id']}"
            found[receipt["client_input_id"]] = receipt
    return found


async def in_batches(calls: list[Any], size: int = 32) -> list[Any]:
    done: list[Any] = []
    for start in range(0, len(calls), size):
        done.extend(await asyncio.gather(*calls[start : start + size]))
    return done


async def verify(client: UserHostClient, main: str, ledger: Ledger, database: Path) -> None:
    assert await main_session(client) == main, "the main session changed across the restart"

    # Every acknowledged receipt of the campaign is there as it was acknowledged.
    acknowledged = list(ledger.acknowledged.values())
    stored = await receipts_of(
        client, main, [user_input["client_input_id"] for user_input, _ in acknowledged]
    )
    for user_input, receipt in acknowledged:
        now = stored.get(user_input["client_input_id"])
        assert now is not None, f"the acknowledged receipt of {user_input['request_id']} is gone"
        assert identity(now) == identity(receipt), (receipt, now)
        assert now["revision"] >= receipt["revision"], (receipt, now)

    # Retrying this round's acknowledged sends replays the same receipts.
    retried = await in_batches([send(client, main, ledger.acknowledged[r][0]) for r in ledger.round_sends])
    for request_id, response in zip(ledger.round_sends, retried, strict=True):
        again = result(response)
        assert again["replayed"] is True, (request_id, again)
        assert identity(again["receipt"]) == identity(ledger.acknowledged[request_id][1]), (request_id, again)

    # The attachments of this round's acknowledged sends are readable, byte for byte.
    for request_id in ledger.round_sends:
        user_input, receipt = ledger.acknowledged[request_id]
        for sent, saved in zip(user_input.get("attachments", []), receipt["attachments"], strict=True):
            read = result(
                await call(
                    client,
                    "host.session.attachment.read",
                    {"session_id": main, "attachment_id": saved["attachment_id"], "offset": 0},
                )
            )
            assert (read["data"], read["eof"], read["final_sha256"]) == (
                sent["data"],
                True,
                sent["sha256"],
            ), read

    # Every acknowledged reaction is reflected: its receipt retained, the revision at least the acknowledged.
    replays = await in_batches(
        [call(client, "agents.react", params) for params, _ in ledger.reactions.values()]
    )
    latest: dict[int, dict[str, Any]] = {}
    for (params, reacted), response in zip(ledger.reactions.values(), replays, strict=True):
        again = result(response)
        assert again["replayed"] is True, (params, again)
        assert again["receipt"] == reacted["receipt"], (reacted, again)
        assert again["reactions"]["revision"] >= reacted["reactions"]["revision"], (reacted, again)
        seq = params["message_seq"]
        if seq not in latest or reacted["reactions"]["revision"] > latest[seq]["revision"]:
            latest[seq] = reacted["reactions"]
    if latest:
        seqs = sorted(latest)
        unsettled = {params["message_seq"] for params in ledger.reactions_in_flight.values()}
        for start in range(0, len(seqs), 100):
            page = result(
                await call(
                    client,
                    "agents.reactions",
                    {"session_id": main, "message_seqs": seqs[start : start + 100]},
                )
            )
            for message in page["messages"]:
                acked = latest[message["message_seq"]]
                assert message["reactions"]["revision"] >= acked["revision"], (acked, message)
                if message["message_seq"] not in unsettled:
                    assert message["reactions"] == acked, (acked, message)

    # What was in flight at the kill is absent or admitted exactly once; a retry settles it either way.
    pending = list(ledger.in_flight.values())
    found = await receipts_of(client, main, [user_input["client_input_id"] for user_input in pending])
    retried = await in_batches([send(client, main, user_input) for user_input in pending])
    for user_input, response in zip(pending, retried, strict=True):
        again = result(response)
        before = found.get(user_input["client_input_id"])
        if before is None:
            assert again["replayed"] is False, (user_input, again)
        else:
            assert before["request_id"] == user_input["request_id"], before
            assert again["replayed"] is True and identity(again["receipt"]) == identity(before), (
                before,
                again,
            )
        ledger.acknowledged[user_input["request_id"]] = (user_input, again["receipt"])

    # A reaction write in flight at the kill landed at most once: retried on the revision it expected, it
    # is either replayed or applied now, and either way the message is one revision past that.
    unsure = list(ledger.reactions_in_flight.values())
    settled = await in_batches([call(client, "agents.react", params) for params in unsure])
    for params, response in zip(unsure, settled, strict=True):
        again = result(response)
        assert again["receipt"]["request_id"] == params["request_id"], again
        assert again["reactions"] == {
            "owner": params["emoji"],
            "revision": params["expected_revision"] + 1,
        }, (
            params,
            again,
        )

    # Search still finds this round's admitted inputs.
    for request_id in ledger.round_sends[-3:]:
        user_input, receipt = ledger.acknowledged[request_id]
        found = result(
            await call(
                client,
                "agents.history.search",
                {"session_id": main, "query": user_input["text"], "page_size": 50},
            )
        )
        assert receipt["history_seq"] in [m["message_seq"] for m in found["messages"]], (user_input, found)

    # Nothing was admitted twice, and nothing half-admitted: one receipt for each user message.
    assert file_rows(database, "PRAGMA integrity_check") == [("ok",)]
    messages = file_rows(database, "SELECT seq, role, text FROM messages ORDER BY seq")
    assert [seq for seq, _, _ in messages] == list(range(1, len(messages) + 1)), "history sequences have gaps"
    user_texts = [text for _, role, text in messages if role == "user"]
    assert len(user_texts) == len(set(user_texts)), "a user input is in the history twice"
    receipts = file_rows(database, "SELECT history_seq, text_sha256, client_input_id FROM input_receipts")
    assert len({seq for seq, _, _ in receipts}) == len(receipts) == len(user_texts), (
        len(receipts),
        len(user_texts),
    )
    by_seq = {seq: (role, text) for seq, role, text in messages}
    for seq, text_sha256, client_input_id in receipts:
        role, text = by_seq[seq]
        assert role == "user" and hashlib.sha256(text.encode()).hexdigest() == text_sha256, (
            client_input_id,
            seq,
        )


# --- what a client sees of a killed host -------------------------------------------------------------


async def test_a_reset_connection_fails_the_calls_in_flight(tmp_path: Path, run_dir: Path) -> None:
    """A host killed with a request still unread in its socket resets the connection (ECONNRESET) rather
    than closing it: the client's call in flight must still fail with ConnectionLost, not wait forever."""
    home = tmp_path / "home"
    home.mkdir()
    socket, log = run_dir / "reset.sock", tmp_path / "host.log"
    process = await start_host(home, socket, log)
    client: UserHostClient | None = None
    try:
        client = await connect_ready(process, socket, log)
        os.kill(process.pid, signal.SIGSTOP)  # the host reads nothing more
        request = {
            "jsonrpc": "2.0",
            "id": 77,
            "method": "plugin/client/request",
            "params": {"plugin_id": "wuu.personal", "method": "agents.main_session", "params": {}},
        }
        reply = client.expect_response(77)
        await client.send_bytes(json.dumps(request).encode() + b"\n")  # now in the host's socket buffer
        process.send_signal(signal.SIGKILL)
        await process.wait()
        done, _ = await asyncio.wait([reply], timeout=5)
        assert done, f"the call is still waiting 5 s after its host was killed (client.lost: {client.lost!r})"
        assert isinstance(reply.exception(), ConnectionLost), repr(reply.exception())
        assert client.lost is not None
    finally:
        if client is not None:
            await client.close(timeout=1)
        await reap(process)


# --- the campaign --------------------------------------------------------------------------------------


async def test_acknowledged_writes_survive_sigkill(tmp_path: Path, run_dir: Path) -> None:
    seed = int(os.environ.get("WUU_CHAOS_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    home = tmp_path / "home"
    home.mkdir()
    socket = run_dir / "host.sock"
    log = tmp_path / "host.log"
    database = home / "user-spaces" / "local" / "personal" / "state" / "personal.sqlite"
    ledger = Ledger()
    clients: list[UserHostClient] = []
    process = await start_host(home, socket, log)
    where = "before the first kill"
    try:
        first = await connect_ready(process, socket, log)
        clients.append(first)
        main = await main_session(first)
        for round_no in range(1, KILLS + 1):
            delay = rng.uniform(0, LOAD_WINDOW_S)
            where = f"kill {round_no} of {KILLS}, {delay * 1000:.0f} ms into the load"
            ledger.next_round()
            while len(clients) < CLIENTS:
                clients.append(await connect_ready(process, socket, log))
            loads = [
                asyncio.ensure_future(load(client, main, round_no, index, ledger))
                for index, client in enumerate(clients)
            ]
            await asyncio.sleep(delay)  # the moment of the kill, not a wait for anything
            process.send_signal(signal.SIGKILL)
            await process.wait()
            assert process.returncode == -signal.SIGKILL, (
                f"the host exited {process.returncode} before the kill"
            )
            # The host is gone: every call the clients have not settled fails now (ConnectionLost), and
            # stays unacknowledged.
            outcomes = await asyncio.wait_for(asyncio.gather(*loads, return_exceptions=True), DEADLINE)
            for outcome in outcomes:
                if not ended_by_the_kill(outcome):
                    raise AssertionError(f"a client's load failed: {outcome!r}") from outcome
            for client in clients:
                await client.close()
            clients.clear()

            process = await start_host(home, socket, log)
            checker = await connect_ready(process, socket, log)
            clients.append(checker)
            await verify(checker, main, ledger, database)
        assert len(ledger.acknowledged) > KILLS, f"the load hardly ran ({len(ledger.acknowledged)} sends)"
    except AssertionError as failure:
        raise AssertionError(
            f"seed {seed} (rerun with WUU_CHAOS_SEED={seed}), {where}: {failure}"
        ) from failure
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()
        await reap(process)
