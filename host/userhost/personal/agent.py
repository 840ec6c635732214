"""The main agent of the Personal conversation, behind an interface: the host runs its steps, assembles the
model context of each (which is where input receipts get `read_at`) and saves what it says.

An `Agent` is given an `AgentStep`: the inputs that wait for it (the oldest first, every one of them over
consecutive steps), the recent history with those inputs, and the owner's reaction changes since its last
step. It calls `assemble` with the messages it puts before its model; the host
records `read_at` for exactly the admitted inputs among them whose client input ID and history sequence are
those of their receipts, and gives back the `ModelContext` a model adapter would receive. Then it saves
replies (`reply`) and reacts to user messages (`react`: the `react_to_message` of
spec/schema/receipts/reactions.schema.json). Nothing a client, a plugin response or a receipt field says
can set `read_at` (spec/schema/receipts/input.schema.json): only `assemble` does.

The bundled agent is `model_agent.ModelAgent` on a model adapter (by default the deterministic
`StandInModel`); any other agent plugs in through the same interface.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from wuu.generated.catalog import USERHOST_MAX_REACTION_FEEDBACK_MESSAGES
from wuu.generated.models import ReactionActor, ReactionState

from ..services import Caller
from .attachment_reads import READ_ATTACHMENT, AgentAttachments, read_attachment
from .memory import MEMORY_TOOLS
from .memory_ledger import Attribution
from .provider import ContextMessage, ReactionChange, SessionDomain, StepWindow
from .refusals import MainSessionMissing
from .serial import SerialWork
from .wire_errors import refusals_as_wire_errors

log = logging.getLogger("wuu.host.userhost.personal")

Remember = Callable[[str, Mapping[str, Any], Attribution], Awaitable[str]]
"""Runs one memory tool call for an attributed agent (`MemoryService.call`); what the model is told."""

CONTEXT_MESSAGES = 50
"""The most recent history messages a step is offered besides the waiting inputs."""
WAITING_INPUTS = 50
"""The most waiting inputs one step is offered, oldest first: when more wait, the next steps offer the rest,
so every admitted input reaches a context however many arrive at once."""
STEP_GATHER_S = 0.005
"""How long a step that admitted inputs woke waits before it reads its window: the inputs of a burst share one
step instead of each taking one (and each reading a window of a hundred messages beside the admissions)."""
STEP_GATHER_MAX_S = 0.1
"""The longest gather: after each step that leaves its inputs waiting the gather doubles, up to this, so an
agent that declines what waits is not offered the same window at every wake of a burst; a step that reads
inputs, or finds none waiting, sets it back to `STEP_GATHER_S`."""


@dataclass(frozen=True)
class ModelContext:
    """What a step puts before the model: messages in history order and the owner's reaction changes."""

    messages: tuple[ContextMessage, ...]
    reactions: tuple[ReactionChange, ...]


