"""The model adapter: one interface for the Personal main agent and its reviewer, the deterministic
`StandInModel` (the embedded default) and `OpenAIChatModel` for any OpenAI-compatible chat-completions
endpoint, chosen by a `ModelConfig`.

A call gives the conversation (`ChatMessage`s), the tools the model may call (`ToolSpec`s: none for a
reviewer) and a deadline, an absolute time of the running event loop's clock (`loop.time()`); it returns a
`ModelReply`: text, and the tool calls the model asks for. A model that cannot answer, for whatever reason,
raises `ModelUnavailable`: a caller never executes anything on a failed call.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from .memory import MEMORY_TOOLS

Role = Literal["system", "user", "assistant", "tool"]


class ModelUnavailable(Exception):
    """The model gave no usable reply: what failed is in the message (never a credential)."""


@dataclass(frozen=True)
class ToolCall:
    """A call of one offered tool, as the model asked for it."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ChatMessage:
    """One message of the conversation put before the model. An assistant message carries the tool calls it
    made (`tool_calls`); a `tool` message answers one of them (`tool_call_id`)."""

    role: Role
    text: str
    tool_call_id: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: its name, what it does, and its arguments' JSON Schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ModelReply:
    """What the model answered: text (possibly empty) and the tool calls it asks for, in order."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


class ModelAdapter(Protocol):
    """A model behind the one interface the agent and the reviewer use."""

    name: str
    """The model's name, as task grants bind it."""

    async def complete(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[ToolSpec] = (), deadline: float
    ) -> ModelReply:
        """The model's reply to `messages`, calling only `tools`, before `deadline` (the running loop's
        clock). ModelUnavailable when it cannot give one."""
        ...


def new_call_id() -> str:
    """A tool call ID of the stand-in: unique per call, as a model's are."""
    return f"call_{secrets.token_hex(12)}"


_INTENT = re.compile(r"/(write|edit|run|start|input|ask|task|remember|recall|correct|forget|read)(?=\s|\Z)")
_INPUT = re.compile(r"[ \t]*(\S*)[ \t\n]?(.*)", re.DOTALL)
_REVIEW_LINE = re.compile(r"review:[ \t]*(allow|deny|unsure|fail|slow)[ \t]*")
EDIT_SEPARATOR = "---"
STAND_IN_RUN_TIMEOUT_MS = 60_000
"""The `timeout_ms` of the stand-in's `exec_command` calls."""
SPOKEN_TOOLS = frozenset({*MEMORY_TOOLS, "start_task", "read_attachment"})
"""The tools whose result the stand-in says as its answer."""


