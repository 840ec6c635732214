"""Cases of `plugin/client/cancel`: unknown and answered ids, connection-local ids, and exactly one response
for a cancelled request, whichever way the race between the request and its cancel goes.

A request that stays in flight long enough to be cancelled on any conforming host is an `agents.send` with
a large attachment: the host reads, decodes, hashes and stores megabytes before it answers. Which responses
arrive in which order tells what the host saw: a connection's responses come in the order the host sent
them, so a response that comes before a request's own response was sent while that request was unanswered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..connection import Connection, Message, RequestId, code_of
from ..personal import attachment, content, expect_not_admitted, open_main, receipts, user_input
from ..session import HostSession, initialize_params
from ..suite import USERHOST

SLOW_SEND_SIZES = (8 * 1024 * 1024, 20 * 1024 * 1024)
"""Attachment sizes of the slow send, tried in turn until one is still in flight when the cancel comes."""
SEND_ID = "conformance-send"
UNKNOWN_ID = "conformance-unknown"


def slow_send(host: HostSession, session_id: str, size: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The params of an `agents.send` with one attachment of `size` bytes, and its user input."""
    envelope = user_input(f"a slow send of {size} bytes", [attachment(content(size), "slow.bin")])
    return host.plugin_params("agents.send", {"session_id": session_id}, user_input=envelope), envelope


def tracked(order: list[asyncio.Future[Message]], waiter: asyncio.Future[Message]) -> asyncio.Future[Message]:
    """`waiter`, appended to `order` when its response arrives. Track each request right after sending it:
    then `order` is the order its responses arrived in."""
    waiter.add_done_callback(order.append)
    return waiter


async def cancel(host: HostSession, request_id: RequestId, on: Connection | None = None) -> bool:
    """`plugin/client/cancel` of `request_id`; whether it says the request was cancelled."""
    result = await host.ok("plugin/client/cancel", {"id": request_id}, on=on)
    return bool(result["cancelled"])


def expect_send_outcome(host: HostSession, message: Message, what: str, *, may_be_cancelled: bool) -> None:
    """Fail unless the send's response is its result, or (when allowed) the error `cancelled`."""
    if "result" in message or (may_be_cancelled and code_of(message) == "cancelled"):
        return
    allowed = "its result or cancelled" if may_be_cancelled else "its result"
    host.expect(False, f"{what} must get {allowed}; it got {message.get('error')}")


@USERHOST.case("cancel.unknown-id")
async def unknown_id(host: HostSession) -> None:
    """plugin/client/cancel answers cancelled false for ids never used (an integer and a string), for an
    answered request (a second initialize) and, with wuu.personal, for a plugin call already answered."""
    await host.initialize()
    host.expect(not await cancel(host, 987654321), "cancelling the unused id 987654321 answered true")
    host.expect(not await cancel(host, UNKNOWN_ID), f"cancelling the unused id {UNKNOWN_ID!r} answered true")
    again = "conformance-initialize-again"
    await host.error("initialize", initialize_params(), "already_initialized", request_id=again)
    host.expect(not await cancel(host, again), "cancelling an answered initialize answered true")
    if host.serves_personal:
        done = "conformance-answered-call"
        call = host.plugin_params("agents.main_session", {})
        answered = await host.request("plugin/client/request", call, request_id=done)
        host.expect("result" in answered, f"agents.main_session failed: {answered.get('error')}")
        host.expect(not await cancel(host, done), "cancelling a plugin call already answered answered true")


@USERHOST.case("cancel.exactly-one-response")
async def exactly_one_response(host: HostSession) -> None:
    """A large agents.send with its cancel sent right behind it: the cancel is answered at once (true when
    its answer comes before the send's, and never after the send's result); the send gets exactly one
    response, its receipt or `cancelled`; a cancelled send admitted nothing, an answered one is admitted;
    and cancelling it again answers false."""
    main = await open_main(host)
    params, envelope = slow_send(host, main, SLOW_SEND_SIZES[0])
    order: list[asyncio.Future[Message]] = []
    sending = tracked(order, await host.main.request("plugin/client/request", params, request_id=SEND_ID))
    cancelling = tracked(order, await host.main.request("plugin/client/cancel", {"id": SEND_ID}))
    answer = await host.response(cancelling, "plugin/client/cancel")
    sent = await host.response(sending, "agents.send")
    host.without_receipts(sent)
    host.expect("result" in answer, f"plugin/client/cancel failed: {answer.get('error')}")
    cancelled = answer["result"]["cancelled"]
    expect_send_outcome(host, sent, "the cancelled send", may_be_cancelled=cancelled)
    if order[0] is cancelling:
        host.expect(cancelled, "the cancel was answered before the send it named, yet it answered false")
    elif "result" in sent:
        host.expect(
            not cancelled,
            "the cancel answered true only after the send's result: it was not answered at once",
        )
    if code_of(sent) == "cancelled":
        await expect_not_admitted(host, envelope, "the send answered cancelled")
    else:
        found = await receipts(host, envelope["client_input_id"])
        host.expect(len(found) == 1, f"the send answered with a receipt, yet agents.receipts has {found}")
    host.expect(not await cancel(host, SEND_ID), "cancelling the answered send again answered true")
    host.check()


@USERHOST.case("cancel.connection-local")
async def connection_local(host: HostSession) -> None:
    """Client B cancelling the id of client A's large agents.send while it is in flight gets cancelled false,
    and A's send completes with its receipt; both clients go on."""
    main = await open_main(host)
    other = await host.client()
    for size in SLOW_SEND_SIZES:
        params, _ = slow_send(host, main, size)
        order: list[asyncio.Future[Message]] = []
        sending = tracked(order, await host.main.request("plugin/client/request", params, request_id=SEND_ID))
        # A request sent behind the send and answered proves the host has read the send.
        probe = tracked(order, await host.main.request("plugin/client/cancel", {"id": UNKNOWN_ID}))
        await host.response(probe, "plugin/client/cancel")
        if order[0] is sending:
            host.without_receipts(await host.response(sending, "agents.send"))
            continue
        foreign = tracked(order, await other.request("plugin/client/cancel", {"id": SEND_ID}))
        answer = await host.response(foreign, "plugin/client/cancel")
        sent = await host.response(sending, "agents.send")
        host.without_receipts(sent)
        host.expect("result" in answer, f"plugin/client/cancel failed: {answer.get('error')}")
        host.expect(
            answer["result"]["cancelled"] is False,
            "client B's cancel of the id of client A's request in flight answered true",
        )
        expect_send_outcome(
            host, sent, "client A's send, cancelled by id on client B", may_be_cancelled=False
        )
        if order.index(foreign) < order.index(sending):
            for connection in (host.main, other):
                host.expect(not await cancel(host, UNKNOWN_ID, on=connection), "a cancel answered true")
            return
    host.skip(
        "no agents.send stayed in flight long enough to be cancelled from another client "
        f"(attachments of {', '.join(str(size) for size in SLOW_SEND_SIZES)} bytes were answered first)"
    )
