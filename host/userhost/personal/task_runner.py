"""Background tasks that execute, under grants of bounded unattended authority
(spec/schema/userhost/tasks.schema.json).

`TaskRunner.start` is the main agent's `start_task`: it asks the selected `execution.authorization@1` provider
for a grant with the admission authority of the input the agent answers, and saves the task with the grant's
ID and expiry and a queued run. The runner, admitted work of the host, then takes each queued run: the task's
agent works in the task's hidden session, and every action it calls becomes a card of the main conversation
(source `task`), decided like any other. Before each effect's execution claim the approval service asks
`TaskGrants.authorize` for a fresh check by the provider. Once every card the agent made has settled, the task
completes on the evidence of its cards (all succeeded) or fails, and its reply is delivered to the main
conversation by the task board's delivery runner.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from wuu.generated.models import ApprovalCard, StartTaskArguments, TaskGrant

from ..services import Caller
from .agent import ModelContext
from .approvals.service import ApprovalService
from .attachment_reads import READ_ATTACHMENT, TaskAttachments, read_attachment
from .authorization import (
    PERSONAL_FILES,
    AuthorizationProvider,
    AuthorizationRefused,
    AuthorizationUnknown,
    Effect,
    GrantRequest,
    Lease,
)
from .dispatch_ledger import Dispatch, DispatchLedger, NewDispatch, RunStatus
from .memory import MEMORY_TOOLS, MemoryService
from .memory_ledger import Attribution
from .model_agent import ACTION_TOOLS, ModelAgent
from .provider import ContextMessage, SessionDomain, TaskStateError
from .serial import SerialWork

log = logging.getLogger("wuu.host.userhost.personal")

ISSUE_TIMEOUT_SECONDS = 10.0
"""How long the provider may take to issue a grant; a slower answer is an unknown one."""
TASK_CONTEXT_MESSAGES = 50
"""The most messages of its hidden session a task's agent is offered."""
EMBEDDING = Caller("embedding")
"""The embedding API, in the host's own process: the local installation."""
UNSETTLED = frozenset({"waiting", "approved", "running"})
OUTCOME_WORDS = {"succeeded": "Done", "failed": "Failed", "unknown": "Outcome unknown"}


