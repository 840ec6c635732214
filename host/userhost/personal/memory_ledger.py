"""The memory ledger interface: the durable memories of one space's Personal Memory service (the bundled one:
`sqlite.memory_ledger.SqliteMemoryLedger`), spec/schema/userhost/memory.schema.json. Every write is durable
before it returns, and checked against the stored state in the same step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from wuu.generated.models import MemoryAuthor, MemoryRecord


class MemoryRefused(Exception):
    """The stored state refuses a memory call; the message says why, for the agent. Memory has no client
    methods, so these never become wire errors: the agent is told."""


class MemoryNotFound(MemoryRefused):
    """No memory has this ID in the space."""


class MemoryForgotten(MemoryRefused):
    """The memory is forgotten: it is never corrected or forgotten again."""


@dataclass(frozen=True)
class Attribution:
    """Who writes a version of a memory (`MemoryAttribution`)."""

    by: MemoryAuthor
    session_id: str
    """The main conversation for the main agent, the task's session for a task."""
    task_id: str | None
    """The task, when `by` is `task`."""
    message_seq: int | None
    """The user message of the main conversation being answered, when there is one."""

    @classmethod
    def main_agent(cls, session_id: str, message_seq: int | None) -> Attribution:
        """The main assistant in the main conversation, answering the user message `message_seq`."""
        return cls(MemoryAuthor.MAIN_AGENT, session_id, None, message_seq)

    @classmethod
    def task(cls, task_id: str, session_id: str, message_seq: int | None) -> Attribution:
        """A hidden task execution in its own session."""
        return cls(MemoryAuthor.TASK, session_id, task_id, message_seq)


class MemoryLedger(Protocol):
    """The memories of one space."""

    async def save(self, memory_id: str, text: str, attribution: Attribution, now: datetime) -> MemoryRecord:
        """Save a new memory at version 1."""

    async def correct(
        self, memory_id: str, text: str, attribution: Attribution, now: datetime
    ) -> MemoryRecord:
        """Add a version to an active memory; MemoryNotFound or MemoryForgotten."""

    async def forget(self, memory_id: str, now: datetime) -> MemoryRecord:
        """Forget an active memory, overwriting the texts of all its versions in the store; MemoryNotFound or
        MemoryForgotten."""

    async def query(self, query: str, limit: int) -> Sequence[MemoryRecord]:
        """The active memories whose current text contains `query` (case-insensitively), the most recently
        changed first, at most `limit`."""

    async def record(self, memory_id: str) -> MemoryRecord:
        """One memory with all its versions; MemoryNotFound."""
