"""The model adapter (host/userhost/personal/model.py).

Covered: the stand-in's scripted intents become exactly the documented tool calls, only for offered tools,
and any other text (or an intent it cannot parse) is answered `Received: <text>`; `OpenAIChatModel` against
a fake chat-completions endpoint on 127.0.0.1 (no real endpoint can run here): the wire it sends (messages,
function tools, the bearer key from the environment), a text reply, tool calls, and every failure raised as
ModelUnavailable naming what failed (an HTTP error status, a body that is not the expected JSON, the
deadline, the key variable unset, an endpoint that is not there), never with the key in it; `ModelConfig`
parsing with errors naming the field.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from typing import Any

import pytest

from tests.helpers import DEADLINE
from tests.host.userhost.personal.chat_endpoint import (
    HANG,
    PATH,
    Answer,
    completion,
    fake_endpoint,
    function_call,
)
from wuu.host.userhost.personal.model import (
    MAX_RESPONSE_BYTES,
    ChatMessage,
    ModelConfig,
    ModelConfigError,
    ModelUnavailable,
    OpenAIChatModel,
    StandInModel,
    ToolCall,
    ToolSpec,
)

ACTION_TOOLS = tuple(
    ToolSpec(name, f"The {name} action.", {"type": "object"})
    for name in ("write_file", "edit_file", "exec_command", "process_start", "process_write")
)
MEMORY_TOOLS = tuple(
    ToolSpec(name, f"The {name} tool.", {"type": "object"})
    for name in ("memory_save", "memory_query", "memory_correct", "memory_forget")
)
MEMORY_ID = "mem_0123456789abcdef0123456789abcdef"
KEY_ENV = "WUU_TEST_CHAT_KEY"
KEY = "sk-test-not-a-real-key-0123456789"


def soon(seconds: float = DEADLINE) -> float:
    return asyncio.get_running_loop().time() + seconds


async def stand_in(
    text: str, tools: tuple[ToolSpec, ...] = ACTION_TOOLS
) -> tuple[str, list[tuple[str, Any]]]:
    """The stand-in's reply to one user message: its text and its calls as (name, arguments)."""
    messages = [ChatMessage("system", "You are the Personal agent."), ChatMessage("user", text)]
    reply = await StandInModel().complete(messages, tools=tools, deadline=soon())
    for call in reply.tool_calls:
        assert re.fullmatch(r"call_[0-9a-f]{24}", call.id)
    return reply.text, [(call.name, call.arguments) for call in reply.tool_calls]


@pytest.mark.parametrize(
    ("text", "call"),
    [
        (
            "/write notes/todo.txt\nbuy milk\nand bread\n",
            (
                "write_file",
                {"path": "notes/todo.txt", "content": "buy milk\nand bread\n", "create_dirs": True},
            ),
        ),
        ("/write empty.txt", ("write_file", {"path": "empty.txt", "content": "", "create_dirs": True})),
        (
            "/edit notes/todo.txt\nbuy milk\n---\nbuy oat milk\nand eggs",
            (
                "edit_file",
                {
                    "path": "notes/todo.txt",
                    "old_string": "buy milk",
                    "new_string": "buy oat milk\nand eggs",
                    "replace_all": False,
                },
            ),
        ),
        (
            "/run grep -n 'two words' \"notes/my file.txt\"",
            (
                "exec_command",
                {
                    "argv": ["grep", "-n", "two words", "notes/my file.txt"],
                    "cwd": ".",
                    "env": {},
                    "timeout_ms": 60000,
                },
            ),
        ),
        # No shell: operators and variables are words like any other.
        (
            "/run echo $HOME && rm -rf x",
            (
                "exec_command",
                {
                    "argv": ["echo", "$HOME", "&&", "rm", "-rf", "x"],
                    "cwd": ".",
                    "env": {},
                    "timeout_ms": 60000,
                },
            ),
        ),
        ("/start python3 -i", ("process_start", {"argv": ["python3", "-i"], "cwd": ".", "env": {}})),
        ("/input proc_7 print(1 + 1)", ("process_write", {"process_id": "proc_7", "data": "print(1 + 1)\n"})),
        ("/input proc_7", ("process_write", {"process_id": "proc_7", "data": "\n"})),
        # What the host must refuse is passed as written, for the host to refuse.
        ("/run", ("exec_command", {"argv": [], "cwd": ".", "env": {}, "timeout_ms": 60000})),
        (
            "/write ../outside.txt\nx",
            ("write_file", {"path": "../outside.txt", "content": "x", "create_dirs": True}),
        ),
    ],
)
async def test_the_stand_ins_intents_are_exact_tool_calls(text: str, call: tuple[str, Any]) -> None:
    assert await stand_in(text) == ("", [call])


