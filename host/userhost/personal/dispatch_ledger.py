"""What the Personal store keeps of background tasks that execute (spec/schema/userhost/tasks.schema.json): each
dispatched task's instructions, its grant's opaque ID and expiry, and the record of its execution attempt, the
evidence its completion is checked against."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

RunStatus = Literal["queued", "running", "awaiting", "succeeded", "failed", "unknown"]
"""Where a dispatched task's execution attempt stands: `queued` until the runner takes it, `running` while its
agent works, `awaiting` while the cards its agent made are not all settled, then final."""
FINAL_RUNS = frozenset({"succeeded", "failed", "unknown"})


@dataclass(frozen=True)
class NewDispatch:
    """A task to dispatch, with the grant its provider issued for it."""

    task_id: str
    session_id: str
    request_id: str
    instructions: str
    origin_input: str | None
    """The client input ID of the main-conversation input whose answer started the task, when there was one."""
    model: str
    provider: str
    grant_id: str
    grant_expires_at: str


@dataclass(frozen=True)
class TaskState:
    """What a run needs of its task as stored."""

    task_id: str
    session_id: str
    request_id: str
    requirements_version: int
    execution_attempt: int
    status: str
    """`running`, `waiting_user`, `completed` or `failed`."""
    cancel_requested: bool


@dataclass(frozen=True)
class Dispatch:
    """A dispatched task as stored."""

    task: TaskState
    instructions: str
    origin_input: str | None
    model: str
    provider: str
    grant_id: str
    grant_expires_at: str
    execution_attempt: int
    """The attempt the run record is about (the grant's)."""
    run_status: RunStatus
    run_note: str | None
    """The agent's last words at the end of its run, or why the run ended."""


@dataclass(frozen=True)
class CardOutcome:
    """One card a task's agent made, as it stands."""

    card_id: str
    status: str
    summary: str


class DispatchLedger(Protocol):
    """The dispatched tasks of one space's store."""

    async def dispatch(self, new: NewDispatch, now: datetime) -> tuple[Dispatch, bool]:
        """Create the task, its hidden session (the instructions its first user message) and its queued run, in
        one write; the existing dispatch when the request ID is known. (dispatch, whether it existed)."""

    async def dispatched(self, request_id: str) -> Dispatch | None:
        """The dispatch of a request ID, or None."""

    async def dispatch_of(self, task_id: str) -> Dispatch | None:
        """The dispatch of a task, or None."""

    async def active(self) -> list[Dispatch]:
        """The dispatches whose run is not final, oldest first."""

    async def move_run(
        self,
        task_id: str,
        attempt: int,
        allowed: frozenset[str],
        to: RunStatus,
        note: str | None,
        now: datetime,
    ) -> bool:
        """Move the run of `attempt` to `to` if it is in one of the `allowed` statuses; whether it moved."""

    async def cards(self, task_id: str) -> list[CardOutcome]:
        """The cards the task's agent made, oldest first."""

    async def complete(self, task_id: str, attempt: int, text: str, now: datetime) -> str:
        """Save the task's result on the evidence of its run: every card it made succeeded. The run ends
        `succeeded` with the task, and the reply is queued; the delivery ID. TaskStateError
        `no_execution_evidence` when a card did not succeed or is not settled."""

    async def fail(self, task_id: str, attempt: int, run: RunStatus, text: str, now: datetime) -> str | None:
        """End the run as `run` (`failed` or `unknown`) and the task as failed with `text`, its failure reply
        queued; the delivery ID, or None when the task was stopped (its replies are cancelled)."""

    async def redispatch(
        self, task_id: str, version: int, grant_id: str, expires_at: str, now: datetime
    ) -> Dispatch:
        """An explicit resume of a dispatched task at requirements version `version`: its next requirements
        version and execution attempt under the new grant, the run queued. TaskStateError `not_found`, or
        `stale_revision` when another resume came first."""

    async def recover(self, now: datetime) -> list[str]:
        """After a restart: a run left `running` awaits the cards its agent made, or is queued again when it made
        none (no effect can have started without a card); the task IDs."""