class StandInModel:
    """A deterministic stand-in for a model (not a model, and no judgment): it reads the newest user message
    and answers by a fixed script. The script is a contract the tests and the conformance suite drive every
    path with.

    As the agent (tools offered), a message whose first word is one of these intents becomes one call of the
    named tool, when that tool is offered (else it is answered like any other text):

    - `/write PATH` + newline + content -> `write_file` {path: PATH, content, create_dirs: true}; without a
      newline the content is empty.
    - `/edit PATH` + newline + old text + a line `---` + new text -> `edit_file` {path: PATH, old_string,
      new_string, replace_all: false}; the first line that is exactly `---` separates the two (the newlines
      around it belong to neither).
    - `/run ARGV...` -> `exec_command` {argv, cwd: ".", env: {}, timeout_ms: 60000}; `/start ARGV...` ->
      `process_start` {argv, cwd: ".", env: {}}. ARGV is split like a POSIX shell's words (`shlex`, no shell
      runs: no expansion, no operators).
    - `/input PROCESS_ID TEXT` -> `process_write` {process_id: PROCESS_ID, data: TEXT + newline}: a line, as
      typed at a terminal.
    - `/ask TEXT` -> `ask_owner` {question: TEXT}: a waiting-user question to the owner.
    - `/task TEXT` -> `start_task` {instructions: TEXT}: a background task whose first user message is TEXT
      (everything after `/task `, newlines included), so `/task /write PATH` + newline + content starts a task
      whose own stand-in writes the file.
    - `/read ATTACHMENT_ID [OFFSET]` -> `read_attachment` {attachment_id, offset: OFFSET or 0}.
    - `/remember TEXT` -> `memory_save` {text: TEXT}; `/recall [QUERY]` -> `memory_query` {query: QUERY, empty
      without one}; `/correct MEMORY_ID TEXT` -> `memory_correct` {memory_id: MEMORY_ID, text: TEXT};
      `/forget MEMORY_ID` -> `memory_forget` {memory_id: MEMORY_ID}. TEXT is the rest of the message after the
      one space or newline that follows the intent (or the ID), newlines included.

    PATH, argv and the process ID are passed as written: checking them is the host's work (an empty PATH or
    ARGV is a call the host refuses). An intent it cannot parse (an `/edit` without its `---` line, ARGV with
    an unclosed quote) and any other text is answered `Received: <text>` (`Received your attachments.` for
    an empty text), as the main agent always has.

    A request whose tool call has been answered (a `tool` message follows the newest user message) gets no
    new call: the answer is the last tool message's text when the call was one of SPOKEN_TOOLS (a memory tool,
    whose result the Memory service words for the owner, `start_task` or `read_attachment`) or the host refused
    it (it starts with `refused`), else nothing (the card an action's call made speaks for itself in the
    conversation).

    As a reviewer (no tools offered, and the newest user message is the reviewer's JSON object with the
    original user `request`), it reads a line `review: VERDICT` of that request (the first one): `allow`,
    `deny` or `unsure` -> that verdict as the reviewer's JSON answer; `fail` -> ModelUnavailable; `slow` ->
    it answers `allow` only after the deadline has passed (a reviewer must not wait for it); no such line ->
    `unsure` (the owner decides).
    """

    name = "stand-in"

    async def complete(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[ToolSpec] = (), deadline: float
    ) -> ModelReply:
        users = [index for index, message in enumerate(messages) if message.role == "user"]
        if not users:
            return ModelReply("")
        newest = messages[users[-1]].text
        answered = messages[users[-1] :]
        results = [message for message in answered if message.role == "tool"]
        if results:
            # The request's call was answered: a stand-in that called again would loop an agent forever.
            called = {call.id: call.name for message in answered for call in message.tool_calls}
            result = results[-1]
            told = called.get(result.tool_call_id or "") in SPOKEN_TOOLS or result.text.startswith("refused")
            return ModelReply(result.text if told else "")
        if not tools:
            request = _review_request(newest)
            if request is not None:
                return await _scripted_review(request, deadline)
        offered = {tool.name for tool in tools}
        call = _intent(newest)
        if call is not None and call.name in offered:
            return ModelReply("", (call,))
        return ModelReply(f"Received: {newest}" if newest else "Received your attachments.")


def _intent(text: str) -> ToolCall | None:
    """The tool call a scripted intent asks for, or None for any other text."""
    match = _INTENT.match(text)
    if match is None:
        return None
    intent = match.group(1)
    if intent == "ask":
        return ToolCall(new_call_id(), "ask_owner", {"question": text[match.end() + 1 :]})
    if intent == "task":
        return ToolCall(new_call_id(), "start_task", {"instructions": text[match.end() + 1 :]})
    if intent == "read":
        attachment_id, _, offset = text[match.end() :].strip().partition(" ")
        at = int(offset) if offset.strip().isdigit() else 0
        return ToolCall(new_call_id(), "read_attachment", {"attachment_id": attachment_id, "offset": at})
    if intent == "remember":
        return ToolCall(new_call_id(), "memory_save", {"text": text[match.end() + 1 :]})
    if intent == "recall":
        return ToolCall(new_call_id(), "memory_query", {"query": text[match.end() + 1 :]})
    if intent in ("correct", "forget"):
        words = _INPUT.fullmatch(text[match.end() :])
        assert words is not None  # the pattern matches any text
        memory_id, rest = words.groups()
        if intent == "forget":
            return ToolCall(new_call_id(), "memory_forget", {"memory_id": memory_id})
        return ToolCall(new_call_id(), "memory_correct", {"memory_id": memory_id, "text": rest})
    first, _, rest = text.partition("\n")
    if intent == "write":
        path = first[match.end() :].strip()
        return ToolCall(new_call_id(), "write_file", {"path": path, "content": rest, "create_dirs": True})
    if intent == "edit":
        lines = rest.split("\n")
        if EDIT_SEPARATOR not in lines:
            return None
        cut = lines.index(EDIT_SEPARATOR)
        arguments = {
            "path": first[match.end() :].strip(),
            "old_string": "\n".join(lines[:cut]),
            "new_string": "\n".join(lines[cut + 1 :]),
            "replace_all": False,
        }
        return ToolCall(new_call_id(), "edit_file", arguments)
    if intent == "input":
        words = _INPUT.fullmatch(text[match.end() :])
        assert words is not None  # the pattern matches any text
        process_id, data = words.groups()
        return ToolCall(new_call_id(), "process_write", {"process_id": process_id, "data": data + "\n"})
    try:
        argv = shlex.split(text[match.end() :])
    except ValueError:
        return None
    if intent == "run":
        arguments = {"argv": argv, "cwd": ".", "env": {}, "timeout_ms": STAND_IN_RUN_TIMEOUT_MS}
        return ToolCall(new_call_id(), "exec_command", arguments)
    return ToolCall(new_call_id(), "process_start", {"argv": argv, "cwd": ".", "env": {}})