class TaskRunner:
    """The Personal space's background tasks that execute, and the checks of their effects."""

    def __init__(
        self,
        ledger: DispatchLedger,
        grants: TaskGrants,
        store: SessionDomain,
        approvals: ApprovalService,
        memory: MemoryService,
        agent: ModelAgent,
        model: str,
        clock: Callable[[], datetime],
        admit: Callable[[Coroutine[Any, Any, None]], None],
        replies_queued: Callable[[], None],
    ) -> None:
        """`grants`: the selected `execution.authorization@1` provider's; `agent`: the tasks' agent (offered
        the action tools); `model`: the name grants bind; `replies_queued` wakes the delivery of the tasks'
        replies."""
        self._ledger = ledger
        self._grants = grants
        self._store = store
        self._approvals = approvals
        self._memory = memory
        self._agent = agent
        self._model = model
        self._clock = clock
        self._replies_queued = replies_queued
        self._work = SerialWork(admit, self._pass)

    @property
    def idle(self) -> asyncio.Event:
        """Set while the runner has nothing to do."""
        return self._work.idle

    async def start_up(self) -> None:
        """After a restart: runs left running await their cards, or are queued again when they made none; an
        active grant that no dispatch names (the host stopped between issuing it and saving its task) is
        revoked, so no authority outlives the task it was for."""
        await self._ledger.recover(self._clock())
        provider = self._grants.provider
        if provider is not None:
            for grant in await provider.grants(self._clock()):
                dispatch = await self._ledger.dispatch_of(grant.task_id)
                if grant.status.value == "active" and (
                    dispatch is None or dispatch.grant_id != grant.grant_id
                ):
                    await provider.revoke(grant.grant_id, self._clock())
        self.wake()

    def wake(self) -> None:
        """Runs may be ready to advance: run the runner as admitted work unless it already runs."""
        self._work.wake()

    def card_changed(self, card: ApprovalCard) -> None:
        """A card changed: the task that made it may be ready to finish."""
        if card.task_id is not None:
            self.wake()

    # --- the main agent's start_task ---------------------------------------------------------------

    async def start(
        self, call_id: str, arguments: Mapping[str, Any], admitted_by: Caller | None, origin_input: str | None
    ) -> str:
        """Start a background task for the main agent's `start_task` call, answering the input `origin_input`
        admitted by `admitted_by`; what its model is told. A retry of the same call gets the task it started."""
        try:
            instructions = StartTaskArguments.model_validate(dict(arguments)).instructions
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "arguments"
            return f"refused (invalid_action): {where}: {first['msg']}"
        main = self._store.main_session_id
        request_id = "task-" + hashlib.sha256(f"{main}\n{call_id}".encode()).hexdigest()[:32]
        known = await self._ledger.dispatched(request_id)
        if known is not None:
            return _started(known)
        provider = self._grants.provider
        if provider is None:
            return "refused (authorization_unavailable): no execution.authorization@1 provider is selected"
        task_id, session_id = f"task_{secrets.token_hex(12)}", f"ses_task_{secrets.token_hex(12)}"
        tools = tuple(ACTION_TOOLS)
        request = GrantRequest(
            task_id, session_id, request_id, 1, tools, (PERSONAL_FILES,), self._model, admitted_by
        )
        grant = await self._issue(provider, request)
        if isinstance(grant, str):
            return grant
        new = NewDispatch(
            task_id, session_id, request_id, instructions, origin_input, self._model, provider.name,
            grant.grant_id, grant.expires_at,
        )  # fmt: skip
        dispatch, existed = await self._ledger.dispatch(new, self._clock())
        if existed:  # a concurrent retry of the call saved its own grant first
            await provider.revoke(grant.grant_id, self._clock())
        self.wake()
        return _started(dispatch)

    async def resume(self, task_id: str, admitted_by: Caller = EMBEDDING) -> str:
        """Explicitly resume a dispatched task: a new requirements version and execution attempt, under a new
        grant (a grant binds one requirements version); what became of it. The embedding API resumes with the
        local installation's authority."""
        dispatch = await self._ledger.dispatch_of(task_id)
        provider = self._grants.provider
        if dispatch is None:
            raise TaskStateError("not_found", f"task {task_id} was not dispatched")
        if provider is None:
            return "refused (authorization_unavailable): no execution.authorization@1 provider is selected"
        task = dispatch.task
        version = task.requirements_version + 1
        request = GrantRequest(
            task.task_id, task.session_id, task.request_id, version, tuple(ACTION_TOOLS), (PERSONAL_FILES,),
            self._model, admitted_by,
        )  # fmt: skip
        grant = await self._issue(provider, request)
        if isinstance(grant, str):
            return grant
        try:
            resumed = await self._ledger.redispatch(
                task_id, task.requirements_version, grant.grant_id, grant.expires_at, self._clock()
            )
        except TaskStateError:
            await provider.revoke(grant.grant_id, self._clock())  # another resume came first
            raise
        await provider.revoke(dispatch.grant_id, self._clock())  # it authorized the earlier requirements only
        self.wake()
        return _started(resumed)

    async def _issue(self, provider: AuthorizationProvider, request: GrantRequest) -> TaskGrant | str:
        """The provider's grant for `request`, or the refusal the model is told (no fallback applies)."""
        try:
            return await asyncio.wait_for(provider.issue(request, self._clock()), ISSUE_TIMEOUT_SECONDS)
        except AuthorizationRefused as refused:
            return f"refused (authorization_refused): {refused}"
        except (AuthorizationUnknown, Exception) as error:
            return f"refused (authorization_unavailable): the provider gave no answer: {error!r}"

    # --- the runs ------------------------------------------------------------------------------------

    async def _pass(self) -> bool:
        for dispatch in await self._ledger.active():
            try:
                await self._advance(dispatch)
            except Exception:  # one broken run never holds up the others
                log.exception("a task's run failed", extra={"task_id": dispatch.task.task_id})
        return False

    async def _advance(self, dispatch: Dispatch) -> None:
        task, attempt = dispatch.task, dispatch.execution_attempt
        if task.cancel_requested:
            await self._approvals.cancel(
                lambda card: card.task_id == task.task_id, f"task {task.task_id} was stopped"
            )
            await self._ledger.fail(task.task_id, attempt, "failed", "The task was stopped.", self._clock())
            return
        if task.execution_attempt != attempt or task.status not in ("running", "waiting_user"):
            # Resumed (a new attempt needs a new grant) or ended by other means: this run is over.
            await self._ledger.move_run(
                task.task_id, attempt, frozenset({"queued", "running", "awaiting"}), "failed",
                f"the task is {task.status}, attempt {task.execution_attempt}", self._clock(),
            )  # fmt: skip
            return
        note = dispatch.run_note
        if dispatch.run_status == "queued":
            if not await self._ledger.move_run(
                task.task_id, attempt, frozenset({"queued"}), "running", None, self._clock()
            ):
                return
            note = await self._run_agent(dispatch)
            await self._ledger.move_run(
                task.task_id, attempt, frozenset({"running"}), "awaiting", note, self._clock()
            )
        await self._finish_if_settled(dispatch, note)

    async def _run_agent(self, dispatch: Dispatch) -> str:
        """One step of the task's agent in its hidden session; its last words."""
        step = TaskStep(self._store, self._approvals, self._memory, dispatch, self._clock)
        step.history = tuple(await self._store.context(dispatch.task.session_id, TASK_CONTEXT_MESSAGES))
        await self._agent.step(step)
        return step.said

    async def _finish_if_settled(self, dispatch: Dispatch, note: str | None) -> None:
        task, attempt = dispatch.task, dispatch.execution_attempt
        cards = await self._ledger.cards(task.task_id)
        if any(card.status in UNSETTLED for card in cards):
            return
        lines = [
            f"{OUTCOME_WORDS.get(card.status, 'Not done')}: {card.summary} ({card.status})" for card in cards
        ]
        text = "\n".join([*([note] if note else []), *lines]) or "The task finished without doing anything."
        if all(card.status == "succeeded" for card in cards):
            try:
                await self._ledger.complete(task.task_id, attempt, text, self._clock())
            except TaskStateError as refused:  # waiting for the owner's answer, or stopped meanwhile
                log.info("a task could not complete: %s", refused, extra={"task_id": task.task_id})
                return
        else:
            run: RunStatus = "unknown" if any(card.status == "unknown" for card in cards) else "failed"
            await self._ledger.fail(task.task_id, attempt, run, text, self._clock())
        self._replies_queued()


