"""The `session.domain` provider interface: the durable state behind the Personal plugin.

The Personal plugin (`plugin.py`) checks what clients send and maps it onto these calls; a provider keeps the
state and enforces the rules that need it (receipt idempotence, reaction revisions, ownership), refusing a
call with one of the plain exceptions of `refusals.py`. The bundled provider is SQLite (`sqlite/store.py`); a
replacement provider implements the same protocol and is selected in the composition (`composition.py`).
Every write a provider acknowledges is durable when its call returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, Protocol

from wuu.generated.models import (
    AttachmentMetadata,
    AttentionSettings,
    HistoryMessage,
    InputReceipt,
    MessageReactionSnapshot,
    PushProvider,
    PushRegisterResult,
    ReactionActor,
    ReactionRequestReceipt,
    ReactionState,
    TaskDeliveryKind,
    TaskDeliveryReceipt,
    UserQuestionStatus,
)

from ..services import Caller
from .approval_ledger import ApprovalLedger
from .authorization import AuthorizationProvider
from .dispatch_ledger import DispatchLedger
from .memory_ledger import MemoryLedger


@dataclass(frozen=True)
class StagedAttachment:
    """An attachment whose bytes are already durable in the space's files folder, awaiting admission."""

    attachment_id: str
    filename: str
    media_type: str
    size: int
    sha256: str
    path: Path


@dataclass(frozen=True)
class Submission:
    """One user input to admit, as the host bound it."""

    session_id: str
    plugin_id: str
    client_input_id: str
    request_id: str
    text: str
    text_sha256: str
    attachments: Sequence[StagedAttachment]
    binding_digest: str
    """The digest of everything admission binds (plugin, session, literal text, request ID, the ordered
    filenames, media types and digests): a retry must match it exactly."""
    admitted_by: Caller | None = None
    """The client transport that admitted the input, when a client did: the authority a background task it
    starts asks its grant with (spec/schema/userhost/tasks.schema.json)."""


@dataclass(frozen=True)
class Admission:
    """The outcome of admitting a submission."""

    receipt: InputReceipt
    replayed: bool
    """True when the request ID already had this receipt; nothing new was admitted."""


class ContextMessage(NamedTuple):
    """One visible message as the host offers it to the agent's model context. A named tuple: a step's
    window makes a hundred of them on every pass, and a tuple is made in a third of a frozen dataclass's
    time."""

    message_seq: int
    role: str
    text: str
    client_input_id: str | None
    """For a user input with a receipt: its client input ID (what `read_at` is recorded against)."""


@dataclass(frozen=True)
class ReactionChange:
    """One recently changed reaction target, as the agent's next step sees it: current state, not history."""

    message_seq: int
    owner: str | None
    """The owner's current emoji, or None when the owner removed it."""
    excerpt: str
    """The start of the message's text."""


@dataclass(frozen=True)
class StepWindow:
    """What one step of the main agent is offered, read from one snapshot of the store."""

    pending: list[ContextMessage]
    """The oldest admitted inputs no model context has included yet, oldest first (never empty)."""
    recent: list[ContextMessage]
    """The newest visible messages, oldest first."""
    reactions: list[ReactionChange]
    """The owner's reaction changes not yet shown to the agent, coalesced per message, newest first."""
    reactions_mark: int
    """The locator mark to pass to `reaction_changes_seen` once a step has shown `reactions`."""


@dataclass(frozen=True)
class ReactionWrite:
    """The outcome of a reaction write."""

    state: ReactionState
    receipt: ReactionRequestReceipt
    replayed: bool


@dataclass(frozen=True)
class StoredAttachment:
    """An attachment record of a session, and where its bytes are."""

    metadata: AttachmentMetadata
    path: Path


class TaskStateError(Exception):
    """A task or delivery transition the stored state refuses; `reason` names the rule."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message

    def __reduce__(self) -> tuple[type[TaskStateError], tuple[str, str]]:
        # Raised in the store's writer process and sent back to the host as a pickle.
        return TaskStateError, (self.reason, self.message)


@dataclass(frozen=True)
class Decision:
    """The owner's saved decision on one of a task's questions."""

    question_id: str
    status: UserQuestionStatus
    answer: str | None
    decided_at: str


@dataclass(frozen=True)
class TaskRecord:
    """A hidden task execution as stored."""

    task_id: str
    parent_id: str | None
    session_id: str
    """The task's own hidden session, never the main conversation."""
    request_id: str
    requirements_version: int
    execution_attempt: int
    status: str
    """`running`, `waiting_user`, `completed` or `failed`."""
    cancel_requested: bool
    outcome: str | None
    """The saved result or failure text once the task ended."""
    revision: int
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class StopOutcome:
    """What a task stop persisted."""

    tasks: tuple[str, ...]
    """The stopped task and its descendants."""
    cancelled: tuple[str, ...]
    """Deliveries that were pending: now failed with `cancelled`."""
    pending_cancellation: tuple[str, ...]
    """Deliveries in flight (submitted, outcome unknown): marked for cancellation, not yet stopped."""