@pytest.mark.parametrize(
    ("text", "call"),
    [
        ("/remember My sister is Ana.", ("memory_save", {"text": "My sister is Ana."})),
        ("/remember Two lines:\nkept whole", ("memory_save", {"text": "Two lines:\nkept whole"})),
        ("/recall sister", ("memory_query", {"query": "sister"})),
        ("/recall", ("memory_query", {"query": ""})),
        (
            f"/correct {MEMORY_ID} My sister is Anna.",
            ("memory_correct", {"memory_id": MEMORY_ID, "text": "My sister is Anna."}),
        ),
        (f"/forget {MEMORY_ID}", ("memory_forget", {"memory_id": MEMORY_ID})),
        # What the Memory service must refuse is passed as written, for it to refuse.
        ("/forget", ("memory_forget", {"memory_id": ""})),
        ("/remember", ("memory_save", {"text": ""})),
    ],
)
async def test_the_stand_ins_memory_intents_are_exact_tool_calls(text: str, call: tuple[str, Any]) -> None:
    assert await stand_in(text, MEMORY_TOOLS) == ("", [call])
    assert await stand_in(text) == (f"Received: {text}", [])  # only when the memory tools are offered


async def test_after_a_memory_tool_the_stand_in_says_its_result() -> None:
    call = ToolCall("call_1", "memory_query", {"query": "sister"})
    told = f"{MEMORY_ID} v2: My sister is Anna. (corrected by main agent, message 7)"
    messages = [
        ChatMessage("user", "/recall sister"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", told, tool_call_id="call_1"),
    ]
    reply = await StandInModel().complete(messages, tools=MEMORY_TOOLS, deadline=soon())
    assert (reply.text, reply.tool_calls) == (told, ())


@pytest.mark.parametrize(
    "text",
    [
        "hello there",
        "/writer notes.txt\nnot an intent",
        "please /run ls",
        "/edit notes/todo.txt\nold text without a separator",
        "/run echo 'unclosed",
    ],
)
async def test_other_text_is_received_as_text(text: str) -> None:
    assert await stand_in(text) == (f"Received: {text}", [])


async def test_the_stand_in_calls_only_offered_tools() -> None:
    write_only = tuple(tool for tool in ACTION_TOOLS if tool.name == "write_file")
    assert await stand_in("/run ls", write_only) == ("Received: /run ls", [])
    assert await stand_in("/write a.txt\nx", ()) == ("Received: /write a.txt\nx", [])
    assert await stand_in("/write a.txt\nx", write_only) == (
        "",
        [("write_file", {"path": "a.txt", "content": "x", "create_dirs": True})],
    )


async def test_the_stand_in_answers_the_newest_user_message() -> None:
    messages = [
        ChatMessage("user", "/run rm -rf notes"),
        ChatMessage("assistant", "Received: /run rm -rf notes"),
        ChatMessage("user", "thanks"),
        ChatMessage("assistant", "You're welcome."),
    ]
    reply = await StandInModel().complete(messages, tools=ACTION_TOOLS, deadline=soon())
    assert (reply.text, reply.tool_calls) == ("Received: thanks", ())
    assert (await stand_in("")) == ("Received your attachments.", [])


async def test_the_stand_in_calls_once_per_request() -> None:
    call = ToolCall("call_1", "write_file", {"path": "a.txt", "content": "x", "create_dirs": True})
    messages = [
        ChatMessage("user", "/write a.txt\nx"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", "Created a.txt (1 byte).", tool_call_id="call_1"),
    ]
    reply = await StandInModel().complete(messages, tools=ACTION_TOOLS, deadline=soon())
    assert (reply.text, reply.tool_calls) == ("", ())
    refused = [
        *messages[:2],
        ChatMessage("tool", "refused (symlink): 'a.txt' is a symbolic link", tool_call_id="call_1"),
    ]
    reply = await StandInModel().complete(refused, tools=ACTION_TOOLS, deadline=soon())
    assert (reply.text, reply.tool_calls) == ("refused (symlink): 'a.txt' is a symbolic link", ())


async def test_a_stand_in_scripted_to_fail_raises() -> None:
    prompt = json.dumps({"request": "do it\nreview: fail", "action": {}, "summary": ""})
    with pytest.raises(ModelUnavailable, match="scripted to fail"):
        await StandInModel().complete([ChatMessage("user", prompt)], deadline=soon())


def chat_model(base_url: str, key_env: str | None = KEY_ENV) -> OpenAIChatModel:
    return OpenAIChatModel(base_url, "fake-model", key_env)


async def test_a_text_reply_and_the_wire_it_was_asked_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with fake_endpoint() as endpoint:
        endpoint.answer(completion("Hello, owner."))
        messages = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")]
        reply = await chat_model(endpoint.base_url + "/").complete(messages, deadline=soon())
    assert (reply.text, reply.tool_calls) == ("Hello, owner.", ())
    [sent] = endpoint.received
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert sent.body == {
        "model": "fake-model",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    }


async def test_tool_calls_round_trip_as_function_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    write = ToolSpec(
        "write_file",
        "Write a file in the Personal files root.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    earlier = ToolCall("call_1", "write_file", {"path": "a.txt"})
    messages = [
        ChatMessage("user", "write a.txt, then b.txt"),
        ChatMessage("assistant", "", tool_calls=(earlier,)),
        ChatMessage("tool", "created a.txt", tool_call_id="call_1"),
    ]
    async with fake_endpoint() as endpoint:
        endpoint.answer(
            completion(None, [function_call("call_2", "write_file", '{"path": "b.txt", "content": "x"}')])
        )
        reply = await chat_model(endpoint.base_url).complete(messages, tools=[write], deadline=soon())
    assert reply == type(reply)("", (ToolCall("call_2", "write_file", {"path": "b.txt", "content": "x"}),))
    [sent] = endpoint.received
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "write_file",
                "description": "Write a file in the Personal files root.",
                "parameters": write.parameters,
            },
        }
    ]
    assert sent.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [function_call("call_1", "write_file", '{"path": "a.txt"}')],
        },
        {"role": "tool", "content": "created a.txt", "tool_call_id": "call_1"},
    ]


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (
            Answer(500, b'{"error": {"message": "the model is overloaded"}}'),
            "HTTP 500: the model is overloaded",
        ),
        (Answer(502, b"<html>Bad Gateway</html>"), "HTTP 502: <html>Bad Gateway</html>"),
        (Answer(200, b"this is not json"), "not JSON"),
        (Answer(200, b'{"choices": []}'), "choices[0]"),
        (Answer(200, b'{"choices": [{"index": 0}]}'), "choices[0].message"),
        (Answer(200, b'{"choices": [{"message": {"content": 7}}]}'), "choices[0].message.content"),
        (
            completion(None, [function_call("call_1", "write_file", "{not json")]),
            "choices[0].message.tool_calls[0].function.arguments",
        ),
        (
            completion(None, [function_call("call_1", "write_file", "[1, 2]")]),
            "choices[0].message.tool_calls[0].function.arguments",
        ),
        (completion(None, [function_call("", "write_file", "{}")]), "choices[0].message.tool_calls[0].id"),
        (
            completion(None, [{"id": "call_1", "type": "function"}]),
            "choices[0].message.tool_calls[0].function",
        ),
        (Answer(200, b"{" + b" " * MAX_RESPONSE_BYTES + b"}"), f"more than {MAX_RESPONSE_BYTES} bytes"),
    ],
)
async def test_a_failed_or_malformed_answer_is_unavailable_naming_what_failed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, answer: Answer, named: str
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    caplog.set_level(logging.DEBUG)
    async with fake_endpoint() as endpoint:
        endpoint.answer(answer)
        with pytest.raises(ModelUnavailable) as raised:
            await chat_model(endpoint.base_url).complete([ChatMessage("user", "Hi")], deadline=soon())
    assert named in str(raised.value)
    assert KEY not in str(raised.value) and KEY not in caplog.text