class AgentStep:
    """One step of the main agent, made by the host."""

    def __init__(
        self,
        store: SessionDomain,
        session_id: str,
        clock: Callable[[], datetime],
        pending: Sequence[ContextMessage],
        history: Sequence[ContextMessage],
        reactions: Sequence[ReactionChange],
        reactions_mark: int,
        reacted: Callable[[str, int], None],
        ask: Callable[[str, str], Awaitable[str]],
        act: Callable[[str, str, Mapping[str, Any], str], Awaitable[str]],
        remember: Remember,
        start: StartTask | None = None,
    ) -> None:
        self.session_id = session_id
        self.pending = tuple(pending)
        """The admitted inputs no model context has included yet, oldest first (at most `WAITING_INPUTS`:
        the next step offers the rest)."""
        self.history = tuple(history)
        """The recent visible messages and every pending input, oldest first."""
        self.reactions = tuple(reactions)
        """The owner's reaction changes since the last step that showed them, newest first: current state
        only, at most 24. They are expression, not instructions or consent."""
        self._store = store
        self._clock = clock
        self._reactions_mark = reactions_mark
        self._reacted = reacted
        self._ask = ask
        self._act = act
        self._remember = remember
        self._start = start
        self.replies: list[int] = []
        self.read_inputs: list[str] = []
        """The client input IDs whose receipts this step recorded `read_at` on."""

    async def assemble(self, messages: Sequence[ContextMessage]) -> ModelContext:
        """Assemble the model context from these messages (and this step's reaction changes): the host
        records `read_at` for every admitted input among them, matched by its exact client input ID and
        history sequence."""
        included = [
            (message.client_input_id, message.message_seq)
            for message in messages
            if message.role == "user" and message.client_input_id is not None
        ]
        if included:
            self.read_inputs += await self._store.record_read(self.session_id, included, self._clock())
        if self.reactions:
            await self._store.reaction_changes_seen(self.session_id, self._reactions_mark)
        return ModelContext(tuple(messages), self.reactions)

    async def reply(self, text: str) -> int:
        """Save one assistant message of the main conversation; its history sequence."""
        seq = await self._store.append_assistant(self.session_id, text, self._clock())
        self.replies.append(seq)
        return seq

    async def ask(self, text: str, request_id: str) -> str:
        """Ask the owner a question through a hidden task of its own (the task of dispatch `request_id`): the
        question reaches the main conversation by its own durable delivery, and the owner's decision
        updates that task. The question ID."""
        return await self._ask(text, request_id)

    async def tool(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> str:
        """Make one tool call of the agent's model; what the model is told of it. `ask_owner` asks the owner a
        question; the action tools (`write_file`, `edit_file`, `exec_command`, `process_start`,
        `process_write`) become approval cards of the host (spec/schema/userhost/approvals.schema.json), bound
        to the input this step answers as the original user request. A call ID names one call: a retry of the
        same call gets the card it already has. The memory tools (`memory_save`, `memory_query`,
        `memory_correct`, `memory_forget`) go to the Personal Memory service, each write attributed to the main
        agent answering the newest input of this step; `start_task` starts a background task under a grant
        (spec/schema/userhost/tasks.schema.json); `read_attachment` reads an attachment of the main
        conversation."""
        if name in MEMORY_TOOLS:
            answering = self.pending[-1].message_seq if self.pending else None
            return await self._remember(name, arguments, Attribution.main_agent(self.session_id, answering))
        if name == ASK_OWNER:
            question = arguments.get("question")
            if not isinstance(question, str) or not question:
                return "refused (invalid_action): ask_owner needs a non-empty question"
            # The task's dispatch ID derives from the input and the question (within the 128 characters of
            # an ID): a repeated step asks once.
            answered = self.pending[-1].client_input_id if self.pending else call_id
            request_id = "ask-" + hashlib.sha256(f"{answered}\n{question}".encode()).hexdigest()[:32]
            return f"asked the owner: question {await self.ask(question, request_id)}"
        if name == START_TASK:
            return await self._start_task(call_id, arguments)
        if name == READ_ATTACHMENT:
            return await read_attachment(AgentAttachments(self._store), arguments)
        request = self.pending[-1].text if self.pending else ""
        return await self._act(call_id, name, arguments, request)

    async def _start_task(self, call_id: str, arguments: Mapping[str, Any]) -> str:
        """Start a background task with the admission authority of the input this step answers
        (spec/schema/userhost/tasks.schema.json)."""
        if self._start is None:
            return "refused (authorization_unavailable): this host runs no background tasks"
        answered = self.pending[-1].client_input_id if self.pending else None
        admitted_by = None
        if answered is not None:
            admitted_by = await self._store.admitted_by(self.session_id, answered)
        return await self._start(call_id, arguments, admitted_by, answered)

    async def record(self, kind: str, text: str) -> int:
        """Save a hidden record of the step (`reasoning`, or a `tool` call's record): part of the session's
        history, never of what clients read or search. Its history sequence."""
        if kind not in ("reasoning", "tool"):
            raise ValueError(f"kind: {kind!r} is neither reasoning nor tool")
        return await self._store.append_assistant(self.session_id, text, self._clock(), kind)

    async def react(self, message_seq: int, emoji: str | None) -> ReactionState:
        """React to a saved user message as the main assistant (`react_to_message`), or clear the reaction
        with None. UserHostError `not_reaction_target` for any other message."""
        with refusals_as_wire_errors():
            written = await self._store.react(
                ReactionActor.AGENT,
                self.session_id,
                message_seq,
                emoji,
                None,
                f"agent-{secrets.token_hex(12)}",
                self._clock(),
            )
        self._reacted(self.session_id, message_seq)
        return written.state


ASK_OWNER = "ask_owner"
"""The tool that asks the owner a waiting-user question through a hidden task."""
START_TASK = "start_task"
"""The tool that starts a background task (StartTaskArguments)."""
StartTask = Callable[[str, Mapping[str, Any], Caller | None, str | None], Awaitable[str]]
"""`start(call_id, arguments, admitted_by, origin_input)`: start a background task for a `start_task` call, with
the transport that admitted the input it answers and that input's client input ID; what the model is told."""


class Agent(Protocol):
    """The main agent of the Personal conversation."""

    async def step(self, step: AgentStep) -> None:
        """Take one step: assemble a context, then reply or react (or neither)."""


class MainAgentLoop:
    """Runs the agent's steps as admitted work of the host: woken by each admitted input, it steps while
    inputs wait, one step at a time, a woken step starting `step_gather_s` after its wake. A step that leaves
    its inputs waiting (the agent did not include them) is not repeated until the next wake, so an agent that
    never reads cannot spin, and the gather doubles (`STEP_GATHER_MAX_S`)."""

    def __init__(
        self,
        agent: Agent,
        store: SessionDomain,
        clock: Callable[[], datetime],
        admit: Callable[[Coroutine[Any, Any, None]], None],
        reacted: Callable[[str, int], None],
        ask: Callable[[str, str], Awaitable[str]],
        act: Callable[[str, str, Mapping[str, Any], str], Awaitable[str]],
        remember: Remember,
        start: StartTask | None = None,
    ) -> None:
        """`reacted(session_id, message_seq)` is told of every reaction the agent saves (clients are sent
        the same content-free notice as for the owner's); `ask(text, request_id)` asks the owner;
        `act(call_id, tool, arguments, request)` proposes an action and says what became of it;
        `remember(tool, arguments, attribution)` runs a memory tool; `start` starts a background task
        (without it, none can start)."""
        self._agent = agent
        self._reacted = reacted
        self._ask = ask
        self._act = act
        self._remember = remember
        self._start = start
        self._store = store
        self._clock = clock
        self._work = SerialWork(admit, self._pass, STEP_GATHER_S)

    @property
    def idle(self) -> asyncio.Event:
        """Set while the agent takes no step."""
        return self._work.idle

    @property
    def step_gather_s(self) -> float:
        """How long the next woken step waits before it reads its window (`STEP_GATHER_MAX_S`)."""
        return self._work.gather_s

    def wake(self) -> None:
        """Inputs may be waiting: run steps as admitted work unless a run is already going."""
        self._work.wake()

    async def _pass(self) -> bool:
        """One step if inputs wait; whether to step again (the step read inputs, so what waits changed)."""
        session_id = self._store.main_session_id
        try:
            window = await self._store.step_window(
                session_id, WAITING_INPUTS, CONTEXT_MESSAGES, USERHOST_MAX_REACTION_FEEDBACK_MESSAGES
            )
        except MainSessionMissing as error:
            log.error("the main agent has no conversation to step: %s", error)
            return False
        if window is None:
            self._work.gather_s = STEP_GATHER_S
            return False
        read = await self._step(session_id, window)
        self._work.gather_s = STEP_GATHER_S if read else min(2 * self._work.gather_s, STEP_GATHER_MAX_S)
        return read

    async def _step(self, session_id: str, window: StepWindow) -> bool:
        pending = window.pending
        # The waiting inputs join the recent window wherever they are: under a burst the oldest of them are
        # older than the window, and an input no context includes would never be read.
        # The step answers, attributes and authorizes by its newest pending input, so its context must not show
        # the model a newer input (one past the pending window): that one waits for a later step.
        newest = pending[-1].message_seq
        later = {
            message.message_seq
            for message in window.recent
            if message.role == "user" and message.message_seq > newest
        }
        by_seq = {
            message.message_seq: message
            for message in (*window.recent, *pending)
            if message.message_seq not in later
        }
        history = [by_seq[seq] for seq in sorted(by_seq)]
        step = AgentStep(
            self._store,
            session_id,
            self._clock,
            pending,
            history,
            window.reactions,
            window.reactions_mark,
            self._reacted,
            self._ask,
            self._act,
            self._remember,
            self._start,
        )
        try:
            await self._agent.step(step)
        except Exception:
            log.exception("the main agent's step failed", extra={"session_id": session_id})
        return bool(step.read_inputs)