@dataclass(frozen=True)
class QuestionDecision:
    """A saved decision as `user_question/answer|dismiss` returns it."""

    question_id: str
    task_id: str
    status: UserQuestionStatus
    decided_at: str
    replayed: bool


@dataclass(frozen=True)
class PushTarget:
    """A saved push registration as the phone provider needs it: with its push token, which is never returned
    to a client nor logged."""

    registration_id: str
    device_id: str
    provider: PushProvider
    app_id: str
    token: str = field(repr=False)


class TaskLedger(Protocol):
    """The durable tasks of one space: hidden task executions, the delivery receipts of their replies, the
    owner's decisions on questions and push registrations. Every call is one durable transition, checked
    against the stored state in the same step (the bundled one: `sqlite.ledger.SqliteTaskLedger`)."""

    async def create(self, request_id: str, parent_id: str | None, now: datetime) -> TaskRecord:
        """A new hidden task for the dispatch `request_id`, or the one it already has."""

    async def task(self, task_id: str) -> TaskRecord | None:
        """The task as stored."""

    async def ask(self, task_id: str, text: str, now: datetime) -> tuple[str, str]:
        """The task waits for the owner: (question ID, its delivery ID)."""

    async def finish(self, task_id: str, kind: TaskDeliveryKind, text: str, now: datetime) -> str:
        """Save the task's result or failure and queue its reply; the delivery ID."""

    async def resume(self, task_id: str, now: datetime) -> TaskRecord:
        """A new requirements version and execution attempt."""

    async def stop(self, task_id: str, now: datetime) -> StopOutcome:
        """Cancellation intent for the task, its descendants and their undelivered replies."""

    async def delivery(self, delivery_id: str) -> TaskDeliveryReceipt | None:
        """One delivery receipt."""

    async def deliveries(self, task_id: str) -> list[TaskDeliveryReceipt]:
        """The task's delivery receipts, oldest first."""

    async def pending(self) -> list[str]:
        """The pending deliveries, oldest first."""

    async def submit(self, delivery_id: str, now: datetime) -> tuple[TaskDeliveryReceipt, str] | None:
        """pending → submitted under a fresh turn ID: the receipt and the reply's text."""

    async def settle(
        self, delivery_id: str, turn_id: str, text: str | None, now: datetime
    ) -> TaskDeliveryReceipt:
        """End the reply turn: delivered with `text`, failed without."""

    async def retry(self, delivery_id: str, now: datetime) -> TaskDeliveryReceipt:
        """An explicit delivery retry, after checking the original receipt."""

    async def stop_reply(self, turn_id: str, now: datetime) -> TaskDeliveryReceipt:
        """Stop exactly this reply turn if it is in flight."""

    async def decide(
        self, question_id: str, status: UserQuestionStatus, answer: str | None, request_id: str, now: datetime
    ) -> QuestionDecision:
        """Save the owner's decision, idempotent by `request_id`. QuestionNotFound, RequestIdConflict or
        QuestionAlreadyDecided."""

    async def register_push(
        self, device_id: str, provider: PushProvider, app_id: str, token: str, now: datetime
    ) -> PushRegisterResult:
        """Save a device's push registration for an app."""

    async def unregister_push(self, device_id: str, registration_id: str) -> bool:
        """Remove a device's push registration; whether it existed."""

    async def push_registrations(self) -> list[PushTarget]:
        """Every saved push registration, oldest first."""


