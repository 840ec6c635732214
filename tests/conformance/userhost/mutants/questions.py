"""Mutants of `user_question/answer` and `user_question/dismiss`: unknown questions, one decision each."""

from __future__ import annotations

from datetime import UTC, datetime

from wuu.generated.models import (
    UserHostErrorCode,
    UserQuestionAnswerParams,
    UserQuestionAnswerResult,
    UserQuestionDismissParams,
    UserQuestionDismissResult,
    UserQuestionStatus,
)
from wuu.host.userhost.authority import Composer
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.services import Caller

from . import mutant
from .harness import ServicesProxy, wrap_services


def _decided(params: UserQuestionAnswerParams) -> UserQuestionAnswerResult:
    """A made-up fresh `answered` decision of the question."""
    return UserQuestionAnswerResult(
        question_id=params.question_id,
        task_id="mutant-task",
        status=UserQuestionStatus.ANSWERED,
        decided_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        replayed=False,
    )


class AnswersAnything(ServicesProxy):
    """An answer to a question that does not exist is saved as if it did."""

    async def user_question_answer(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        try:
            result: UserQuestionAnswerResult = await self.inner.user_question_answer(params, caller)
        except UserHostError as error:
            if error.code is not UserHostErrorCode.NOT_FOUND:
                raise
            return _decided(params)
        return result


@mutant(
    "unknown-question-answered",
    "answers user_question/answer of a question that does not exist with a decision instead of not_found",
    "questions.unknown-not-found",
)
def unknown_question_answered() -> Composer:
    """The host's question service answers `not_found` refusals with a made-up `answered` decision."""
    return wrap_services(AnswersAnything)


class DecidesAgain(ServicesProxy):
    """A question already decided takes another answer."""

    async def user_question_answer(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        try:
            result: UserQuestionAnswerResult = await self.inner.user_question_answer(params, caller)
        except UserHostError as error:
            if error.code is not UserHostErrorCode.QUESTION_ALREADY_DECIDED:
                raise
            return _decided(params)
        return result


@mutant(
    "question-answered-twice",
    "takes a second answer to a question already decided instead of answering question_already_decided",
    "questions.decide-once",
)
def question_answered_twice() -> Composer:
    """The host's question service answers `question_already_decided` refusals of an answer with a made-up
    fresh `answered` decision."""
    return wrap_services(DecidesAgain)


class NeverReplayed(ServicesProxy):
    """Every decision says it is new."""

    async def user_question_answer(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        result: UserQuestionAnswerResult = await self.inner.user_question_answer(params, caller)
        return result.model_copy(update={"replayed": False})

    async def user_question_dismiss(
        self, params: UserQuestionDismissParams, caller: Caller
    ) -> UserQuestionDismissResult:
        result: UserQuestionDismissResult = await self.inner.user_question_dismiss(params, caller)
        return result.model_copy(update={"replayed": False})


@mutant(
    "decision-retry-not-replayed",
    "answers a retried decision (same request ID) with replayed false",
    "questions.replayed",
)
def decision_retry_not_replayed() -> Composer:
    """The host's question service answers every decision, a retry's included, with `replayed: false`."""
    return wrap_services(NeverReplayed)


class ConflictsDecided(ServicesProxy):
    """A request ID used for another question or decision saves a made-up decision."""

    async def user_question_answer(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        try:
            result: UserQuestionAnswerResult = await self.inner.user_question_answer(params, caller)
        except UserHostError as error:
            if error.code is not UserHostErrorCode.REQUEST_ID_CONFLICT:
                raise
            return _decided(params)
        return result


@mutant(
    "decision-request-id-conflict-decided",
    "answers an answer whose request ID belongs to another decision with a decision of its own",
    "questions.request-id-conflict",
)
def decision_request_id_conflict_decided() -> Composer:
    """The host's question service answers `request_id_conflict` refusals of an answer with a made-up fresh
    `answered` decision."""
    return wrap_services(ConflictsDecided)
