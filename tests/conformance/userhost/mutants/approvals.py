"""Mutants of Personal approvals: allow once, retried and stale decisions, denial, rules (preview, save, ask
first, pause), automatic review, request IDs, unknown cards, the approvals notices and the outcome in the
history."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from wuu.generated.models import (
    AgentsHistoryReadResult,
    ApprovalCard,
    ApprovalChoice,
    ApprovalRule,
    ApprovalRuleMode,
    ApprovalsDecideParams,
    ApprovalsListParams,
    ApprovalsListResult,
    ApprovalsRulesPreviewParams,
    ApprovalsRulesPreviewResult,
    ApprovalsRulesSaveParams,
    ApprovalStatus,
    HistoryMessage,
    ReviewSettings,
    UserHostErrorCode,
)
from wuu.generated.wire import WireModel
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.personal import personal
from wuu.host.userhost.personal.approval_ledger import ApprovalLedger, NewCard, StoredCard
from wuu.host.userhost.personal.model import StandInModel
from wuu.host.userhost.personal.reviewer import Review, Reviewer
from wuu.host.userhost.plugins import PluginCall, PluginHandler

from . import mutant
from .harness import (
    ProviderProxy,
    Relay,
    message_of,
    rewrite_params,
    rewrite_result,
    with_provider,
    wrap_methods,
)

DECIDE = "approvals.decide"
LIST = "approvals.list"
PREVIEW = "approvals.rules.preview"
SAVE = "approvals.rules.save"


async def current_card(
    methods: Mapping[str, PluginHandler], call: PluginCall, session_id: str, card_id: str
) -> ApprovalCard:
    """A card as the plugin's own `approvals.list` reads it."""
    listed = await methods[LIST](ApprovalsListParams(session_id=session_id, card_ids=[card_id]), call)
    assert isinstance(listed, ApprovalsListResult)
    return listed.cards[0]


# --- allow once and decisions ---------------------------------------------------------------------


@mutant(
    "allow-once-saves-rule",
    "saves an automatic rule for the action when the owner allows it once, so the next identical one runs unasked",
    "approvals.allow-once",
)
def allow_once_saves_rule() -> Composer:
    """The `approvals.decide` handler previews and saves the card's rule in `automatic` before it allows the
    card once, as if allow once were "always"."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def broken(params: ApprovalsDecideParams, call: PluginCall) -> WireModel:
            if params.decision == ApprovalChoice.ALLOW_ONCE:
                try:
                    shown = await methods[PREVIEW](
                        ApprovalsRulesPreviewParams(
                            session_id=params.session_id,
                            card_id=params.card_id,
                            digest=params.digest,
                            expected_revision=params.expected_revision,
                        ),
                        call,
                    )
                    assert isinstance(shown, ApprovalsRulesPreviewResult)
                    save = ApprovalsRulesSaveParams(
                        session_id=params.session_id,
                        card_id=params.card_id,
                        preview_digest=shown.preview.preview_digest,
                        mode=ApprovalRuleMode.AUTOMATIC,
                        request_id=f"{params.request_id}.rule",
                    )
                    await methods[SAVE](save, call)
                except UserHostError:
                    pass  # a retry, or a card no rule can handle: decided as asked
            return await handler(params, call)

        return broken

    return wrap_methods([DECIDE], make)


@mutant(
    "decision-retry-stale",
    "answers a retried decision (same request ID) stale_revision instead of the card as it now stands",
    "approvals.decide-retry",
)
def decision_retry_stale() -> Composer:
    """The `approvals.decide` handler remembers the request IDs it has seen and answers any of them again
    with `stale_revision`."""
    seen: set[str] = set()

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def broken(params: ApprovalsDecideParams, call: PluginCall) -> WireModel:
            if params.request_id in seen:
                raise UserHostError(UserHostErrorCode.STALE_REVISION, "the card waits no longer")
            seen.add(params.request_id)
            return await handler(params, call)

        return broken

    return wrap_methods([DECIDE], make)


@mutant(
    "stale-decision-accepted",
    "decides a waiting card whatever digest and revision the decision names",
    "approvals.stale-revision",
)
def stale_decision_accepted() -> Composer:
    """The `approvals.decide` handler puts the card's current digest and revision over the ones the decision
    names before deciding."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def broken(params: ApprovalsDecideParams, call: PluginCall) -> WireModel:
            try:
                card = await current_card(methods, call, params.session_id, params.card_id)
            except UserHostError:
                return await handler(params, call)
            current = {"digest": card.digest, "expected_revision": card.revision}
            return await handler(params.model_copy(update=current), call)

        return broken

    return wrap_methods([DECIDE], make)


