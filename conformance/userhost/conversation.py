"""The conversation helpers of the Personal cases that need the host's agent to answer: reading the history
page by page, polling it, and exchanging a user message for the assistant message after it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .personal import HISTORY_PAGE, open_main, send
from .session import HostSession

READ = "agents.history.read"
POLL = 0.02
"""Seconds between two reads of a poll (each poll ends at the case's reply timeout)."""


async def read_page(
    host: HostSession,
    session_id: str,
    *,
    before_seq: int | None = None,
    page_size: int | None = None,
) -> dict[str, Any]:
    """One `AgentsHistoryReadResult` (fields left out when None)."""
    params: dict[str, Any] = {"session_id": session_id}
    if before_seq is not None:
        params["before_seq"] = before_seq
    if page_size is not None:
        params["page_size"] = page_size
    return await host.call_ok(READ, params)


async def everything(host: HostSession, session_id: str) -> list[dict[str, Any]]:
    """Every message of the main conversation, newest first (pages of 100)."""
    found: list[dict[str, Any]] = []
    before: int | None = None
    while True:
        page = await read_page(host, session_id, before_seq=before, page_size=HISTORY_PAGE)
        found.extend(page["messages"])
        before = page["next_before_seq"]
        if before is None:
            return found


async def poll(host: HostSession, session_id: str, done: Callable[[list[dict[str, Any]]], Any]) -> Any | None:
    """Reread the newest history page until `done(messages)` is truthy; its value, or None at the deadline."""
    deadline = asyncio.get_running_loop().time() + host.timeout
    while True:
        messages = (await read_page(host, session_id, page_size=HISTORY_PAGE))["messages"]
        found = done(messages)
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            return None
        await asyncio.sleep(POLL)


async def exchange(host: HostSession, session_id: str, text: str) -> tuple[int, dict[str, Any]]:
    """Send `text` and wait for the assistant message after it: (the user message's sequence, that assistant
    message). Skips the case when the host's agent does not answer within the reply timeout. Waiting for
    each answer keeps the conversation still between exchanges, so a case can compare whole reads."""
    receipt = await send(host, text)
    user_seq = receipt["history_seq"]

    def answered(messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        mine = user_seq
        if mine is None:  # not in history yet when it was admitted: find it by its text
            mine = next(
                (m["message_seq"] for m in messages if m["role"] == "user" and m["text"] == text), None
            )
        newer = [m for m in messages if mine is not None and m["message_seq"] > mine]
        replies = [m for m in newer if m["role"] == "assistant"]
        return (mine, replies[-1]) if mine is not None and replies else None

    found = await poll(host, session_id, answered)
    if found is None:
        host.skip(f"no assistant message followed the user message {text!r} within {host.timeout:g} s")
    assert found is not None
    user, reply = found
    return int(user), reply


async def conversation(host: HostSession, texts: list[str]) -> tuple[str, list[int]]:
    """Open the main session and exchange each text in turn: (the session, the user messages' sequences)."""
    session_id = await open_main(host)
    seqs = [(await exchange(host, session_id, text))[0] for text in texts]
    return session_id, seqs


def seqs_of(messages: list[dict[str, Any]]) -> list[int]:
    return [m["message_seq"] for m in messages]
