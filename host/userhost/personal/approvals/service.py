"""The approval service of a Personal space (spec/schema/userhost/approvals.schema.json): an agent's tool call
becomes a card, the owner's rules, automatic review or the owner decide it, and only an approved card runs,
through the executor, one action at a time.

Every step is written before the next one starts: the card before any decision, the decision before the
claim, the claim (`running`) before the effect, the receipt after it. Right before an effect starts the service
checks again that nothing changed: the target or the resolved command (the card's digest), the process it
writes to, the rule that allowed it, a rule that now asks first. A claim whose outcome was lost stays `unknown`
and is never run again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import TypeAdapter, ValidationError

from wuu.generated.models import (
    ApprovalCard,
    ApprovalRule,
    ApprovalRuleMode,
    ApprovalStatus,
    PersonalAction,
    ProcessWriteAction,
    ReviewSettings,
    RulePreview,
)

from ..approval_ledger import ApprovalLedger, NewCard, StoredCard
from ..authorization import AuthorizationRefused, AuthorizationUnknown, Lease
from ..refusals import StaleRevision
from ..reviewer import Reviewer
from ..stamps import rfc3339
from .actions import Described, describe
from .files import FilesRoot, TargetRefused, leaves_root
from .policy import RuleMatch, by_rules, expires_at, rule_match, rule_still_allows

log = logging.getLogger("wuu.host.userhost.personal")

RECEIPT_TEXT_LIMIT = 4096
"""The most characters of a tool's output a receipt keeps."""
LIST_LIMIT = 100
"""The most waiting cards one `approvals.list` returns."""
AUTHORIZATION_TIMEOUT_SECONDS = 10.0
"""How long the check of a task's effect may take; a slower one is an unknown outcome, and fails closed."""
ACTIONS: TypeAdapter[PersonalAction] = TypeAdapter(PersonalAction)
"""Reads an agent's tool call as a `PersonalAction`."""


@dataclass(frozen=True)
class Execution:
    """What running an action gave."""

    outcome: Literal["succeeded", "failed", "unknown"]
    text: str
    exit_code: int | None = None
    error_code: str | None = None
    """The worker's error code when it refused the call."""
    process_id: str | None = None
    """The process a `process_start` started: what `process_write` names."""


class Executor(Protocol):
    """Runs approved actions in the space's execution environment."""

    async def run(self, action: Mapping[str, Any]) -> Execution:
        """Run one action (its wire JSON) and say what happened; `unknown` when the outcome was lost."""

    def process_argv(self, process_id: str) -> Sequence[str] | None:
        """The command line of `process_id` while it is a live interactive process an approved
        `process_start` started; None otherwise."""

    def on_process_end(self, callback: Callable[[str], None]) -> None:
        """Call `callback` with the process_id of each such process that ends."""


class EffectAuthorizer(Protocol):
    """Checks each effect of a background task against its grant, just before its execution claim."""

    async def authorize(self, card: ApprovalCard) -> Lease:
        """A lease for the claim of `card`'s effect. AuthorizationRefused, AuthorizationUnknown."""

    async def release(self, lease: Lease, outcome: str) -> None:
        """The effect of `lease` ended with `outcome`."""


