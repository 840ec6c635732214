"""The bundled main agent: a model behind the `ModelAdapter` interface, offered the Personal tools.

A step puts the whole offered history before the model; each tool call it makes goes through the step
(`AgentStep.tool`: the host turns actions into approval cards, asks questions and runs the memory tools), and its
result goes back to the model, until the model answers with text alone, which is saved as the step's reply. The
tools' parameters are the spec's action defs (spec/schema/userhost/approvals.schema.json) and memory tool
arguments (spec/schema/userhost/memory.schema.json).
"""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from wuu.generated.validators import bundle

from .agent import ASK_OWNER, START_TASK, ModelContext
from .attachment_reads import READ_ATTACHMENT
from .memory import MEMORY_TOOLS
from .model import ChatMessage, ModelAdapter, ModelUnavailable, ToolSpec
from .provider import ContextMessage

ACTION_TOOLS = {
    "write_file": (
        "WriteFileAction",
        "Replace a file's content in the owner's files (asks the owner first).",
    ),
    "edit_file": (
        "EditFileAction",
        "Replace exact text in a file of the owner's files (asks the owner first).",
    ),
    "exec_command": ("ExecCommandAction", "Run a command to completion in the owner's files (asks first)."),
    "process_start": (
        "ProcessStartAction",
        "Start an interactive process (asks first; its input asks again).",
    ),
    "process_write": ("ProcessWriteAction", "Send input to an interactive process (asks first)."),
}
"""The action tools, their spec defs and what the model is told of each."""
GUIDANCE = (
    "You are the owner's Personal assistant. File changes and commands are actions the owner approves: "
    "calling a tool proposes the action, and its result says whether it waits for approval, runs, or was "
    "refused. Never claim that an action you proposed has happened before its result says so. What you "
    "remember of the owner is in the memory tools; forgetting a memory redacts it but erases no conversation, "
    "file or backup."
)
MAX_ROUNDS = 8
"""The most model calls of one step: a model that keeps calling tools is stopped."""
STEP_DEADLINE_SECONDS = 120.0
"""How long one model call may take."""


@functools.cache
def task_tools() -> tuple[ToolSpec, ...]:
    """The tools a background task's model is offered: the actions, each of them a card of its task, and the
    memory tools of the Personal Memory service it shares with the main agent, and the reading of attachments."""
    defs = bundle()["$defs"]
    specs = []
    for name, (definition, description) in ACTION_TOOLS.items():
        parameters = inline_refs(defs[definition], defs)
        parameters["properties"].pop("tool")
        parameters["required"] = [field for field in parameters.get("required", []) if field != "tool"]
        specs.append(ToolSpec(name, description, parameters))
    for name, (definition, description) in MEMORY_TOOLS.items():
        specs.append(ToolSpec(name, description, inline_refs(defs[definition], defs)))
    reading = (
        "Read one chunk of an attachment the owner gave you (base64 JSON, as host.session.attachment.read)."
    )
    specs.append(ToolSpec(READ_ATTACHMENT, reading, inline_refs(defs["ReadAttachmentArguments"], defs)))
    return tuple(specs)


@functools.cache
def main_tools() -> tuple[ToolSpec, ...]:
    """The tools the main agent's model is offered: a task's, a question to the owner, a background task."""
    defs = bundle()["$defs"]
    specs = list(task_tools())
    question = {
        "type": "object",
        "additionalProperties": False,
        "required": ["question"],
        "properties": {"question": {"type": "string", "minLength": 1, "description": "The question to ask."}},
    }
    specs.append(ToolSpec(ASK_OWNER, "Ask the owner a question and wait for the answer.", question))
    task = inline_refs(defs["StartTaskArguments"], defs)
    specs.append(ToolSpec(START_TASK, "Start a background task that works on its own, under a grant.", task))
    return tuple(specs)


def inline_refs(schema: Any, defs: Mapping[str, Any]) -> Any:
    """`schema` with every local `$ref` replaced by its def, as a tool's self-contained parameters."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return inline_refs(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        return {key: inline_refs(value, defs) for key, value in schema.items() if not key.startswith("x-")}
    if isinstance(schema, list):
        return [inline_refs(item, defs) for item in schema]
    return copy.copy(schema)


class Step(Protocol):
    """What an agent's step offers it: the main agent's `AgentStep`, or a background task's."""

    @property
    def history(self) -> Sequence[ContextMessage]:
        """The messages the step offers the model, oldest first."""

    async def assemble(self, messages: Sequence[ContextMessage]) -> ModelContext: ...

    async def reply(self, text: str) -> int: ...

    async def tool(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> str: ...

    async def record(self, kind: str, text: str) -> int: ...


class ModelAgent:
    """An agent on a model: `ModelAgent(StandInModel())` is the bundled main agent, and with `task_tools()`
    the agent of a background task."""

    def __init__(self, model: ModelAdapter, tools: Sequence[ToolSpec] | None = None) -> None:
        self._model = model
        self._tools = tuple(main_tools() if tools is None else tools)

    async def step(self, step: Step) -> None:
        context = await step.assemble(step.history)
        messages = [ChatMessage("system", GUIDANCE)]
        messages += [
            ChatMessage("user" if message.role == "user" else "assistant", message.text)
            for message in context.messages
        ]
        loop = asyncio.get_running_loop()
        for _ in range(MAX_ROUNDS):
            try:
                reply = await self._model.complete(
                    messages, tools=self._tools, deadline=loop.time() + STEP_DEADLINE_SECONDS
                )
            except ModelUnavailable as error:
                await step.reply(f"I could not reach my model: {error}")
                return
            if not reply.tool_calls:
                if reply.text:
                    await step.reply(reply.text)
                return
            messages.append(ChatMessage("assistant", reply.text, tool_calls=reply.tool_calls))
            for call in reply.tool_calls:
                result = await step.tool(call.id, call.name, call.arguments)
                await step.record("tool", f"{call.name} {call.id}: {result}")
                messages.append(ChatMessage("tool", result, tool_call_id=call.id))
        await step.reply("I stopped: one step made too many tool calls.")
