"""A fake OpenAI-compatible chat-completions endpoint for the model adapter's tests (no real endpoint can run
here): an aiohttp server on 127.0.0.1 that records every request and answers each with the next scripted
answer, or holds it until the test ends (`HANG`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

PATH = "/v1/chat/completions"
HANG = None
"""An answer that never comes: the request is held until the endpoint closes."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


@dataclass(frozen=True)
class Received:
    """One request the endpoint was sent."""

    headers: Mapping[str, str]
    body: dict[str, Any]


@dataclass
class FakeChatEndpoint:
    base_url: str
    answers: list[Answer | None] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def answer(self, *answers: Answer | None) -> None:
        self.answers.extend(answers)


def completion(content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> Answer:
    """A 200 answer with one choice whose assistant message says `content` and makes `tool_calls`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    return Answer(200, json.dumps(body).encode())


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A tool call of the wire, its arguments a JSON string as the endpoint sends them."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@asynccontextmanager
async def fake_endpoint() -> AsyncIterator[FakeChatEndpoint]:
    """A running fake endpoint; its `base_url` is what a model configuration names."""
    endpoint: FakeChatEndpoint | None = None

    async def serve(request: web.Request) -> web.Response:
        assert endpoint is not None
        endpoint.received.append(Received(dict(request.headers), await request.json()))
        answer = endpoint.answers.pop(0)
        if answer is HANG:
            await endpoint.release.wait()
            return web.Response(status=503)
        return web.Response(status=answer.status, body=answer.body, content_type="application/json")

    app = web.Application()
    app.router.add_post(PATH, serve)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    endpoint = FakeChatEndpoint(f"http://{host}:{port}/v1")
    try:
        yield endpoint
    finally:
        endpoint.release.set()
        await runner.cleanup()