@mutant("denied-card-runs", "runs a card the owner denied, as if allowed once", "approvals.deny")
def denied_card_runs() -> Composer:
    """The `approvals.decide` handler decides every card `allow_once`, a denial included."""
    return rewrite_params(DECIDE, lambda params: {"decision": ApprovalChoice.ALLOW_ONCE})


@mutant(
    "decision-request-id-reused",
    "decides a card under a request ID that already decided another, instead of request_id_conflict",
    "approvals.request-id-conflict",
)
def decision_request_id_reused() -> Composer:
    """The `approvals.decide` handler answers its `request_id_conflict` refusals by deciding again under a
    request ID of its own."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def broken(params: ApprovalsDecideParams, call: PluginCall) -> WireModel:
            try:
                return await handler(params, call)
            except UserHostError as error:
                if error.code is not UserHostErrorCode.REQUEST_ID_CONFLICT:
                    raise
                return await handler(
                    params.model_copy(update={"request_id": f"{params.request_id}.again"}), call
                )

        return broken

    return wrap_methods([DECIDE], make)


@mutant(
    "unknown-card-listed",
    "answers approvals.list of a card that does not exist with no cards instead of not_found",
    "approvals.not-found",
)
def unknown_card_listed() -> Composer:
    """The `approvals.list` handler answers its `not_found` refusals with an empty list."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def broken(params: ApprovalsListParams, call: PluginCall) -> WireModel:
            try:
                return await handler(params, call)
            except UserHostError as error:
                if error.code is not UserHostErrorCode.NOT_FOUND:
                    raise
                return ApprovalsListResult(cards=[])

        return broken

    return wrap_methods([LIST], make)


@mutant(
    "waiting-cards-newest-first",
    "reads the waiting cards newest first when approvals.list names no cards",
    "approvals.list-waiting",
)
def waiting_cards_newest_first() -> Composer:
    """The `approvals.list` handler reverses the waiting cards it reads without `card_ids`."""

    def newest_first(result: ApprovalsListResult, params: ApprovalsListParams) -> ApprovalsListResult:
        if params.card_ids is not None:
            return result
        return result.model_copy(update={"cards": result.cards[::-1]})

    return rewrite_result(LIST, newest_first)


# --- rules ----------------------------------------------------------------------------------------


@mutant(
    "rule-preview-saves",
    "saves the previewed rule (automatic) when the owner only asks for its preview",
    "approvals.rule-preview-writes-nothing",
)
def rule_preview_saves() -> Composer:
    """The `approvals.rules.preview` handler saves the rule it shows, in `automatic`."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def broken(params: ApprovalsRulesPreviewParams, call: PluginCall) -> WireModel:
            shown = await handler(params, call)
            assert isinstance(shown, ApprovalsRulesPreviewResult)
            save = ApprovalsRulesSaveParams(
                session_id=params.session_id,
                card_id=params.card_id,
                preview_digest=shown.preview.preview_digest,
                mode=ApprovalRuleMode.AUTOMATIC,
                request_id=f"preview-{params.card_id}",
            )
            await methods[SAVE](save, call)
            return shown

        return broken

    return wrap_methods([PREVIEW], make)


@mutant(
    "rule-save-approves-card",
    "allows the card a rule was saved from once the rule is saved",
    "approvals.rule-save-decides-nothing",
)
def rule_save_approves_card() -> Composer:
    """The `approvals.rules.save` handler allows the rule's card once after saving the rule, as if saving the
    rule were approving the displayed action."""

    def make(handler: PluginHandler, methods: Mapping[str, PluginHandler]) -> PluginHandler:
        async def broken(params: ApprovalsRulesSaveParams, call: PluginCall) -> WireModel:
            saved = await handler(params, call)
            card = await current_card(methods, call, params.session_id, params.card_id)
            allow = ApprovalsDecideParams(
                session_id=params.session_id,
                card_id=params.card_id,
                digest=card.digest,
                expected_revision=card.revision,
                decision=ApprovalChoice.ALLOW_ONCE,
                request_id=f"{params.request_id}.allow",
            )
            await methods[DECIDE](allow, call)
            return saved

        return broken

    return wrap_methods([SAVE], make)


class LedgerProxy:
    """An approval ledger that serves everything from the one it wraps; a mutant overrides one method."""

    def __init__(self, inner: ApprovalLedger) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def with_ledger(ledger: type[LedgerProxy]) -> Composer:
    """The reference composer whose provider's approval ledger is wrapped by `ledger`."""

    class Provider(ProviderProxy):
        def approval_ledger(self) -> ApprovalLedger:
            wrapped: ApprovalLedger = ledger(self.inner.approval_ledger())
            return wrapped

    return with_provider(Provider)


