"""The bundled `session.domain` provider: one SQLite file in the space's state folder.

The rules live in plain functions of a connection, one module per aggregate (`sessions`, `admission`,
`history`, `reactions`; the task ledger's in `ledger.py`); this provider hands each call's function to the
database, which runs a write on its single writer inside the group's transaction, so each rule that needs
the stored state (request IDs, revisions, eligibility) is checked in the same transaction that writes, and
a read on its reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from wuu.generated.models import (
    AttentionSettings,
    HistoryMessage,
    InputReceipt,
    MessageReactionSnapshot,
    ReactionActor,
)

from ...services import Caller
from ..approval_ledger import ApprovalLedger
from ..authorization import AuthorizationProvider
from ..dispatch_ledger import DispatchLedger
from ..memory_ledger import MemoryLedger
from ..provider import (
    Admission,
    ContextMessage,
    ReactionWrite,
    StepWindow,
    StoredAttachment,
    Submission,
    TaskLedger,
)
from . import admission, attention, history, reactions, sessions, steps
from .approval_ledger import SqliteApprovalLedger
from .database import Database
from .dispatch_ledger import SqliteDispatchLedger
from .ledger import SqliteTaskLedger
from .memory_ledger import SqliteMemoryLedger
from .messages import append_message
from .native_authorization import NativeAuthorization

STORE_FILE = "personal.sqlite"


class SqliteSessionDomain:
    """The bundled provider. Open it with `SqliteSessionDomain.open(state_dir, user_space_id, domain)`."""

    def __init__(self, database: Database, main_session_id: str) -> None:
        self.database = database
        self.main_session_id = main_session_id

    @classmethod
    async def open(
        cls, state: Path, user_space_id: str, product_domain: str, now: datetime
    ) -> SqliteSessionDomain:
        """Open the space's store, creating it with its main conversation on first use. StoreError when
        the file belongs to another space or domain; StoreVersionError when a newer build wrote it."""
        path = state / STORE_FILE
        database = await Database.open(
            path,
            lambda c: sessions.create_or_check_space(c, path, user_space_id, product_domain, now),
            history.prepare,
        )
        return cls(database, await database.read(sessions.main_session_id))

    async def close(self) -> None:
        await self.database.close()

    def task_ledger(self) -> TaskLedger:
        return SqliteTaskLedger(self.database, self.main_session_id)

    def approval_ledger(self) -> ApprovalLedger:
        return SqliteApprovalLedger(self.database, self.main_session_id)

    def dispatch_ledger(self) -> DispatchLedger:
        return SqliteDispatchLedger(self.database)

    def native_authorization(self) -> AuthorizationProvider:
        return NativeAuthorization(self.database)

    def memory_ledger(self) -> MemoryLedger:
        return SqliteMemoryLedger(self.database)

    # --- sessions --------------------------------------------------------------------------------

    async def main_session(self) -> str:
        main = self.main_session_id
        await self.database.read(lambda c: sessions.require(c, main, main))
        return main

    async def owns(self, session_id: str) -> bool:
        return await self.database.read(lambda c: sessions.exists(c, session_id))

    # --- input ------------------------------------------------------------------------------------

    def admit(self, submission: Submission, now: datetime) -> asyncio.Future[Admission]:
        # The commit's own future: a caller that must not lose it (`durably`) needs no task to hold it.
        return self.database.submit(admission.admit, self.main_session_id, submission, now)

    async def admitted_by(self, session_id: str, client_input_id: str) -> Caller | None:
        return await self.database.read(lambda c: admission.admitted_by(c, session_id, client_input_id))

    async def receipt(self, request_id: str) -> InputReceipt | None:
        return await self.database.read(lambda c: admission.receipt_where(c, "request_id = ?", request_id))

    async def receipts(self, session_id: str, client_input_ids: Sequence[str]) -> list[InputReceipt]:
        main = self.main_session_id
        return await self.database.read(lambda c: admission.receipts(c, main, session_id, client_input_ids))

    async def append_assistant(self, session_id: str, text: str, now: datetime, kind: str = "text") -> int:
        return await self.database.write(append_message, session_id, "assistant", text, now, kind)

    async def step_window(
        self, session_id: str, waiting: int, recent: int, reactions: int
    ) -> StepWindow | None:
        main = self.main_session_id
        return await self.database.read(
            lambda c: steps.window(c, main, session_id, waiting, recent, reactions)
        )

    async def context(self, session_id: str, limit: int) -> list[ContextMessage]:
        return await self.database.read(lambda c: history.context(c, session_id, limit))

    async def record_read(
        self, session_id: str, included: Sequence[tuple[str, int]], now: datetime
    ) -> list[str]:
        return await self.database.write(admission.record_read, session_id, included, now)

    # --- history ----------------------------------------------------------------------------------

    async def history(self, session_id: str, before_seq: int | None, limit: int) -> list[HistoryMessage]:
        main = self.main_session_id
        return await self.database.read(lambda c: history.page(c, main, session_id, before_seq, limit))

    async def search(
        self,
        session_id: str,
        query: str,
        time_min_us: int | None,
        time_max_us: int | None,
        before_seq: int | None,
        limit: int,
    ) -> list[HistoryMessage]:
        main = self.main_session_id
        return await self.database.read(
            lambda c: history.search(c, main, session_id, query, time_min_us, time_max_us, before_seq, limit)
        )

    async def known_attachments(self, attachment_ids: Sequence[str]) -> set[str]:
        return await self.database.read(lambda c: admission.known_attachments(c, attachment_ids))

    async def attachment(self, session_id: str, attachment_id: str) -> StoredAttachment | None:
        return await self.database.read(lambda c: admission.attachment(c, session_id, attachment_id))

    async def input_attachment(
        self, session_id: str, client_input_id: str, attachment_id: str
    ) -> StoredAttachment | None:
        return await self.database.read(
            lambda c: admission.input_attachment(c, session_id, client_input_id, attachment_id)
        )

    # --- reactions ---------------------------------------------------------------------------------

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
        main = self.main_session_id
        return await self.database.write(
            reactions.react, main, actor, session_id, message_seq, emoji, expected_revision, request_id, now
        )

    async def reactions(self, session_id: str, message_seqs: Sequence[int]) -> list[MessageReactionSnapshot]:
        main = self.main_session_id
        return await self.database.read(lambda c: reactions.snapshots(c, main, session_id, message_seqs))

    async def reaction_changes_seen(self, session_id: str, mark: int) -> None:
        await self.database.write(reactions.changes_seen, session_id, mark)

    # --- the owner's settings ---------------------------------------------------------------------

    async def attention_settings(self) -> AttentionSettings:
        return await self.database.read(attention.read)

    async def save_attention_settings(self, settings: AttentionSettings, now: datetime) -> AttentionSettings:
        return await self.database.write(attention.save, settings, now)