class ActionRefused(Exception):
    """The action may not run here and got no card: `code` is its ActionRefusal code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ApprovalService:
    """The cards, rules and executions of one Personal space."""

    def __init__(
        self,
        ledger: ApprovalLedger,
        files: FilesRoot,
        executor: Executor,
        reviewer: Reviewer,
        clock: Callable[[], datetime],
        admit: Callable[[Coroutine[Any, Any, None]], None],
        changed: Callable[[ApprovalCard], None],
        authorizer: EffectAuthorizer | None = None,
    ) -> None:
        """`admit` runs work of the host (executions outlive the call that approved them); `changed` is told
        of every card that was created or changed status (clients get the `approvals` notice); `authorizer`
        checks the effects of background tasks (without one, none is authorized)."""
        self._ledger = ledger
        self._files = files
        self._executor = executor
        self._reviewer = reviewer
        self._clock = clock
        self._admit = admit
        self._notify = changed
        self._running = asyncio.Lock()
        self._authorizer = authorizer
        self._in_flight: dict[str, tuple[ApprovalCard, asyncio.Future[Execution]]] = {}
        """The running executions: card ID -> (the claimed card, its execution)."""
        executor.on_process_end(self._process_ended)

    async def start(self) -> None:
        """After a restart: claims left running have an unknown outcome; input for the processes of the previous
        run is cancelled (they ended with it); approved cards not yet claimed run."""
        for card in await self._ledger.recover(self._clock()):
            self._notify(card)
        await self.cancel(lambda card: card.action.tool == "process_write", "the process ended with the host")
        for card_id in await self._ledger.in_status(ApprovalStatus.APPROVED):
            self._admit(self._execute(card_id))

    # --- the agent's side -------------------------------------------------------------------------

    async def propose(
        self,
        session_id: str,
        call_id: str,
        action: PersonalAction,
        request_text: str,
        *,
        source: Literal["main_chat", "task"] = "main_chat",
        task_id: str | None = None,
    ) -> ApprovalCard:
        """The card of an agent's tool call, handled by the rules or review where they can: a retry of the
        same call gets the card it already has (its receipt once settled). ActionRefused when the action may
        not run here."""
        wire = action.model_dump(mode="json")
        made = await self._ledger.by_call(session_id, call_id, wire)
        if made is not None:
            return made.card
        described = await self._describe(wire)
        now = self._clock()
        new = NewCard(
            session_id=session_id,
            call_id=call_id,
            source=source,
            task_id=task_id,
            action=wire,
            digest=described.digest,
            precondition=described.precondition,
            preview=described.preview,
            summary=described.summary,
            request_text=request_text,
            expires_at=expires_at(source, now),
        )
        stored, existed = await self._ledger.create(f"card_{secrets.token_hex(16)}", new, now)
        if existed:
            return stored.card
        self._notify(stored.card)
        return await self._handle(stored, rule_match(wire, described.resolved_command))

    async def act(
        self,
        session_id: str,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        request_text: str,
        *,
        task_id: str | None = None,
    ) -> str:
        """An agent's tool call proposed as an action (a background task's when `task_id` is given); what its
        model is told became of it."""
        for field in ("path", "cwd"):
            value = arguments.get(field)
            if isinstance(value, str) and leaves_root(value):
                return f"refused (path_outside_root): {field} {value!r} leaves the files root"
        try:
            action = ACTIONS.validate_python({**arguments, "tool": tool})
        except ValidationError as error:
            return f"refused (invalid_action): {_first_problem(error)}"
        try:
            source: Literal["main_chat", "task"] = "main_chat" if task_id is None else "task"
            card = await self.propose(
                session_id, call_id, action, request_text, source=source, task_id=task_id
            )
        except ActionRefused as refused:
            return f"refused ({refused.code}): {refused}"
        return _told_to_agent(card)

    async def _handle(self, stored: StoredCard, match: RuleMatch | None) -> ApprovalCard:
        """Let the rules, then automatic review, decide a new card; what they leave waits for the owner."""
        card = stored.card
        rules = by_rules(await self._ledger.rules(), match)
        if rules.ask_first is not None:
            return card
        if rules.automatic is not None:
            decision = {"by": "rule", "verdict": "allow", "rule_id": rules.automatic.rule_id}
            return await self._approve(card, decision, None)
        if not (await self._ledger.review_settings()).automatic_review:
            return card
        action = card.action.model_dump(mode="json")
        review = await self._reviewer.review(stored.request_text, action, card.summary)
        reviewed = {"verdict": review.verdict, "reason": review.reason, "reviewed_at": rfc3339(self._clock())}
        if review.verdict == "allow":
            return await self._approve(
                card, {"by": "review", "verdict": "allow", "reason": review.reason}, reviewed
            )
        if review.verdict == "deny":
            decision = {
                "by": "review",
                "verdict": "deny",
                "reason": review.reason,
                "decided_at": reviewed["reviewed_at"],
            }
            moved = await self._ledger.move(
                card.card_id,
                ApprovalStatus.DENIED,
                self._clock(),
                decision=decision,
                review=reviewed,
                outcome=f"Not done, automatic review denied it: {card.summary}",
            )
            return self._told(moved) or card
        await self._ledger.record_review(card.card_id, reviewed, self._clock())
        return (await self._ledger.card(card.card_id)).card

    async def _approve(
        self, card: ApprovalCard, decision: dict[str, Any], review: Mapping[str, Any] | None
    ) -> ApprovalCard:
        now = self._clock()
        moved = await self._ledger.move(
            card.card_id,
            ApprovalStatus.APPROVED,
            now,
            decision={**decision, "decided_at": rfc3339(now)},
            review=review,
        )
        if moved is None:
            return card
        self._notify(moved)
        self._admit(self._execute(card.card_id))
        return moved

    # --- the owner's side ---------------------------------------------------------------------------

    async def listed(self, session_id: str, card_ids: Sequence[str] | None) -> list[ApprovalCard]:
        """The named cards, or the waiting ones, oldest first (expiry applied first)."""
        await self._expire()
        return await self._ledger.listed(session_id, card_ids, LIST_LIMIT)

    async def decide(
        self,
        session_id: str,
        card_id: str,
        digest: str,
        expected_revision: int,
        allow: bool,
        request_id: str,
    ) -> ApprovalCard:
        """The owner's decision on exactly this card at this digest and revision: allow once runs it once,
        deny never runs it. A retry of the same request gets the card as it is now."""
        await self._expire()
        decision = {"by": "owner", "verdict": "allow" if allow else "deny"}
        card, replayed = await self._ledger.decide(
            session_id, card_id, digest, expected_revision, decision, request_id, self._clock()
        )
        if replayed:
            return card
        self._notify(card)
        if card.status == ApprovalStatus.APPROVED:
            self._admit(self._execute(card_id))
        return card

    async def preview_rule(
        self, session_id: str, card_id: str, digest: str, expected_revision: int
    ) -> RulePreview:
        """The rule that would handle this card's action next time. Writes nothing, decides nothing."""
        card = await self._current(session_id, card_id, digest, expected_revision)
        match = self._match(card)
        return RulePreview.model_validate(
            {
                "card_id": card_id,
                "kind": match.kind,
                "match": dict(match.match),
                "description": _rule_description(match),
                "preview_digest": match.digest,
            }
        )

    async def save_rule(
        self, session_id: str, card_id: str, preview_digest: str, mode: ApprovalRuleMode, request_id: str
    ) -> ApprovalRule:
        """Save the previewed rule. It decides neither this card nor any other waiting one."""
        [card] = await self._ledger.listed(session_id, [card_id], 1)
        match = self._match(card)
        if match.digest != preview_digest:
            raise StaleRevision(
                f"the preview of card {card_id} has digest {match.digest}, not {preview_digest}"
            )
        return await self._ledger.save_rule(
            f"rule_{secrets.token_hex(16)}",
            card_id,
            match.kind,
            match.match,
            match.digest,
            mode,
            request_id,
            self._clock(),
        )

    async def rules(self) -> list[ApprovalRule]:
        return await self._ledger.rules()

    async def update_rule(
        self,
        rule_id: str,
        expected_revision: int,
        mode: ApprovalRuleMode | None,
        paused: bool | None,
        request_id: str,
    ) -> ApprovalRule:
        """Change a rule: checked again before any effect it allowed starts; no waiting card is decided."""
        return await self._ledger.update_rule(
            rule_id, expected_revision, mode, paused, request_id, self._clock()
        )

    async def delete_rule(self, rule_id: str, expected_revision: int, request_id: str) -> str:
        """Delete a rule: work it allowed that has not started will not start; done work is not undone."""
        return await self._ledger.delete_rule(rule_id, expected_revision, request_id, self._clock())

    async def review_settings(self) -> ReviewSettings:
        return await self._ledger.review_settings()

    async def set_review(
        self, automatic_review: bool, expected_revision: int, request_id: str
    ) -> ReviewSettings:
        return await self._ledger.set_review(automatic_review, expected_revision, request_id, self._clock())

    # --- execution ---------------------------------------------------------------------------------

    async def _execute(self, card_id: str) -> None:
        """Run an approved card once: check it again, claim it, run it, save its receipt."""
        async with self._running:
            stored = await self._ledger.card(card_id)
            card = stored.card
            if card.status != ApprovalStatus.APPROVED:
                return
            problem = await self._why_stale(stored)
            if problem is not None:
                status, text = problem
                self._told(
                    await self._ledger.move(
                        card_id, status, self._clock(), outcome=f"Not done: {card.summary}: {text}"
                    )
                )
                return
            lease = None
            if card.task_id is not None:
                try:
                    lease = await self._authorize(card)
                except (AuthorizationRefused, AuthorizationUnknown) as refusal:
                    outcome = f"Not done: {card.summary}: not authorized: {refusal}"
                    moved = await self._ledger.move(
                        card_id, ApprovalStatus.UNAUTHORIZED, self._clock(), outcome=outcome
                    )
                    self._told(moved)
                    return
            claim = None if lease is None else asdict(lease)
            claimed = await self._ledger.move(card_id, ApprovalStatus.RUNNING, self._clock(), lease=claim)
            if claimed is None:  # cancelled meanwhile: the lease claimed nothing
                if lease is not None:
                    await self._release(lease, "not_claimed")
                return
            self._notify(claimed)
            started = self._clock()
            run = asyncio.ensure_future(self._executor.run(card.action.model_dump(mode="json")))
            self._in_flight[card_id] = (claimed, run)
            try:
                result = await run
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the host is closing: the claim stays running, and start-up makes it unknown
                result = Execution("unknown", "stopped while it ran: whether its effect happened is unknown")
            except Exception as error:  # the effect may have happened: the outcome is unknown
                result = Execution("unknown", f"the execution failed: {error}")
            finally:
                del self._in_flight[card_id]
            finished = self._clock()
            receipt: dict[str, Any] = {
                "card_id": card_id,
                "digest": card.digest,
                "outcome": result.outcome,
                "started_at": rfc3339(started),
                "finished_at": None if result.outcome == "unknown" else rfc3339(finished),
                "is_error": result.outcome != "succeeded",
                "text": result.text[:RECEIPT_TEXT_LIMIT],
            }
            if result.exit_code is not None:
                receipt["exit_code"] = result.exit_code
            if result.error_code is not None:
                receipt["error_code"] = result.error_code
            if result.process_id is not None:
                receipt["process_id"] = result.process_id
            if lease is not None:
                await self._release(lease, result.outcome)
            headline = {"succeeded": "Done", "failed": "Failed", "unknown": "Outcome unknown"}[result.outcome]
            self._told(
                await self._ledger.move(
                    card_id,
                    ApprovalStatus(result.outcome),
                    finished,
                    receipt=receipt,
                    outcome=f"{headline}: {card.summary}",
                )
            )

    async def cancel(self, which: Callable[[ApprovalCard], bool], reason: str) -> list[ApprovalCard]:
        """Cancel the cards not yet started whose source went away (`which` picks them); `reason` says why in
        their outcome messages. A running one is stopped (its worker ends the process tree): its outcome is
        `unknown`, never confirmed undone. Settled cards keep their status."""
        for card, run in list(self._in_flight.values()):
            if which(card):
                run.cancel()
        cancelled = []
        for status in (ApprovalStatus.WAITING, ApprovalStatus.APPROVED):
            for card_id in await self._ledger.in_status(status):
                card = (await self._ledger.card(card_id)).card
                if which(card):
                    outcome = f"Not done: {card.summary}: {reason}"
                    moved = await self._ledger.move(
                        card_id, ApprovalStatus.CANCELLED, self._clock(), outcome=outcome
                    )
                    if moved is not None:
                        self._notify(moved)
                        cancelled.append(moved)
        return cancelled

    def _process_ended(self, process_id: str) -> None:
        self._admit(self._cancel_input(process_id))

    async def _cancel_input(self, process_id: str) -> None:
        def writes_to_it(card: ApprovalCard) -> bool:
            return isinstance(card.action, ProcessWriteAction) and card.action.process_id == process_id

        await self.cancel(writes_to_it, f"process {process_id} ended")

    async def _authorize(self, card: ApprovalCard) -> Lease:
        """A fresh check of a task's effect by its grant's provider, never a saved one (tasks.schema.json).
        AuthorizationRefused; AuthorizationUnknown when the check failed or took too long."""
        if self._authorizer is None:
            raise AuthorizationRefused("no execution.authorization@1 provider is selected")
        try:
            return await asyncio.wait_for(self._authorizer.authorize(card), AUTHORIZATION_TIMEOUT_SECONDS)
        except (AuthorizationRefused, AuthorizationUnknown):
            raise
        except Exception as error:  # the provider's answer is unknown: fail closed
            raise AuthorizationUnknown(f"the grant could not be checked: {error!r}") from error

    async def _release(self, lease: Lease, outcome: str) -> None:
        assert self._authorizer is not None
        try:
            await self._authorizer.release(lease, outcome)
        except Exception:  # the effect is over either way; the provider's record of it is its own
            log.exception("the authorization lease was not released", extra={"lease_id": lease.lease_id})

    async def _why_stale(self, stored: StoredCard) -> tuple[ApprovalStatus, str] | None:
        """Why an approved card may no longer run, or None."""
        card = stored.card
        action = card.action.model_dump(mode="json")
        try:
            described = await self._describe(action)
        except ActionRefused as refused:
            return ApprovalStatus.STALE, str(refused)
        if described.digest != card.digest or described.precondition != stored.precondition:
            return ApprovalStatus.STALE, "the file or command changed since the card was made"
        decision = card.decision
        match = rule_match(action, described.resolved_command)
        rules = await self._ledger.rules()
        if decision is not None and decision.by.value == "rule":
            assert decision.rule_id is not None
            if not rule_still_allows(rules, decision.rule_id, match):
                return ApprovalStatus.STALE, "the rule that allowed it was changed or removed"
        elif decision is not None and decision.by.value == "review" and by_rules(rules, match).ask_first:
            return ApprovalStatus.STALE, "a rule now asks first"
        return None

    # --- helpers ------------------------------------------------------------------------------------

    async def _describe(self, action: Mapping[str, Any]) -> Described:
        """The card's view of the action as things are now. ActionRefused."""
        argv: Sequence[str] = ()
        if action["tool"] == "process_write":
            found = self._executor.process_argv(action["process_id"])
            if found is None:
                raise ActionRefused(
                    "unknown_process", f"no interactive process {action['process_id']} is running"
                )
            argv = found
        try:
            return await asyncio.to_thread(describe, action, self._files, argv)
        except TargetRefused as refused:
            raise ActionRefused(refused.code, str(refused)) from None

    async def _expire(self) -> None:
        for card in await self._ledger.expire(self._clock()):
            self._notify(card)

    async def _current(
        self, session_id: str, card_id: str, digest: str, expected_revision: int
    ) -> ApprovalCard:
        [card] = await self._ledger.listed(session_id, [card_id], 1)
        if card.digest != digest or card.revision != expected_revision:
            raise StaleRevision(
                f"card {card_id} is at revision {card.revision} with digest {card.digest}, "
                f"not revision {expected_revision} with digest {digest}"
            )
        return card

    @staticmethod
    def _match(card: ApprovalCard) -> RuleMatch:
        action = card.action.model_dump(mode="json")
        preview = card.preview.model_dump(mode="json")
        match = rule_match(action, preview.get("resolved_command"))
        if match is None:
            raise ActionRefused("invalid_action", f"no rule can handle a {action['tool']} action")
        if match.kind == "command" and match.match["resolved_command"] is None:
            raise ActionRefused("invalid_action", "no rule can handle a command that resolves to no program")
        return match

    def _told(self, card: ApprovalCard | None) -> ApprovalCard | None:
        if card is not None:
            self._notify(card)
        return card


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "arguments"
    return f"{where}: {first['msg']}"


def _told_to_agent(card: ApprovalCard) -> str:
    """A card's state as a tool result for the model that proposed it."""
    status = card.status
    if status == ApprovalStatus.WAITING:
        return f"waiting for the owner's approval: {card.summary} (card {card.card_id})"
    if status in (ApprovalStatus.APPROVED, ApprovalStatus.RUNNING):
        return f"approved, running: {card.summary} (card {card.card_id})"
    if card.receipt is not None:
        return f"{status.value}: {card.summary}: {card.receipt.text}"
    reason = card.decision.reason if card.decision is not None and card.decision.reason else ""
    return f"{status.value}: {card.summary}" + (f" ({reason})" if reason else "")


def _rule_description(match: RuleMatch) -> str:
    if match.kind == "file":
        verb = "Write" if match.match["operation"] == "write_file" else "Edit"
        return f"{verb} {match.match['path']} without asking (this exact path and operation only)"
    return (
        f"Run {' '.join(match.match['argv'])} without asking (this exact command, directory, environment and "
        "permission mode only)"
    )