class TaskGrants:
    """The grants of the selected `execution.authorization@1` provider, as the owner and the approval service
    use them: the owner lists and revokes, the service checks each effect of a task before its claim."""

    def __init__(
        self, ledger: DispatchLedger, provider: AuthorizationProvider | None, clock: Callable[[], datetime]
    ) -> None:
        """`provider`: the selected provider, or None (no task can start, no effect is authorized)."""
        self.provider = provider
        self._ledger = ledger
        self._clock = clock

    # --- the owner's grants --------------------------------------------------------------------------

    async def grants(self) -> list[TaskGrant]:
        """The grants of the selected provider, newest first."""
        return [] if self.provider is None else await self.provider.grants(self._clock())

    async def revoke(self, grant_id: str) -> TaskGrant | None:
        """Revoke a grant; None when the provider knows none such. Effects already claimed are not undone;
        the rest fail their check."""
        if self.provider is None:
            return None
        return await self.provider.revoke(grant_id, self._clock())

    # --- the approval service's checks (EffectAuthorizer) -------------------------------------------

    async def authorize(self, card: ApprovalCard) -> Lease:
        """A fresh check of a task card's effect by its grant's provider."""
        assert card.task_id is not None
        dispatch = await self._ledger.dispatch_of(card.task_id)
        if dispatch is None:
            raise AuthorizationRefused(f"task {card.task_id} has no grant")
        if self.provider is None or self.provider.name != dispatch.provider:
            raise AuthorizationRefused(f"the provider {dispatch.provider!r} of its grant is not selected")
        task = dispatch.task
        effect = Effect(
            dispatch.grant_id, task.task_id, task.session_id, task.request_id, task.requirements_version,
            card.action.tool, PERSONAL_FILES, card.card_id,
        )  # fmt: skip
        return await self.provider.acquire(effect, self._clock())

    async def release(self, lease: Lease, outcome: str) -> None:
        """The effect of `lease` ended."""
        assert self.provider is not None
        await self.provider.release(lease, outcome, self._clock())


class TaskStep:
    """One step of a background task's agent: its context is the task's hidden session, its replies are saved
    there, its actions become cards of the task, its memory tools reach the Memory service attributed to the
    task, and it reads the attachments of the input that started it."""

    def __init__(
        self,
        store: SessionDomain,
        approvals: ApprovalService,
        memory: MemoryService,
        dispatch: Dispatch,
        clock: Callable[[], datetime],
    ) -> None:
        self.history: Sequence[ContextMessage] = ()
        self.said = ""
        """The agent's replies of the step, joined."""
        self._store = store
        self._approvals = approvals
        self._memory = memory
        self._dispatch = dispatch
        self._clock = clock

    async def assemble(self, messages: Sequence[ContextMessage]) -> ModelContext:
        return ModelContext(tuple(messages), ())

    async def reply(self, text: str) -> int:
        self.said = f"{self.said}\n{text}" if self.said else text
        return await self._store.append_assistant(self._dispatch.task.session_id, text, self._clock())

    async def tool(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> str:
        task = self._dispatch.task
        if name in MEMORY_TOOLS:
            return await self._memory.call(
                name, arguments, Attribution.task(task.task_id, task.session_id, None)
            )
        if name == READ_ATTACHMENT:
            return await read_attachment(TaskAttachments(self._store, self._dispatch.origin_input), arguments)
        if name not in ACTION_TOOLS:
            return f"refused (invalid_action): a background task cannot call {name}"
        # Card call IDs are unique per session; a task's cards live in the main conversation.
        return await self._approvals.act(
            self._store.main_session_id, f"{task.task_id}:{call_id}", name, arguments,
            self._dispatch.instructions, task_id=task.task_id,
        )  # fmt: skip

    async def record(self, kind: str, text: str) -> int:
        return await self._store.append_assistant(self._dispatch.task.session_id, text, self._clock(), kind)


def _started(dispatch: Dispatch) -> str:
    task = dispatch.task
    return f"started task {task.task_id} under grant {dispatch.grant_id} (until {dispatch.grant_expires_at})"
