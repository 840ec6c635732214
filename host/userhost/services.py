"""The host's own services behind the user-question and push methods (spec/schema/userhost/questions.schema.json,
push.schema.json). The durable providers plug in here; without one, nothing can have been asked or registered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wuu.generated.models import (
    PushRegisterParams,
    PushRegisterResult,
    PushUnregisterParams,
    PushUnregisterResult,
    UserHostErrorCode,
    UserQuestionAnswerParams,
    UserQuestionAnswerResult,
    UserQuestionDismissParams,
    UserQuestionDismissResult,
)

from .errors import UserHostError


@dataclass(frozen=True)
class Caller:
    """Who calls, as the client's transport established it."""

    transport: str
    """The transport's kind: `stdio`, `unix` or `grpc`."""
    device_id: str | None = None
    """The transport's authenticated device, or None: local transports authenticate no device."""


class HostServices(Protocol):
    """The providers of the host methods that are not about the connection itself."""

    async def answer_question(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        """`user_question/answer`."""

    async def dismiss_question(
        self, params: UserQuestionDismissParams, caller: Caller
    ) -> UserQuestionDismissResult:
        """`user_question/dismiss`."""

    async def register_push(self, params: PushRegisterParams, caller: Caller) -> PushRegisterResult:
        """`push/register`."""

    async def unregister_push(self, params: PushUnregisterParams, caller: Caller) -> PushUnregisterResult:
        """`push/unregister`."""


class NoHostServices:
    """A host without a question store or push registry: no question exists, and no device can register."""

    async def answer_question(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        raise UserHostError(UserHostErrorCode.NOT_FOUND, f"no question {params.question_id}")

    async def dismiss_question(
        self, params: UserQuestionDismissParams, caller: Caller
    ) -> UserQuestionDismissResult:
        raise UserHostError(UserHostErrorCode.NOT_FOUND, f"no question {params.question_id}")

    async def register_push(self, params: PushRegisterParams, caller: Caller) -> PushRegisterResult:
        raise UserHostError(UserHostErrorCode.PERMISSION_DENIED, _no_registry(caller))

    async def unregister_push(self, params: PushUnregisterParams, caller: Caller) -> PushUnregisterResult:
        raise UserHostError(UserHostErrorCode.PERMISSION_DENIED, _no_registry(caller))


def _no_registry(caller: Caller) -> str:
    if caller.device_id is None:
        return f"the {caller.transport} transport authenticates no device"
    return "this host keeps no push registrations"
