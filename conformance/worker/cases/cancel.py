"""cancel: the immediate answer, the one terminal reply of the cancelled request; overlapping requests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson

from ...outcomes import CaseFailed
from ..session import Session, code_of
from ..suite import WORKER

NANOSECONDS = 1_000_000_000


@dataclass
class LongRequest:
    """A request sent by hand that stays in flight until it is cancelled (or the connection ends)."""

    id: str
    method: str
    waiter: asyncio.Future[dict[str, Any]]


def long_seconds(s: Session) -> int:
    """How long a long request would run: well past the reply timeout, so that nothing waits for it."""
    return int(s.timeout) * 3 + 30


async def start_long_request(s: Session, request_id: str, kind: str = "read") -> LongRequest:
    """Send a request that stays in flight, and make sure it does (a round trip answers meanwhile).

    `read`: a long-poll `process/read` of a silent `sleep` process (needs process/start);
    `exec`: an `exec_command` of `sleep`. Both run in the mode from `s.command_mode()`.
    Skips when the adapter runs no commands.
    """
    mode = await s.command_mode()
    seconds = long_seconds(s)
    if kind == "read":
        s.require_method("process/start")
        record = await s.ok("process/start", {"argv": ["sleep", str(seconds)], "permission_mode": mode})
        method, data = "process/read", {"Process": record["id"], "Wait": seconds * NANOSECONDS}
    else:
        method, data = "execute", s.tool("exec_command", {"argv": ["sleep", str(seconds)]}, mode)
    waiter = s.client.expect_reply(request_id)
    await s.client.send_frame({"id": request_id, "method": method, "token": s.client.token, "data": data})
    await s.ok("process/list", {})
    if waiter.done():
        reply = await s.wait_reply(method, waiter)
        raise CaseFailed(f"{method} of a silent `sleep {seconds}` was answered at once: {reply}")
    return LongRequest(request_id, method, waiter)


async def start_any_long_request(s: Session, request_id: str) -> LongRequest:
    """A long `process/read` if the adapter serves process/start, else a long `exec_command`."""
    kinds = await long_request_kinds(s)
    return await start_long_request(s, request_id, kinds[0])


async def long_request_kinds(s: Session) -> list[str]:
    """The kinds of long request this adapter can serve (skips if none)."""
    await s.command_mode()
    kinds = ["exec"]
    if "process/start" in s.methods:
        kinds.insert(0, "read")
    return kinds


def replies_to(s: Session, request_id: str) -> list[dict[str, Any]]:
    """Every reply frame received so far for `request_id`."""
    found = []
    for line in s.received():
        try:
            frame = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(frame, dict) and frame.get("id") == request_id and "method" not in frame:
            found.append(frame)
    return found


@WORKER.case("cancel.answered-at-once")
async def answered_at_once(s: Session) -> None:
    """cancel of a request in flight answers cancelled: true while the request is still running.

    The request would run far past the reply timeout, so a cancel that waited for it fails.
    """
    await s.initialize()
    for number, kind in enumerate(await long_request_kinds(s)):
        slow = await start_long_request(s, f"slow-{number}", kind)
        result = await s.ok("cancel", {"id": slow.id})
        s.expect(result == {"cancelled": True}, f"cancel of the {slow.method} in flight answered {result}")
        terminal = await s.wait_reply(slow.method, slow.waiter)
        s.expect(
            code_of(terminal) == "cancelled",
            f"the cancelled {slow.method} must end with the error cancelled; it answered {terminal}",
        )


@WORKER.case("cancel.one-terminal-reply")
async def one_terminal_reply(s: Session) -> None:
    """A cancelled request gets exactly one terminal reply, `cancelled`; then its id is free to reuse."""
    await s.initialize()
    for number, kind in enumerate(await long_request_kinds(s)):
        slow = await start_long_request(s, f"slow-{number}", kind)
        await s.ok("cancel", {"id": slow.id})
        terminal = await s.wait_reply(slow.method, slow.waiter)
        s.expect(
            code_of(terminal) == "cancelled",
            f"the cancelled {slow.method} must end with the error cancelled; it answered {terminal}",
        )
        # A round trip: a second terminal reply, if any, would have arrived before its answer.
        await s.ok("process/list", {})
        count = len(replies_to(s, slow.id))
        s.expect(count == 1, f"the cancelled {slow.method} got {count} replies; it gets exactly one")
        # Its handler has drained: the id is no longer in flight, so it may be reused at once.
        reuse = await s.request("process/list", {}, request_id=slow.id)
        s.expect(
            "data" in reuse,
            f"reusing the id of the cancelled {slow.method} after its terminal reply failed: {reuse}",
        )


# A command that keeps appending to a log until it is ended, and that, if it gets TERM, goes on appending for a
# while before it exits: whatever ends it, nothing may be appended once its cancelled request has been answered.
DRAINING_COMMAND = """
log=$1
beat() { i=0; while [ "$i" -lt "$1" ]; do echo beat >> "$log"; sleep 0.03; i=$((i + 1)); done; }
trap 'echo term >> "$log"; beat 10; echo ended >> "$log"; exit 0' TERM
while :; do beat 1; done
"""
DRAIN_LOG = "drain.log"
# How long the log is watched after the terminal reply: longer than the command's TERM handler takes.
WATCH_SECONDS = 1.5


async def drain_log(s: Session) -> str | None:
    """The command's log, or None while it does not exist."""
    reply = await s.execute("read_file", path=DRAIN_LOG)
    if code_of(reply) == "not_found":
        return None
    s.expect("data" in reply, f"read_file {DRAIN_LOG} failed: {reply.get('error')}")
    output: str = reply["data"]["output"]
    return output


