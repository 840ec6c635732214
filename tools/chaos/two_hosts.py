"""Two user hosts started at once on one home (row `userhost.two-hosts`).

Each round starts two `wuu-userhost serve` processes of the Personal composition on the same home, the
second a seeded moment (0 to STAGGER_S) after the first, and sends inputs with attachments to whichever
serves first while the other is still starting. Exactly one of them may serve: the other MUST exit 2 with
`user_host_already_running` (naming the winner's pid when it names one) and never clean up what the winner
is admitting (spec/schema/userhost/initialize.schema.json). Every input a winner acknowledged must be
accepted, with its attachments readable byte for byte on the winner of its round and of every later round.
No process of the campaign may be left behind.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wuu.host.userhost.client import ConnectionLost, UserHostClient
from wuu.host.userhost.personal import PLUGIN_ID

from .campaign import Campaign, Context, Outcome, reap_leftovers, traceback_in

NAME = "userhost.two-hosts"
FULL_ROUNDS = 50
"""Rounds at scale 1."""
SENDS = 6
"""Inputs sent to the winner in each round, each with one or two attachments."""
STAGGER_S = 0.6
"""The most time between the two hosts' starts."""
STEP_S = 30.0
"""How long a host may take to serve, to exit, or to stop after SIGTERM."""
REFUSED = "user_host_already_running"


@dataclass
class Host:
    """One `wuu-userhost serve` process of a round."""

    label: str
    socket: Path
    log: Path
    process: asyncio.subprocess.Process

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Sent:
    """What the winners acknowledged: (attachment metadata, its bytes), over the campaign."""

    attachments: list[tuple[dict[str, Any], bytes]] = field(default_factory=list)