class AskFirstIgnored(LedgerProxy):
    """Policy reads every rule as `automatic`."""

    async def rules(self) -> list[ApprovalRule]:
        rules: list[ApprovalRule] = await self.inner.rules()
        return [rule.model_copy(update={"mode": ApprovalRuleMode.AUTOMATIC}) for rule in rules]


@mutant(
    "ask-first-ignored",
    "approves an action that an ask_first rule matches, as if the rule were automatic",
    "approvals.ask-first-wins",
)
def ask_first_ignored() -> Composer:
    """The approval ledger hands every rule to policy in `automatic` mode, so asking first never wins."""
    return with_ledger(AskFirstIgnored)


class PauseIgnored(LedgerProxy):
    """Policy reads every rule as not paused."""

    async def rules(self) -> list[ApprovalRule]:
        rules: list[ApprovalRule] = await self.inner.rules()
        return [rule.model_copy(update={"paused": False}) for rule in rules]


@mutant(
    "paused-rule-applies",
    "approves an action that only a paused automatic rule matches",
    "approvals.paused-rule",
)
def paused_rule_applies() -> Composer:
    """The approval ledger hands every rule to policy unpaused, so a paused rule still approves."""
    return with_ledger(PauseIgnored)


class RulesInMemory(LedgerProxy):
    """A saved rule lives in the host's memory only: the store forgets it as soon as it is saved."""

    def __init__(self, inner: ApprovalLedger) -> None:
        super().__init__(inner)
        self.memory: list[ApprovalRule] = []

    async def save_rule(
        self,
        rule_id: str,
        card_id: str,
        kind: str,
        match: Mapping[str, Any],
        match_digest: str,
        mode: ApprovalRuleMode,
        request_id: str,
        now: datetime,
    ) -> ApprovalRule:
        rule: ApprovalRule = await self.inner.save_rule(
            rule_id, card_id, kind, match, match_digest, mode, request_id, now
        )
        await self.inner.delete_rule(rule.rule_id, rule.revision, f"{request_id}.forget", now)
        self.memory.append(rule)
        return rule

    async def rules(self) -> list[ApprovalRule]:
        stored: list[ApprovalRule] = await self.inner.rules()
        return stored + self.memory


@mutant(
    "rules-kept-in-memory",
    "keeps saved rules in memory only, so a killed host forgets them",
    "approvals.durable",
)
def rules_kept_in_memory() -> Composer:
    """The approval ledger deletes each rule from the store right after saving it and keeps it in memory,
    where policy and approvals.rules.list still find it until the host ends."""
    return with_ledger(RulesInMemory)


class DeleteIgnored(LedgerProxy):
    """A deletion at the rule's current revision answers the rule's ID and deletes nothing."""

    async def delete_rule(self, rule_id: str, expected_revision: int, request_id: str, now: datetime) -> str:
        rules: list[ApprovalRule] = await self.inner.rules()
        if any(rule.rule_id == rule_id and rule.revision == expected_revision for rule in rules):
            return rule_id
        deleted: str = await self.inner.delete_rule(rule_id, expected_revision, request_id, now)
        return deleted


@mutant(
    "rule-delete-ignored", "answers a rule's deletion but keeps the rule in force", "approvals.rule-deleted"
)
def rule_delete_ignored() -> Composer:
    """The approval ledger answers `approvals.rules.delete` at the rule's current revision with the rule's ID
    without deleting it (a deletion at another revision is refused as the reference refuses it)."""
    return with_ledger(DeleteIgnored)


