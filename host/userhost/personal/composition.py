"""The shipped Personal composition: the `wuu.personal` plugin on a selected `session.domain` provider, with
the `wuu.client-input-receipts` observer and the main agent.

    host = await UserHost.start(..., composition_profile="personal", compose=[personal()])

The bundled provider is the SQLite store in the space's state folder; an embedding selects another with
`provider=`. Without the receipts observer (`input_receipts=False`, as a custom module list that leaves it
out) no input is admitted, and the receipts already saved stay readable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from wuu.generated.models import ApprovalCard, TaskDeliveryReceipt

from ..authority import Composer, Composition
from ..storage.review_ledger.startup import require_migrated
from ..tokens import TOKENS_FILE, TokenError, TokenStore
from .agent import Agent, MainAgentLoop
from .approvals.execution import ActionExecutor, ExecutionChoice, WorkerActions
from .approvals.files import FilesRoot
from .approvals.service import ApprovalService
from .attachments import AttachmentFiles
from .attention import AttentionItem, AttentionService, Locator, LoopScheduler
from .attention_settings import OwnerAttention
from .authorization import AuthorizationProvider
from .memory import MemoryService
from .model import ModelAdapter, StandInModel
from .model_agent import ModelAgent, task_tools
from .page_tokens import PageTokens
from .phone import PhoneProvider
from .plugin import PersonalPlugin
from .provider import SessionDomain
from .push_relay import PushRelay
from .reviewer import Reviewer
from .sqlite.store import SqliteSessionDomain
from .task_runner import TaskGrants, TaskRunner
from .tasks import PersonalServices, ReplyTurn, TaskBoard, verbatim_reply

if TYPE_CHECKING:
    from ..authority import UserHost

MAIN_AGENT = "main"
"""The responsible agent of the main conversation's attention."""
ProviderFactory = Callable[["UserHost", datetime], Awaitable[SessionDomain]]
"""Opens the `session.domain` provider of a started host."""


def _now() -> datetime:
    return datetime.now(UTC)


async def sqlite_provider(host: UserHost, now: datetime) -> SessionDomain:
    """The bundled provider: `<state>/personal.sqlite`."""
    return await SqliteSessionDomain.open(host.layout.state, host.user_space_id, host.product_domain, now)


AuthorizationChoice = Callable[[SessionDomain], "AuthorizationProvider | None"]
"""Selects the `execution.authorization@1` provider of a space from its opened store."""


def native_authorization(store: SessionDomain) -> AuthorizationProvider | None:
    """The bundled native provider, on the space's store: local-installation authority only."""
    return store.native_authorization()


def no_authorization(store: SessionDomain) -> AuthorizationProvider | None:
    """No provider: background tasks cannot start, and no fallback applies."""
    return None


SESSION_DOMAIN_PROVIDERS: dict[str, ProviderFactory] = {"wuu.session-domain.sqlite": sqlite_provider}
"""The `session.domain` providers of this installation, by their IDs in spec/data/composition_catalog.json."""
AUTHORIZATION_PROVIDERS: dict[str, AuthorizationChoice] = {"wuu.authorization.native": native_authorization}
"""The `execution.authorization` providers of this installation, by their catalog IDs; a composition that
binds none selects `no_authorization`."""