async def _start(home: Path, sockets: Path, label: str) -> Host:
    socket, log = sockets / f"{label}.sock", home.parent / f"{label}.log"
    with open(log, "wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "wuu.host.userhost", "serve", "--user-space", "local"),
            *("--product-domain", "personal", "--composition-profile", "personal"),
            *("--home", str(home), "--listen", f"unix:{socket}"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    return Host(label, socket, log, process)


async def _serving(host: Host) -> UserHostClient | None:
    """An initialized client of `host` once it serves; None when it exits first."""
    deadline = time.monotonic() + STEP_S
    while host.process.returncode is None:
        if host.socket.exists():
            try:
                client = await UserHostClient.connect_unix(host.socket)
            except (FileNotFoundError, ConnectionRefusedError):
                client = None
            if client is not None:
                try:
                    await asyncio.wait_for(client.initialize(), 5)
                    return client
                except (ConnectionLost, OSError, TimeoutError):
                    with contextlib.suppress(OSError):
                        await client.close(timeout=1)
        if time.monotonic() > deadline:
            raise TimeoutError(f"host {host.label} neither served nor exited within {STEP_S:g} s")
        await asyncio.sleep(0.02)
    return None


async def _call(client: UserHostClient, method: str, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = await client.request(
        "plugin/client/request", {"plugin_id": PLUGIN_ID, "method": method, "params": params, **extra}
    )
    if "result" not in response:
        raise AssertionError(f"{method} failed: {response.get('error')}")
    result: dict[str, Any] = response["result"]["result"]
    return result


def _attachment(content: bytes, name: str) -> dict[str, Any]:
    return {
        "filename": name,
        "media_type": "application/octet-stream",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "data": base64.b64encode(content).decode("ascii"),
    }


async def _send(
    client: UserHostClient, main: str, rng: random.Random, key: str
) -> list[tuple[dict[str, Any], bytes]]:
    """One input with one or two attachments; its acknowledged attachments with their bytes."""
    contents = [rng.randbytes(rng.randrange(0, 64 * 1024)) for _ in range(rng.randint(1, 2))]
    user_input = {
        "client_input_id": key,
        "request_id": f"req-{key}",
        "text": f"input {key}",
        "attachments": [_attachment(content, f"{key}-{n}.bin") for n, content in enumerate(contents)],
    }
    receipt = (await _call(client, "agents.send", {"session_id": main}, user_input=user_input))["receipt"]
    if receipt["accepted"] is not True:
        raise AssertionError(f"input {key} was acknowledged but not accepted: {receipt}")
    return list(zip(receipt["attachments"], contents, strict=True))


async def _unreadable(
    client: UserHostClient, main: str, sent: list[tuple[dict[str, Any], bytes]]
) -> list[str]:
    """The acknowledged attachments that do not read back as their bytes (each read whole in one chunk)."""
    wrong = []
    for metadata, content in sent:
        params = {"session_id": main, "attachment_id": metadata["attachment_id"], "offset": 0}
        params["max_chars"] = max(4, 4 * -(-len(content) // 3))
        response = await client.request(
            "plugin/client/request",
            {"plugin_id": PLUGIN_ID, "method": "host.session.attachment.read", "params": params},
        )
        chunk = response.get("result", {}).get("result")
        if chunk is None or not chunk["eof"] or base64.b64decode(chunk["data"]) != content:
            wrong.append(f"{metadata['attachment_id']}: {response.get('error') or 'other bytes'}")
    return wrong


async def _stop(host: Host) -> int:
    if host.process.returncode is None:
        host.process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(host.process.wait(), STEP_S)
    except TimeoutError:
        host.process.kill()
        await host.process.wait()
        return -9


async def _round(number: int, home: Path, sockets: Path, rng: random.Random, sent: Sent) -> list[str]:
    """One round; its failures. Both hosts are stopped at its end, whatever happened."""
    hosts = [await _start(home, sockets, f"r{number}-a")]
    winner: list[Host] = []
    failures: list[str] = []
    try:
        await asyncio.sleep(rng.uniform(0, STAGGER_S))  # a seeded stagger, so the second starts at any moment
        hosts.append(await _start(home, sockets, f"r{number}-b"))
        failures += await _race(number, hosts, rng, sent, winner)
    finally:
        for host in hosts:
            code = await _stop(host)
            if host in winner and code != 0:
                failures.append(f"round {number}: the serving host {host.label} exited {code} after SIGTERM")
            if (trace := traceback_in(host.stderr())) is not None:
                failures.append(f"round {number}: host {host.label}: {trace}")
    return failures


async def _race(
    number: int, hosts: list[Host], rng: random.Random, sent: Sent, winner: list[Host]
) -> list[str]:
    """Wait for the hosts to serve or exit, load the first that serves (appended to `winner`) while the other
    starts, and check the other's refusal and every acknowledged attachment; the failures."""
    waits = {asyncio.create_task(_serving(host)): host for host in hosts}
    clients: list[UserHostClient] = []
    round_sent: list[tuple[dict[str, Any], bytes]] = []
    sending: list[asyncio.Task[None]] = []
    main = ""
    try:
        for finished in asyncio.as_completed(list(waits)):
            client = await finished
            if client is None:
                continue
            clients.append(client)
            if winner:
                return [f"round {number}: both hosts serve the same home"]
            winner.append(
                next(host for task, host in waits.items() if task.done() and task.result() is client)
            )
            main = (await _call(client, "agents.main_session", {}))["session_id"]

            async def load(client: UserHostClient = client, main: str = main) -> None:
                sends = [_send(client, main, rng, f"r{number}-s{n}") for n in range(SENDS)]
                for acknowledged in await asyncio.gather(*sends):
                    round_sent.extend(acknowledged)

            sending.append(asyncio.create_task(load()))  # while the other host may still be starting
        if not winner:
            return [f"round {number}: no host served: {_tails(hosts)}"]
        await asyncio.gather(*sending)
        failures = []
        for loser in hosts:
            if loser is winner[0]:
                continue
            code = await asyncio.wait_for(loser.process.wait(), STEP_S)
            stderr = loser.stderr()
            named = re.search(r"\(pid (\d+);", stderr)
            if code != 2 or REFUSED not in stderr:
                failures.append(
                    f"round {number}: host {loser.label} exited {code} without {REFUSED}: {stderr[-400:]}"
                )
            elif named is not None and int(named[1]) != winner[0].process.pid:
                failures.append(f"round {number}: host {loser.label} named pid {named[1]}, not the winner's")
        sent.attachments.extend(round_sent)  # and what earlier rounds' winners acknowledged is read again
        unreadable = await _unreadable(clients[0], main, sent.attachments)
        return failures + [f"round {number}: unreadable {item}" for item in unreadable]
    finally:
        for client in clients:
            with contextlib.suppress(OSError, ConnectionLost):
                await client.close(timeout=2)
        for task in [*waits, *sending]:
            task.cancel()
        await asyncio.gather(*waits, *sending, return_exceptions=True)


def _tails(hosts: list[Host]) -> str:
    return " | ".join(
        f"{host.label} exited {host.process.returncode}: {host.stderr()[-300:]}" for host in hosts
    )


async def _run(context: Context) -> Outcome:
    rng = random.Random(context.seed)
    home = context.workdir / "home"
    home.mkdir(mode=0o700)
    sockets = Path(tempfile.mkdtemp(prefix="uh2-"))  # short: a socket path has at most 107 bytes
    outcome, sent = Outcome(), Sent()
    try:
        for number in range(context.size(FULL_ROUNDS)):
            failures = await _round(number, home, sockets, rng, sent)
            outcome.runs += 1
            outcome.failures += failures
            if failures:
                break
    finally:
        left = reap_leftovers(home)
        shutil.rmtree(sockets, ignore_errors=True)
    outcome.failures += [f"a process was left behind: {item}" for item in left]
    return Outcome(
        runs=outcome.runs,
        failures=[f"{failure} (rerun: {context.rerun(NAME)})" for failure in outcome.failures],
    )


CAMPAIGNS = [Campaign(NAME, _run)]
