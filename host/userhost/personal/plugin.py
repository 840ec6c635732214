"""The Personal plugin (`wuu.personal`): the client methods of spec/schema/userhost/personal.schema.json on a
`session.domain` provider.

The host has validated each call's params against the spec (limits included) before a handler runs; the
handlers check what needs the call or the store: the session (only the main conversation, and only in this
space), the attachments' content against their declared size and digest, the emoji, page tokens and
offsets. Admission is idempotent by business request ID and acknowledged only once durable.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

import orjson

from wuu.generated.models import (
    AgentsHistoryReadParams,
    AgentsHistoryReadResult,
    AgentsHistorySearchParams,
    AgentsHistorySearchResult,
    AgentsMainSessionParams,
    AgentsMainSessionResult,
    AgentsReactionsParams,
    AgentsReactionsResult,
    AgentsReactParams,
    AgentsReactResult,
    AgentsReceiptsParams,
    AgentsReceiptsResult,
    AgentsSendParams,
    AgentsSendResult,
    HostSessionAttachmentReadParams,
    HostSessionAttachmentReadResult,
    PluginClientInvalidateParams,
    PluginInvalidationTopic,
    ReactionActor,
    UserHostErrorCode,
    UserInput,
)
from wuu.generated.servers import PersonalServer, personal_handlers

from ..errors import UserHostError
from ..plugins import Plugin, PluginCall
from .agent import MainAgentLoop
from .approval_methods import ApprovalMethods
from .approvals.service import ApprovalService
from .attachment_reads import OffsetPastEnd, chunk
from .attachments import AttachmentFiles, decode
from .attention import AttentionService
from .attention_settings import AttentionSettingsMethods, OwnerAttention
from .durably import durably
from .grant_methods import GrantMethods
from .page_tokens import PageTokens
from .provider import Admission, SessionDomain, Submission
from .stamps import micros
from .task_runner import TaskGrants, TaskRunner
from .tasks import TaskBoard
from .wire_errors import refusals_as_wire_errors

log = logging.getLogger("wuu.host.userhost.personal")

PLUGIN_ID = "wuu.personal"
FINGERPRINT = "wuu.personal/1"
FRACTION = re.compile(r"\.([0-9]+)")


@dataclass
class PersonalPlugin(ApprovalMethods, GrantMethods, AttentionSettingsMethods, PersonalServer[PluginCall]):
    """The plugin's state: its provider, the space's attachment files, the main agent's loop and the host's
    notices. `input_receipts` is the `wuu.client-input-receipts` observer: without it no input is admitted."""

    store: SessionDomain
    files: AttachmentFiles
    agent: MainAgentLoop
    notify: Callable[[PluginClientInvalidateParams], object]
    graph_generation: Callable[[], int]
    clock: Callable[[], datetime]
    tasks: TaskBoard
    """The space's hidden tasks and their replies' deliveries."""
    attention: AttentionService
    """The owner's user attention: `subscribe()` for its notifications."""
    attention_settings: OwnerAttention
    """The owner's persisted attention settings, which govern `attention`."""
    page_tokens: PageTokens
    """Issues and checks the space's search page tokens."""
    approvals: ApprovalService
    """The space's approval cards, rules and executions."""
    grants: TaskGrants
    """The grants of the selected authorization provider."""
    runner: TaskRunner
    """The space's background tasks that execute."""
    input_receipts: bool = True

    def plugin(self) -> Plugin:
        """The plugin as the composition graph lists it."""
        return Plugin(PLUGIN_ID, FINGERPRINT, personal_handlers(self))

    # --- the methods -------------------------------------------------------------------------------

    async def agents_main_session(
        self, params: AgentsMainSessionParams, call: PluginCall
    ) -> AgentsMainSessionResult:
        with refusals_as_wire_errors():
            return AgentsMainSessionResult(session_id=await self.store.main_session())

    async def agents_send(self, params: AgentsSendParams, call: PluginCall) -> AgentsSendResult:
        user_input = call.user_input
        assert user_input is not None  # the host requires it for this method
        session_id = await self._main(params.session_id)
        if not self.input_receipts:
            raise UserHostError(
                UserHostErrorCode.INPUT_RECEIPTS_UNAVAILABLE,
                "the wuu.client-input-receipts observer is not selected in this composition",
            )
        attachments = user_input.attachments or []
        decoded = await asyncio.to_thread(decode, attachments) if attachments else []
        submission = Submission(
            session_id=session_id,
            plugin_id=PLUGIN_ID,
            client_input_id=user_input.client_input_id,
            request_id=user_input.request_id,
            text=user_input.text,
            text_sha256=hashlib.sha256(user_input.text.encode()).hexdigest(),
            attachments=(),
            binding_digest=binding_digest(session_id, user_input),
            admitted_by=call.caller,
        )
        # With attachments, a retry is recognized before their bytes are written again.
        if decoded and await self.store.receipt(user_input.request_id) is not None:
            with refusals_as_wire_errors():  # a replay, or a conflict
                return _sent(await durably(self.store.admit(submission, self.clock())))
        if call.revoked.is_set():
            raise UserHostError(UserHostErrorCode.CANCELLED, "the call lost its foreground authority")
        staged = await asyncio.to_thread(self.files.stage, decoded) if decoded else []
        try:
            with refusals_as_wire_errors():
                admission = await durably(
                    self.store.admit(
                        replace(submission, attachments=staged) if staged else submission, self.clock()
                    )
                )
        except BaseException:
            self.files.discard(staged)
            raise
        if admission.replayed:
            self.files.discard(staged)  # a concurrent retry admitted it first
        else:
            self.agent.wake()
        return _sent(admission)

    async def agents_receipts(self, params: AgentsReceiptsParams, call: PluginCall) -> AgentsReceiptsResult:
        session_id = await self._main(params.session_id)
        with refusals_as_wire_errors():
            found = await self.store.receipts(session_id, params.client_input_ids)
        return AgentsReceiptsResult(receipts=found)

    async def agents_react(self, params: AgentsReactParams, call: PluginCall) -> AgentsReactResult:
        if params.emoji is not None and not is_emoji(params.emoji):
            raise UserHostError(
                UserHostErrorCode.INVALID_PARAMS, "emoji is not one Unicode emoji", "params.emoji"
            )
        session_id = await self._main(params.session_id)
        with refusals_as_wire_errors():
            written = await durably(
                self.store.react(
                    ReactionActor.OWNER,
                    session_id,
                    params.message_seq,
                    params.emoji,
                    params.expected_revision,
                    params.request_id,
                    self.clock(),
                )
            )
        if not written.replayed:
            self.invalidate(session_id, params.message_seq)
        return AgentsReactResult(
            session_id=session_id,
            message_seq=params.message_seq,
            reactions=written.state,
            receipt=written.receipt,
            replayed=written.replayed,
        )

    async def agents_reactions(
        self, params: AgentsReactionsParams, call: PluginCall
    ) -> AgentsReactionsResult:
        session_id = await self._main(params.session_id)
        with refusals_as_wire_errors():
            found = await self.store.reactions(session_id, params.message_seqs)
        return AgentsReactionsResult(session_id=session_id, messages=found)

    async def agents_history_read(
        self, params: AgentsHistoryReadParams, call: PluginCall
    ) -> AgentsHistoryReadResult:
        session_id = await self._main(params.session_id)
        size = params.page_size
        with refusals_as_wire_errors():
            found = await self.store.history(session_id, params.before_seq, size + 1)
        more = len(found) > size
        page = found[:size]
        return AgentsHistoryReadResult(messages=page, next_before_seq=page[-1].message_seq if more else None)

    async def agents_history_search(
        self, params: AgentsHistorySearchParams, call: PluginCall
    ) -> AgentsHistorySearchResult:
        session_id = await self._main(params.session_id)
        time_min = _bound(params.time_min, "params.time_min")
        time_max = _bound(params.time_max, "params.time_max")
        scope = search_scope(session_id, params.query, params.time_min, params.time_max)
        before = None if params.page_token is None else self.page_tokens.cursor(params.page_token, scope)
        size = params.page_size
        with refusals_as_wire_errors():
            found = await self.store.search(session_id, params.query, time_min, time_max, before, size + 1)
        page = found[:size]
        token = self.page_tokens.issue(scope, page[-1].message_seq) if len(found) > size else None
        return AgentsHistorySearchResult(messages=page, next_page_token=token)

    async def host_session_attachment_read(
        self, params: HostSessionAttachmentReadParams, call: PluginCall
    ) -> HostSessionAttachmentReadResult:
        stored = None
        if await self.store.owns(params.session_id):
            stored = await self.store.attachment(params.session_id, params.attachment_id)
        if stored is None:
            raise UserHostError(
                UserHostErrorCode.NOT_FOUND,
                f"session {params.session_id} has no attachment {params.attachment_id}",
            )
        try:
            return await chunk(stored, params.offset, params.max_chars)
        except OffsetPastEnd as past:
            raise UserHostError(UserHostErrorCode.INVALID_PARAMS, str(past), "params.offset") from None

    def invalidate(self, session_id: str, message_seq: int, topic: str = "reactions") -> None:
        """Send the content-free notice of a saved write: a reaction (the owner's or the agent's), or a card
        created or settled (`approvals`, the card's anchor). A failure to send it never undoes the write."""
        try:
            self.notify(
                PluginClientInvalidateParams(
                    graph_generation=self.graph_generation(),
                    plugin_id=PLUGIN_ID,
                    topic=PluginInvalidationTopic(topic),
                    session_id=session_id,
                    message_seqs=[message_seq],
                )
            )
        except Exception:
            log.exception("the %s notice failed; the write stays saved", topic)