@WORKER.case("cancel.drained-before-reply")
async def drained_before_reply(s: Session) -> None:
    """The terminal reply of a cancelled exec_command comes after its handler has drained: the command, which
    appends to a log until it ends (and for a while after a TERM), appends nothing once `cancelled` has come.

    However the adapter ends the command (TERM with a grace, or KILL), it has ended when the reply is sent.
    """
    await s.initialize()
    mode = await s.command_mode()
    arguments = {"argv": ["sh", "-c", DRAINING_COMMAND, "sh", DRAIN_LOG]}
    waiter = s.client.expect_reply("draining")
    data = s.tool("exec_command", arguments, mode)
    await s.client.send_frame({"id": "draining", "method": "execute", "token": s.client.token, "data": data})

    async def beating() -> bool:
        log = await drain_log(s)
        return log is not None and "beat" in log

    await s.until(beating, f"the command to append to {DRAIN_LOG}")
    if waiter.done():
        raise CaseFailed(f"the endless command was answered before any cancel: {waiter.result()}")
    result = await s.ok("cancel", {"id": "draining"})
    s.expect(result == {"cancelled": True}, f"cancel of the running exec_command answered {result}")
    terminal = await s.wait_reply("execute", waiter)
    s.expect(
        code_of(terminal) in ("cancelled", None),
        f"the cancelled exec_command must end with cancelled (or its result); it answered {terminal}",
    )
    at_reply = await drain_log(s)
    deadline = asyncio.get_running_loop().time() + WATCH_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        now = await drain_log(s)
        if now != at_reply:
            added = (now or "")[len(at_reply or "") :].split()
            raise CaseFailed(
                f"the cancelled exec_command's command still ran after its terminal reply: it appended "
                f"{added} to {DRAIN_LOG}; the reply must wait until the command has ended"
            )
        await asyncio.sleep(0.05)


@WORKER.case("cancel.unknown-id")
async def unknown_id(s: Session) -> None:
    """cancel of an id never sent, or of a request already answered, answers cancelled: false."""
    await s.initialize()
    result = await s.ok("cancel", {"id": "never-sent"})
    s.expect(result == {"cancelled": False}, f"cancel of an unknown id answered {result}")
    await s.ok("process/list", {}, request_id="finished")
    result = await s.ok("cancel", {"id": "finished"})
    s.expect(result == {"cancelled": False}, f"cancel of a finished request answered {result}")


@WORKER.case("methods.overlap")
async def overlap(s: Session) -> None:
    """Requests overlap: quick requests are answered while two slow ones are in flight."""
    await s.initialize()
    kinds = await long_request_kinds(s)
    slow = [await start_long_request(s, f"slow-{number}", kind) for number, kind in enumerate(kinds * 2)]
    quick = await asyncio.gather(*(s.request("process/list", {}) for _ in range(4)))
    for reply in quick:
        s.expect("data" in reply, f"process/list failed while slow requests ran: {reply}")
    pending = [request.method for request in slow if not request.waiter.done()]
    s.expect(len(pending) == len(slow), f"only {pending} of {len(slow)} slow requests remained in flight")
    for request in slow:
        await s.ok("cancel", {"id": request.id})
    for request in slow:
        terminal = await s.wait_reply(request.method, request.waiter)
        s.expect(
            code_of(terminal) == "cancelled",
            f"the cancelled {request.method} must end with cancelled; it answered {terminal}",
        )
