"""The `approvals.*` methods of the Personal plugin (spec/schema/userhost/approvals.schema.json), on the space's
approval service. The host has validated each call's params against the spec before a handler runs; the
handlers check the session and the call's live authority, and map the store's refusals to wire codes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from wuu.generated.models import (
    ApprovalChoice,
    ApprovalsDecideParams,
    ApprovalsDecideResult,
    ApprovalsListParams,
    ApprovalsListResult,
    ApprovalsReviewReadParams,
    ApprovalsReviewReadResult,
    ApprovalsReviewSetParams,
    ApprovalsReviewSetResult,
    ApprovalsRulesDeleteParams,
    ApprovalsRulesDeleteResult,
    ApprovalsRulesListParams,
    ApprovalsRulesListResult,
    ApprovalsRulesPreviewParams,
    ApprovalsRulesPreviewResult,
    ApprovalsRulesSaveParams,
    ApprovalsRulesSaveResult,
    ApprovalsRulesUpdateParams,
    ApprovalsRulesUpdateResult,
    UserHostErrorCode,
)

from ..errors import UserHostError
from ..plugins import PluginCall
from .approvals.service import ActionRefused, ApprovalService
from .durably import durably
from .provider import SessionDomain
from .wire_errors import refusals_as_wire_errors


@contextmanager
def _no_rule() -> Iterator[None]:
    """A card whose action no rule may handle, as the client's error."""
    try:
        yield
    except ActionRefused as refused:
        raise UserHostError(UserHostErrorCode.INVALID_PARAMS, str(refused), "params.card_id") from refused


class ApprovalMethods:
    """The plugin's approval methods; the plugin gives them its store and approval service."""

    store: SessionDomain
    approvals: ApprovalService

    async def _main(self, session_id: str) -> str:
        """The session ID if it is the main conversation; `not_found` for any other. (The store checks
        that the main conversation still exists in the same step as the call's own work.)"""
        main = self.store.main_session_id
        if session_id != main:
            raise UserHostError(
                UserHostErrorCode.NOT_FOUND, f"session {session_id} is not this space's main conversation"
            )
        return main

    async def approvals_list(self, params: ApprovalsListParams, call: PluginCall) -> ApprovalsListResult:
        session_id = await self._main(params.session_id)
        with refusals_as_wire_errors():
            cards = await self.approvals.listed(session_id, params.card_ids)
        return ApprovalsListResult(cards=cards)

    async def approvals_decide(
        self, params: ApprovalsDecideParams, call: PluginCall
    ) -> ApprovalsDecideResult:
        session_id = await self._main(params.session_id)
        if call.revoked.is_set():
            raise UserHostError(
                UserHostErrorCode.CANCELLED,
                "an approval needs the owner's live call, and this one was revoked",
            )
        with refusals_as_wire_errors():
            card = await durably(
                self.approvals.decide(
                    session_id,
                    params.card_id,
                    params.digest,
                    params.expected_revision,
                    params.decision == ApprovalChoice.ALLOW_ONCE,
                    params.request_id,
                )
            )
        return ApprovalsDecideResult(card=card)

    async def approvals_rules_preview(
        self, params: ApprovalsRulesPreviewParams, call: PluginCall
    ) -> ApprovalsRulesPreviewResult:
        session_id = await self._main(params.session_id)
        with refusals_as_wire_errors(), _no_rule():
            preview = await self.approvals.preview_rule(
                session_id, params.card_id, params.digest, params.expected_revision
            )
        return ApprovalsRulesPreviewResult(preview=preview)

    async def approvals_rules_save(
        self, params: ApprovalsRulesSaveParams, call: PluginCall
    ) -> ApprovalsRulesSaveResult:
        session_id = await self._main(params.session_id)
        with refusals_as_wire_errors(), _no_rule():
            rule = await durably(
                self.approvals.save_rule(
                    session_id, params.card_id, params.preview_digest, params.mode, params.request_id
                )
            )
        return ApprovalsRulesSaveResult(rule=rule)

    async def approvals_rules_list(
        self, params: ApprovalsRulesListParams, call: PluginCall
    ) -> ApprovalsRulesListResult:
        return ApprovalsRulesListResult(rules=await self.approvals.rules())

    async def approvals_rules_update(
        self, params: ApprovalsRulesUpdateParams, call: PluginCall
    ) -> ApprovalsRulesUpdateResult:
        with refusals_as_wire_errors():
            rule = await durably(
                self.approvals.update_rule(
                    params.rule_id, params.expected_revision, params.mode, params.paused, params.request_id
                )
            )
        return ApprovalsRulesUpdateResult(rule=rule)

    async def approvals_rules_delete(
        self, params: ApprovalsRulesDeleteParams, call: PluginCall
    ) -> ApprovalsRulesDeleteResult:
        with refusals_as_wire_errors():
            rule_id = await durably(
                self.approvals.delete_rule(params.rule_id, params.expected_revision, params.request_id)
            )
        return ApprovalsRulesDeleteResult(rule_id=rule_id)

    async def approvals_review_read(
        self, params: ApprovalsReviewReadParams, call: PluginCall
    ) -> ApprovalsReviewReadResult:
        return ApprovalsReviewReadResult(settings=await self.approvals.review_settings())

    async def approvals_review_set(
        self, params: ApprovalsReviewSetParams, call: PluginCall
    ) -> ApprovalsReviewSetResult:
        with refusals_as_wire_errors():
            settings = await durably(
                self.approvals.set_review(
                    params.automatic_review, params.expected_revision, params.request_id
                )
            )
        return ApprovalsReviewSetResult(settings=settings)