def is_emoji(text: str) -> bool:
    """Whether `text` is exactly one Unicode emoji."""
    import emoji  # its tables take a tenth of the host's start-up to load: the first reaction loads them

    return bool(emoji.is_emoji(text))


def binding_digest(session_id: str, user_input: UserInput) -> str:
    """The digest of what admission binds: the plugin, the session, the client input and business request
    IDs, the literal text, and the ordered filenames, media types, sizes and digests of the attachments."""
    bound = [
        PLUGIN_ID,
        session_id,
        user_input.client_input_id,
        user_input.request_id,
        user_input.text,
        [[a.filename, a.media_type, a.size, a.sha256] for a in user_input.attachments or []],
    ]
    return hashlib.sha256(orjson.dumps(bound)).hexdigest()


def search_scope(
    session_id: str, query: str, time_min: str | None, time_max: str | None
) -> tuple[str | None, ...]:
    """What a search's page tokens are valid for: the method, the session, the query and the bounds as
    given."""
    return ("agents.history.search", session_id, query, time_min, time_max)


def _bound(value: str | None, field: str) -> int | None:
    if value is None:
        return None
    text = value.replace("z", "Z").replace("t", "T")
    # Digits past the microsecond: the bound is rounded up to the next microsecond (messages are saved to
    # the microsecond, so `>= min` and `< max` stay exact).
    fraction = FRACTION.search(text)
    beyond = fraction is not None and len(fraction.group(1)) > 6 and fraction.group(1)[6:].strip("0") != ""
    if fraction is not None:
        text = text[: fraction.start()] + "." + fraction.group(1)[:6].ljust(6, "0") + text[fraction.end() :]
    try:
        return micros(datetime.fromisoformat(text)) + (1 if beyond else 0)
    except (ValueError, OverflowError):
        raise UserHostError(
            UserHostErrorCode.INVALID_PARAMS, f"{value!r} is not a valid time", field
        ) from None


def _sent(admission: Admission) -> AgentsSendResult:
    return AgentsSendResult(receipt=admission.receipt, replayed=admission.replayed)