class RevisionUnchecked(LedgerProxy):
    """A rule's update applies at whatever revision it names."""

    async def update_rule(
        self,
        rule_id: str,
        expected_revision: int,
        mode: ApprovalRuleMode | None,
        paused: bool | None,
        request_id: str,
        now: datetime,
    ) -> ApprovalRule:
        rules: list[ApprovalRule] = await self.inner.rules()
        current = next((rule.revision for rule in rules if rule.rule_id == rule_id), expected_revision)
        updated: ApprovalRule = await self.inner.update_rule(rule_id, current, mode, paused, request_id, now)
        return updated


@mutant(
    "rule-revision-unchecked",
    "updates a rule whatever revision the update names, instead of stale_revision",
    "approvals.rule-revision",
)
def rule_revision_unchecked() -> Composer:
    """The approval ledger puts a rule's current revision over the one an update names."""
    return with_ledger(RevisionUnchecked)


# --- digests --------------------------------------------------------------------------------------


class ActionOnlyDigest(LedgerProxy):
    """A card's digest covers its action alone."""

    async def create(self, card_id: str, new: NewCard, now: datetime) -> tuple[StoredCard, bool]:
        text = json.dumps({"action": dict(new.action)}, sort_keys=True, separators=(",", ":"))
        digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
        made: tuple[StoredCard, bool] = await self.inner.create(card_id, replace(new, digest=digest), now)
        return made


@mutant(
    "digest-without-precondition",
    "digests a card's action alone, leaving out the file precondition or the resolved command",
    "approvals.action-digest",
)
def digest_without_precondition() -> Composer:
    """The approval ledger saves each new card with the digest of its action alone."""
    return with_ledger(ActionOnlyDigest)