async def test_the_deadline_ends_a_call_the_endpoint_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    async with fake_endpoint() as endpoint:
        endpoint.answer(HANG)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ModelUnavailable, match="no reply before the deadline"):
            await chat_model(endpoint.base_url).complete([ChatMessage("user", "Hi")], deadline=soon(0.3))
        assert 0.3 <= loop.time() - started < DEADLINE / 2
        assert len(endpoint.received) == 1


async def test_an_unset_key_variable_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    async with fake_endpoint() as endpoint:
        endpoint.answer(completion("unused"))
        with pytest.raises(ModelUnavailable, match=f"the API key variable {KEY_ENV} is not set"):
            await chat_model(endpoint.base_url).complete([ChatMessage("user", "Hi")], deadline=soon())
        # Without a key variable configured, no key is sent at all.
        reply = await chat_model(endpoint.base_url, None).complete(
            [ChatMessage("user", "Hi")], deadline=soon()
        )
    assert reply.text == "unused"
    [sent] = endpoint.received
    assert "Authorization" not in sent.headers


async def test_an_endpoint_that_is_not_there_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{unused.getsockname()[1]}/v1"
        with pytest.raises(ModelUnavailable, match=f"could not reach {re.escape(base_url + PATH[3:])}"):
            await chat_model(base_url).complete([ChatMessage("user", "Hi")], deadline=soon())