def _review_request(text: str) -> str | None:
    """The original user request of a reviewer's prompt (the JSON object `reviewer.py` sends), or None when
    the text is no such prompt."""
    try:
        prompt = json.loads(text)
    except ValueError:
        return None
    if isinstance(prompt, dict) and isinstance(prompt.get("request"), str):
        return str(prompt["request"])
    return None


async def _scripted_review(request: str, deadline: float) -> ModelReply:
    verdict = next(
        (match.group(1) for line in request.split("\n") if (match := _REVIEW_LINE.fullmatch(line))), None
    )
    if verdict == "fail":
        raise ModelUnavailable("the stand-in was scripted to fail (review: fail)")
    if verdict == "slow":
        # Past the deadline by a clear margin: a reviewer that waited would return this late `allow`.
        await asyncio.sleep(max(0.0, deadline - asyncio.get_running_loop().time()) + 1.0)
        verdict = "allow"
    if verdict is None:
        answer = {"verdict": "unsure", "reason": "The stand-in has no judgment: the owner decides."}
    else:
        answer = {"verdict": verdict, "reason": f"The request says review: {verdict}."}
    return ModelReply(json.dumps(answer))


MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""The largest chat-completions response body `OpenAIChatModel` reads."""


class OpenAIChatModel:
    """A model behind any OpenAI-compatible chat-completions endpoint (`POST {base_url}/chat/completions`).

    The API key is read from the environment variable `api_key_env` at each call (sent as a bearer token,
    never stored or logged); without `api_key_env` no key is sent (a local endpoint may need none). Tools are
    offered as function tools; the reply's `tool_calls` become `ToolCall`s. Every failure (the key variable
    unset, the endpoint unreachable, an HTTP error status, a body that is not the expected JSON, the
    deadline) raises ModelUnavailable naming what failed.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None) -> None:
        self.url = f"{base_url.rstrip('/')}/chat/completions"
        self.model = model
        self.name = model
        self.api_key_env = api_key_env

    async def complete(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[ToolSpec] = (), deadline: float
    ) -> ModelReply:
        headers = {"Content-Type": "application/json"}
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ModelUnavailable(f"the API key variable {self.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        body: dict[str, Any] = {"model": self.model, "messages": [_wire_message(m) for m in messages]}
        if tools:
            body["tools"] = [_wire_tool(tool) for tool in tools]
        try:
            async with asyncio.timeout_at(deadline):
                status, raw = await self._post(body, headers)
        except TimeoutError:
            raise ModelUnavailable(f"{self.url} gave no reply before the deadline") from None
        if status != 200:
            raise ModelUnavailable(f"{self.url} answered HTTP {status}: {_error_excerpt(raw)}")
        try:
            reply = json.loads(raw)
        except ValueError:
            raise ModelUnavailable(f"{self.url} answered a body that is not JSON") from None
        return _parse_reply(self.url, reply)

    async def _post(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
        import aiohttp  # only a host configured with an endpoint loads the HTTP client

        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(self.url, data=json.dumps(body), headers=headers) as response,
            ):
                raw = bytearray()
                async for chunk in response.content.iter_any():
                    raw += chunk
                    if len(raw) > MAX_RESPONSE_BYTES:
                        raise ModelUnavailable(f"{self.url} answered more than {MAX_RESPONSE_BYTES} bytes")
                return response.status, bytes(raw)
        except aiohttp.ClientError as error:
            raise ModelUnavailable(f"could not reach {self.url}: {error}") from None


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.role == "tool":
        wire["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        wire["content"] = message.text or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    return wire


def _wire_tool(tool: ToolSpec) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)}
    return {"type": "function", "function": function}