@mutant(
    "preview-digest-without-kind",
    "digests a rule preview's match alone, leaving out its kind",
    "approvals.preview-digest",
)
def preview_digest_without_kind() -> Composer:
    """The `approvals.rules.preview` handler answers a preview_digest of the canonical JSON of the match alone."""

    def match_only(result: ApprovalsRulesPreviewResult, params: Any) -> ApprovalsRulesPreviewResult:
        match = result.preview.model_dump(mode="json")["match"]
        text = json.dumps(match, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
        preview = result.preview.model_copy(update={"preview_digest": digest})
        return result.model_copy(update={"preview": preview})

    return rewrite_result(PREVIEW, match_only)


# --- interactive processes ------------------------------------------------------------------------


class InputAllowed(Reviewer):
    """The stand-in's reviewer, allowing every input to a running process."""

    def __init__(self) -> None:
        super().__init__(StandInModel())

    async def review(self, request_text: str, action: Mapping[str, Any], summary: str) -> Review:
        if action["tool"] == "process_write":
            return Review("allow", "its process was approved")
        return await super().review(request_text, action, summary)


@mutant(
    "process-start-approves-input",
    "approves input to a process because its start was approved, without asking the owner",
    "approvals.interactive-input",
)
def process_start_approves_input() -> Composer:
    """Automatic review allows every `process_write`."""
    return personal(reviewer=InputAllowed())


class CancelDropped(LedgerProxy):
    """A card is never cancelled: it keeps waiting when its source goes away."""

    async def move(
        self, card_id: str, to: ApprovalStatus, now: datetime, **fields: Any
    ) -> ApprovalCard | None:
        if to == ApprovalStatus.CANCELLED:
            return None
        moved: ApprovalCard | None = await self.inner.move(card_id, to, now, **fields)
        return moved


@mutant(
    "input-kept-waiting",
    "keeps input waiting for a process that ended, instead of cancelling it",
    "approvals.input-cancelled",
)
def input_kept_waiting() -> Composer:
    """The approval ledger drops every move of a card to `cancelled`."""
    return with_ledger(CancelDropped)


# --- automatic review -----------------------------------------------------------------------------


class ReviewOffByDefault(LedgerProxy):
    """A setting the owner never made reads as off."""

    async def review_settings(self) -> ReviewSettings:
        settings: ReviewSettings = await self.inner.review_settings()
        return settings if settings.explicit else settings.model_copy(update={"automatic_review": False})


@mutant(
    "review-off-by-default",
    "starts a new Personal space with automatic review off",
    "approvals.review-default-on",
)
def review_off_by_default() -> Composer:
    """The approval ledger reads the default automatic-review setting as off."""
    return with_ledger(ReviewOffByDefault)


class ReviewAlwaysOn(LedgerProxy):
    """The setting always reads as on."""

    async def review_settings(self) -> ReviewSettings:
        settings: ReviewSettings = await self.inner.review_settings()
        return settings.model_copy(update={"automatic_review": True})


@mutant(
    "review-off-ignored",
    "keeps reviewing (and approving) actions after the owner set automatic review off",
    "approvals.review-off",
)
def review_off_ignored() -> Composer:
    """The approval ledger reads automatic review as on whatever the owner set."""
    return with_ledger(ReviewAlwaysOn)


class ReviewRevisionUnchecked(LedgerProxy):
    """The automatic-review setting changes at whatever revision the write names."""

    async def set_review(
        self, automatic_review: bool, expected_revision: int, request_id: str, now: datetime
    ) -> ReviewSettings:
        current: ReviewSettings = await self.inner.review_settings()
        settings: ReviewSettings = await self.inner.set_review(
            automatic_review, current.revision, request_id, now
        )
        return settings


@mutant(
    "review-set-revision-unchecked",
    "changes the automatic-review setting whatever revision the write names, instead of stale_revision",
    "approvals.review-set-stale",
)
def review_set_revision_unchecked() -> Composer:
    """The approval ledger puts the setting's current revision over the one a write names."""
    return with_ledger(ReviewRevisionUnchecked)


class Recast(Reviewer):
    """The stand-in's reviewer, with one verdict turned into `allow`."""

    def __init__(self, verdict: str) -> None:
        super().__init__(StandInModel())
        self.verdict = verdict

    async def review(self, request_text: str, action: Mapping[str, Any], summary: str) -> Review:
        review = await super().review(request_text, action, summary)
        return Review("allow", review.reason) if review.verdict == self.verdict else review


@mutant(
    "review-denial-runs",
    "runs an action automatic review denied, as if it had allowed it",
    "approvals.review-deny",
)
def review_denial_runs() -> Composer:
    """The reviewer turns a `deny` verdict into `allow`."""
    return personal(reviewer=Recast("deny"))


@mutant(
    "review-failure-allows",
    "approves an action whose automatic review failed, instead of leaving it to the owner",
    "approvals.review-unavailable",
)
def review_failure_allows() -> Composer:
    """The reviewer turns an `unavailable` verdict (the model failed) into `allow`."""
    return personal(reviewer=Recast("unavailable"))


# --- notices and history --------------------------------------------------------------------------


@mutant(
    "approvals-notice-dropped",
    "sends no plugin/client/invalidate when a card changes status",
    "approvals.invalidation",
)
class ApprovalsNoticeDropped(Relay):
    """Every `plugin/client/invalidate` of topic `approvals` is dropped on its way to the client."""

    def from_host(self, line: bytes) -> None:
        message = message_of(line)
        if (
            message is not None
            and message.get("method") == "plugin/client/invalidate"
            and isinstance(message.get("params"), dict)
            and message["params"].get("topic") == "approvals"
        ):
            return
        self.to_client(line)


def _anchors_only(result: AgentsHistoryReadResult, params: Any) -> AgentsHistoryReadResult:
    first: dict[str, int] = {}
    for message in result.messages:
        if message.approval_id is not None:
            first[message.approval_id] = min(
                first.get(message.approval_id, message.message_seq), message.message_seq
            )
    messages = [
        message
        if message.approval_id is None or first[message.approval_id] == message.message_seq
        else HistoryMessage.model_validate({k: v for k, v in message.to_wire().items() if k != "approval_id"})
        for message in result.messages
    ]
    return result.model_copy(update={"messages": messages})


@mutant(
    "outcome-without-approval-id",
    "reports a card's outcome in a history message that does not name the card (no approval_id)",
    "approvals.history",
)
def outcome_without_approval_id() -> Composer:
    """The `agents.history.read` handler keeps `approval_id` only on the oldest message of each card in a
    page (its anchor): the outcome message no longer names its card."""
    return rewrite_result("agents.history.read", _anchors_only)