class SessionDomain(Protocol):
    """The durable sessions, history, receipts, attachments and reactions of one user space and domain.

    The calls about one session raise MainSessionMissing when the session is the main conversation and it is
    gone (it is never recreated), SessionNotFound for another missing session."""

    main_session_id: str
    """The ID the space recorded for its main conversation when it was created."""

    async def main_session(self) -> str:
        """The main conversation's session ID, checked to exist (MainSessionMissing otherwise)."""

    async def owns(self, session_id: str) -> bool:
        """Whether the session exists in this space and domain (the space's owner owns every session)."""

    def admit(self, submission: Submission, now: datetime) -> Awaitable[Admission]:
        """Admit the input into its session's history with a durable receipt, or return the receipt its
        request ID already has. RequestIdConflict when the ID bound another input, ClientInputIdTaken when
        the client input ID names another input of the session. The write is under way once this returns:
        a future (or a coroutine) that ends when it is durable, the path of every send."""

    async def admitted_by(self, session_id: str, client_input_id: str) -> Caller | None:
        """The client transport that admitted an input of the session, when one did and it was recorded."""

    async def receipt(self, request_id: str) -> InputReceipt | None:
        """The receipt of a business request ID, if any."""

    async def receipts(self, session_id: str, client_input_ids: Sequence[str]) -> list[InputReceipt]:
        """The session's receipts of these client input IDs, in their order; IDs without one are left out."""

    async def append_assistant(self, session_id: str, text: str, now: datetime, kind: str = "text") -> int:
        """Save one assistant message; its history sequence. `kind` `text` is a visible message;
        `reasoning` and `tool` are hidden reasoning and execution-tool records, never projected to clients."""

    async def step_window(
        self, session_id: str, waiting: int, recent: int, reactions: int
    ) -> StepWindow | None:
        """What one agent step in the session is offered, from one snapshot: at most `waiting` pending inputs,
        `recent` recent messages and `reactions` reaction changes; None when no input waits."""

    async def context(self, session_id: str, limit: int) -> list[ContextMessage]:
        """The newest `limit` visible messages, oldest first, for an agent's model context."""

    async def record_read(
        self, session_id: str, included: Sequence[tuple[str, int]], now: datetime
    ) -> list[str]:
        """Set `read_at` on the receipts whose exact (client input ID, history sequence) pairs are given and
        that have none yet; the client input IDs it set."""

    async def history(self, session_id: str, before_seq: int | None, limit: int) -> list[HistoryMessage]:
        """Up to `limit` visible messages older than `before_seq`, newest first."""

    async def search(
        self,
        session_id: str,
        query: str,
        time_min_us: int | None,
        time_max_us: int | None,
        before_seq: int | None,
        limit: int,
    ) -> list[HistoryMessage]:
        """Up to `limit` visible messages containing `query` (case-insensitively) older than `before_seq`,
        newest first; with a time bound, only messages with a known timestamp inside the bounds."""

    async def known_attachments(self, attachment_ids: Sequence[str]) -> set[str]:
        """Those of these attachment IDs that a receipt names."""

    async def input_attachment(
        self, session_id: str, client_input_id: str, attachment_id: str
    ) -> StoredAttachment | None:
        """An attachment of one input of the session, or None."""

    async def attachment(self, session_id: str, attachment_id: str) -> StoredAttachment | None:
        """The session's attachment record, or None when the session has no such attachment."""

    async def react(
        self,
        actor: ReactionActor,
        session_id: str,
        message_seq: int,
        emoji: str | None,
        expected_revision: int | None,
        request_id: str,
        now: datetime,
    ) -> ReactionWrite:
        """Set or clear the actor's reaction, revision-checked unless `expected_revision` is None (the agent
        writes on the current revision). NotReactionTarget, StaleRevision or RequestIdConflict."""

    async def reactions(self, session_id: str, message_seqs: Sequence[int]) -> list[MessageReactionSnapshot]:
        """The current reactions of the session's saved messages among these, in their order."""

    async def reaction_changes_seen(self, session_id: str, mark: int) -> None:
        """The agent has seen the changes up to `mark`: the next snapshot supersedes them."""

    async def attention_settings(self) -> AttentionSettings:
        """The owner's attention settings (a new space's defaults until they are set)."""

    async def save_attention_settings(self, settings: AttentionSettings, now: datetime) -> AttentionSettings:
        """Replace the owner's attention settings, durably; the settings as saved."""

    def task_ledger(self) -> TaskLedger:
        """The space's durable tasks, deliveries, questions and push registrations."""

    def approval_ledger(self) -> ApprovalLedger:
        """The space's approval cards, rules and automatic-review setting."""

    def dispatch_ledger(self) -> DispatchLedger:
        """The space's dispatched background tasks and the records of their runs."""

    def native_authorization(self) -> AuthorizationProvider:
        """The bundled native `execution.authorization@1` provider, on this store."""

    def memory_ledger(self) -> MemoryLedger:
        """The space's memories (the Personal Memory service)."""

    async def close(self) -> None:
        """Finish pending writes and release the store."""