def _error_excerpt(raw: bytes) -> str:
    """The endpoint's own error message when its body has one (`error.message`), else the body's start."""
    try:
        message = json.loads(raw)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = None
    text = message if isinstance(message, str) else raw.decode("utf-8", "replace")
    return text[:200] or "(empty body)"


def _parse_reply(url: str, reply: Any) -> ModelReply:
    def missing(name: str) -> ModelUnavailable:
        return ModelUnavailable(f"{url} answered without a valid {name}")

    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise missing("choices[0]")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise missing("choices[0].message")
    text = message.get("content")
    if text is not None and not isinstance(text, str):
        raise missing("choices[0].message.content")
    wire_calls = message.get("tool_calls") or []
    if not isinstance(wire_calls, list):
        raise missing("choices[0].message.tool_calls")
    calls = []
    for index, wire in enumerate(wire_calls):
        where = f"choices[0].message.tool_calls[{index}]"
        function = wire.get("function") if isinstance(wire, dict) else None
        if not isinstance(function, dict):
            raise missing(f"{where}.function")
        call_id, name, arguments = wire.get("id"), function.get("name"), function.get("arguments")
        if not isinstance(call_id, str) or not call_id:
            raise missing(f"{where}.id")
        if not isinstance(name, str) or not name:
            raise missing(f"{where}.function.name")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise missing(f"{where}.function.arguments (a JSON object in a string)")
        calls.append(ToolCall(call_id, name, parsed))
    return ModelReply(text or "", tuple(calls))


ModelKind = Literal["stand_in", "openai_chat"]
DEFAULT_TIMEOUT = 30.0
"""Seconds a model call may take unless configured."""
MAX_TIMEOUT = 3600.0
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CONFIG_FIELDS = ("kind", "base_url", "model", "api_key_env", "timeout")


class ModelConfigError(ValueError):
    """A model configuration that cannot be used; the message names the field."""


@dataclass(frozen=True)
class ModelConfig:
    """Which model the Personal host uses (`ModelConfiguration`, spec/schema/config/user_configuration.schema.json:
    the object of a `--model-config` file and the configuration's `model`). `stand_in` (the default) needs
    nothing else; `openai_chat` needs `base_url` (http or https, the part before `/chat/completions`) and
    `model`, and reads its key from the environment variable `api_key_env` (none sent when absent). `timeout`
    is the seconds one call may take.
    """

    kind: ModelKind = "stand_in"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ModelConfig:
        """The configuration of a JSON object; ModelConfigError naming the first field that is wrong."""
        if not isinstance(data, Mapping):
            raise ModelConfigError(f"a model configuration is a JSON object, not {type(data).__name__}")
        for name in data:
            if name not in CONFIG_FIELDS:
                raise ModelConfigError(
                    f"{name}: not a model configuration field (known: {', '.join(CONFIG_FIELDS)})"
                )
        kind = data.get("kind", "stand_in")
        if kind not in ("stand_in", "openai_chat"):
            raise ModelConfigError(f"kind: {kind!r} is neither 'stand_in' nor 'openai_chat'")
        timeout = data.get("timeout", DEFAULT_TIMEOUT)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_TIMEOUT
        ):
            raise ModelConfigError(f"timeout: {timeout!r} is not a number of seconds in (0, {MAX_TIMEOUT:g}]")
        if kind == "stand_in":
            for name in ("base_url", "model", "api_key_env"):
                if name in data:
                    raise ModelConfigError(f"{name}: only an 'openai_chat' model has one")
            return cls(timeout=float(timeout))
        base_url = data.get("base_url")
        if not isinstance(base_url, str) or urlsplit(base_url).scheme not in ("http", "https"):
            raise ModelConfigError(f"base_url: {base_url!r} is not an http or https URL")
        if not urlsplit(base_url).hostname:
            raise ModelConfigError(f"base_url: {base_url!r} names no host")
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise ModelConfigError(f"model: {model!r} is not a model name")
        api_key_env = data.get("api_key_env")
        if api_key_env is not None and (
            not isinstance(api_key_env, str) or not _ENV_NAME.fullmatch(api_key_env)
        ):
            raise ModelConfigError(f"api_key_env: {api_key_env!r} is not an environment variable name")
        return cls("openai_chat", base_url, model, api_key_env, float(timeout))

    def adapter(self) -> ModelAdapter:
        """The model this configuration names."""
        if self.kind == "stand_in":
            return StandInModel()
        assert self.base_url is not None and self.model is not None
        return OpenAIChatModel(self.base_url, self.model, self.api_key_env)