def personal(
    *,
    agent: Agent | None = None,
    model: ModelAdapter | None = None,
    reviewer: Reviewer | None = None,
    execution: ExecutionChoice | None = None,
    provider: ProviderFactory = sqlite_provider,
    input_receipts: bool = True,
    clock: Callable[[], datetime] = _now,
    reply_turn: ReplyTurn = verbatim_reply,
    phone: PhoneProvider | None = None,
    authorization: AuthorizationChoice = native_authorization,
    started: Callable[[PersonalPlugin], None] | None = None,
) -> Composer:
    """The Personal module. `model` is the model adapter of the main agent and of automatic review (the
    deterministic `StandInModel` by default); `agent` replaces the main agent on that model, `reviewer` the
    review; `execution` is the execution profile approved actions run in (a local native worker bound to the
    space's files root by default); `reply_turn` is the turn that carries a task's reply into the main
    conversation; `phone` the provider that user attention is relayed to, for the devices registered for push
    (none by default: registrations are saved, nothing is sent; the owner's notification policy is the
    persisted attention settings); `authorization` selects the `execution.authorization@1` provider of
    background tasks from the opened store (the bundled native one by default; `no_authorization` selects none,
    and no task can start); `started` is given the plugin once it is built (an embedding drives its agent and
    its tasks (`plugin.tasks`), subscribes to user attention (`plugin.attention.subscribe()`) and reads its
    state through it)."""

    async def compose(host: UserHost) -> Composition:
        require_migrated(host.layout.state, host.user_space_id)
        store = await provider(host, clock())
        main = store.main_session_id
        attention = AttentionService(
            clock,
            LoopScheduler(clock),
            authorized=lambda locator: locator.session_id == main,
            generation=lambda: host.graph.generation,
        )

        def delivered(receipt: TaskDeliveryReceipt) -> None:
            # A task's reply in the main conversation raises attention for the main agent that carries it.
            assert receipt.history_seq is not None
            attention.admit(AttentionItem(MAIN_AGENT, Locator(receipt.session_id, receipt.history_seq)))

        board = TaskBoard(
            store.task_ledger(), clock, host.admit, reply_turn, delivered, lambda stop: runner.wake()
        )
        try:
            owner_attention = OwnerAttention(store, attention, clock)
            await owner_attention.load()
            # The host holds the space's presence lock: no other host is staging bytes that this cleans up.
            files = AttachmentFiles(host.layout.files)
            stored = files.stored()
            files.remove(sorted(set(stored) - await store.known_attachments(stored)))
            page_tokens = await asyncio.to_thread(PageTokens.of_state, host.layout.state)
            thinking = model or StandInModel()
            actions = WorkerActions(ActionExecutor(host.layout.files, session=main, profile=execution))
            grants = TaskGrants(store.dispatch_ledger(), authorization(store), clock)

            def card_changed(card: ApprovalCard) -> None:
                plugin.invalidate(card.session_id, card.message_seq, "approvals")
                runner.card_changed(card)

            approvals = ApprovalService(
                store.approval_ledger(),
                FilesRoot(host.layout.files),
                actions,
                reviewer or Reviewer(thinking),
                clock,
                host.admit,
                card_changed,
                grants,
            )
            memory = MemoryService(store.memory_ledger(), clock)
            runner = TaskRunner(
                store.dispatch_ledger(),
                grants,
                store,
                approvals,
                memory,
                ModelAgent(thinking, task_tools()),
                thinking.name,
                clock,
                host.admit,
                board.wake,
            )
            loop = MainAgentLoop(
                agent or ModelAgent(thinking),
                store,
                clock,
                host.admit,
                lambda *target: plugin.invalidate(*target),
                board.ask_owner,
                lambda call_id, tool, arguments, request: approvals.act(
                    main, call_id, tool, arguments, request
                ),
                memory.call,
                runner.start,
            )
            plugin = PersonalPlugin(
                store=store,
                files=files,
                agent=loop,
                notify=host.notify,
                graph_generation=lambda: host.graph.generation,
                clock=clock,
                tasks=board,
                attention=attention,
                attention_settings=owner_attention,
                page_tokens=page_tokens,
                approvals=approvals,
                grants=grants,
                runner=runner,
                input_receipts=input_receipts,
            )
            await approvals.start()
            await runner.start_up()
        except BaseException:
            await store.close()
            raise
        tokens = TokenStore(host.layout.state / TOKENS_FILE)

        def devices() -> frozenset[str]:
            # Read again at each notification: a revoked device token ends its registrations' deliveries.
            try:
                tokens.refresh()
            except TokenError:
                return frozenset()
            return tokens.devices()

        relay = (
            None if phone is None else PushRelay(attention.subscribe(), store.task_ledger(), devices, phone)
        )
        if input_receipts:
            loop.wake()  # inputs admitted before a restart that no context has included yet
        board.wake()  # replies queued before a restart
        if started is not None:
            started(plugin)

        async def close() -> None:
            if relay is not None:
                await relay.close()
            attention.close()
            try:
                await actions.executor.close()
            finally:
                await store.close()

        return Composition([plugin.plugin()], close, PersonalServices(board, clock))

    return compose
