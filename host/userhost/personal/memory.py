"""The Personal Memory service (spec/schema/userhost/memory.schema.json): what the main assistant and hidden task
executions remember of the owner, through four agent tools, each write attributed to the agent that made it.

`MemoryService.call` runs one tool call and returns the text its model is told (and that the stand-in model
shows the owner as is):

- `memory_save` -> `remembered mem_… (version 1): TEXT`
- `memory_query` -> one line per match, `mem_… vN: TEXT (saved|corrected by main agent|task T[, message S])`,
  the most recently changed first, or `no memories match`
- `memory_correct` -> `corrected mem_… (version N): TEXT`
- `memory_forget` -> `forgot mem_…: its text is redacted; conversations, files and backups are not erased`

A call the service refuses is told `refused (CODE): why`, with CODE `invalid_arguments` (the arguments break
the tool's spec def), `memory_not_found` or `memory_forgotten`; nothing changes then.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from wuu.generated import validators
from wuu.generated.models import MemoryAuthor, MemoryRecord

from .memory_ledger import Attribution, MemoryForgotten, MemoryLedger, MemoryNotFound, MemoryRefused

MEMORY_TOOLS = {
    "memory_save": (
        "MemorySaveArguments",
        "Remember something about the owner for later conversations and tasks.",
    ),
    "memory_query": (
        "MemoryQueryArguments",
        "Look up what you remember about the owner (an empty query lists the most recent memories).",
    ),
    "memory_correct": ("MemoryCorrectArguments", "Correct a memory: its new text becomes a new version."),
    "memory_forget": (
        "MemoryForgetArguments",
        "Forget a memory: its text is redacted and never used again.",
    ),
}
"""The memory tools, the spec defs of their arguments and what the model is told of each."""
MAX_QUERY_RESULTS = 20
"""The most memories one query lists (`MemoryQueryArguments`)."""
NO_MATCH = "no memories match"
FORGOTTEN = "its text is redacted; conversations, files and backups are not erased"
"""What a forget's result says it did and did not do."""
REFUSAL_CODES: Mapping[type[MemoryRefused], str] = {
    MemoryNotFound: "memory_not_found",
    MemoryForgotten: "memory_forgotten",
}


def new_memory_id() -> str:
    """A fresh memory ID (`MemoryId`)."""
    return f"mem_{secrets.token_hex(16)}"


class MemoryService:
    """The memory tools on a space's memory ledger."""

    def __init__(self, ledger: MemoryLedger, clock: Callable[[], datetime]) -> None:
        self.ledger = ledger
        self._clock = clock

    async def call(self, tool: str, arguments: Mapping[str, Any], attribution: Attribution) -> str:
        """Run one memory tool call (`tool` is one of `MEMORY_TOOLS`) for the agent `attribution` names;
        what its model is told."""
        definition, _ = MEMORY_TOOLS[tool]
        found = validators.errors(definition, dict(arguments))
        if found:
            where = ".".join(str(part) for part in found[0].absolute_path) or "arguments"
            return f"refused (invalid_arguments): {where}: {found[0].message}"
        try:
            if tool == "memory_save":
                return await self.save(arguments["text"], attribution)
            if tool == "memory_query":
                return await self.query(arguments["query"])
            if tool == "memory_correct":
                return await self.correct(arguments["memory_id"], arguments["text"], attribution)
            return await self.forget(arguments["memory_id"])
        except MemoryRefused as refused:
            return f"refused ({REFUSAL_CODES[type(refused)]}): {refused}"

    async def save(self, text: str, attribution: Attribution) -> str:
        """Remember `text` as a new memory."""
        saved = await self.ledger.save(new_memory_id(), text, attribution, self._clock())
        return f"remembered {saved.memory_id} (version 1): {text}"

    async def query(self, query: str) -> str:
        """The active memories whose current text contains `query`, one line each."""
        found = await self.ledger.query(query, MAX_QUERY_RESULTS)
        return "\n".join(_line(record) for record in found) or NO_MATCH

    async def correct(self, memory_id: str, text: str, attribution: Attribution) -> str:
        """Make `text` the next version of an active memory. MemoryNotFound, MemoryForgotten."""
        corrected = await self.ledger.correct(memory_id, text, attribution, self._clock())
        return f"corrected {memory_id} (version {corrected.version}): {text}"

    async def forget(self, memory_id: str) -> str:
        """Forget an active memory. MemoryNotFound, MemoryForgotten."""
        await self.ledger.forget(memory_id, self._clock())
        return f"forgot {memory_id}: {FORGOTTEN}"


def _line(record: MemoryRecord) -> str:
    """A query's line for an active memory: its current version with that version's attribution."""
    current = record.versions[-1]
    attribution = current.attribution
    who = "main agent" if attribution.by == MemoryAuthor.MAIN_AGENT else f"task {attribution.task_id}"
    how = "saved" if current.version == 1 else "corrected"
    answering = "" if attribution.message_seq is None else f", message {attribution.message_seq}"
    return f"{record.memory_id} v{record.version}: {record.text} ({how} by {who}{answering})"