def test_model_config_defaults_to_the_stand_in() -> None:
    assert ModelConfig.parse({}) == ModelConfig("stand_in", timeout=30.0)
    assert isinstance(ModelConfig.parse({"kind": "stand_in", "timeout": 5}).adapter(), StandInModel)


def test_model_config_of_a_chat_endpoint() -> None:
    config = ModelConfig.parse(
        {
            "kind": "openai_chat",
            "base_url": "https://llm.example/v1",
            "model": "m-1",
            "api_key_env": "LLM_KEY",
        }
    )
    assert config == ModelConfig("openai_chat", "https://llm.example/v1", "m-1", "LLM_KEY", 30.0)
    adapter = config.adapter()
    assert isinstance(adapter, OpenAIChatModel)
    assert (adapter.url, adapter.model, adapter.api_key_env) == (
        "https://llm.example/v1/chat/completions",
        "m-1",
        "LLM_KEY",
    )


CHAT = {"kind": "openai_chat", "base_url": "http://127.0.0.1:8080/v1", "model": "m"}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"kind": "gpt"}, "kind"),
        ({"modle": "m"}, "modle"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"timeout": "30"}, "timeout"),
        ({"timeout": 3601}, "timeout"),
        ({"model": "m"}, "model"),
        ({**CHAT, "base_url": "ftp://llm.example/v1"}, "base_url"),
        ({**CHAT, "base_url": "http:///v1"}, "base_url"),
        ({**CHAT, "base_url": None}, "base_url"),
        ({**CHAT, "model": ""}, "model"),
        ({**CHAT, "api_key_env": "LLM KEY"}, "api_key_env"),
        ({**CHAT, "api_key_env": 7}, "api_key_env"),
    ],
)
def test_model_config_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelConfigError, match=f"^{field}: "):
        ModelConfig.parse(data)


async def test_the_stand_in_starts_a_task_and_says_what_became_of_it() -> None:
    task = (ToolSpec("start_task", "Start a background task.", {"type": "object"}),)
    assert await stand_in("/task /write notes/x.txt\nbuy milk", task) == (
        "",
        [("start_task", {"instructions": "/write notes/x.txt\nbuy milk"})],
    )
    assert await stand_in("/task /write notes/x.txt", ACTION_TOOLS) == (
        "Received: /task /write notes/x.txt",
        [],
    )
    call = ToolCall("call_1", "start_task", {"instructions": "/run true"})
    for told in (
        "started task task_1 under grant grant_1 (until 2026-03-01T13:00:00Z)",
        "refused (authorization_refused): no",
    ):
        messages = [
            ChatMessage("user", "/task /run true"),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", told, tool_call_id="call_1"),
        ]
        reply = await StandInModel().complete(messages, tools=task, deadline=soon())
        assert (reply.text, reply.tool_calls) == (told, ())


async def test_the_stand_in_reads_an_attachment() -> None:
    reading = (ToolSpec("read_attachment", "Read an attachment.", {"type": "object"}),)
    assert await stand_in("/read att_1", reading) == (
        "",
        [("read_attachment", {"attachment_id": "att_1", "offset": 0})],
    )
    assert await stand_in("/read att_1 4096", reading) == (
        "",
        [("read_attachment", {"attachment_id": "att_1", "offset": 4096})],
    )
