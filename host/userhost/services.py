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
from wuu.generated.servers import PushServer, UserQuestionServer

from .errors import UserHostError


@dataclass(frozen=True)
class Caller:
    """Who calls, as the client's transport established it."""

    transport: str
    """The transport's kind: `stdio`, `unix` or `grpc`."""
    device_id: str | None = None
    """The transport's authenticated device, or None: local transports authenticate no device."""


class HostServices(UserQuestionServer[Caller], PushServer[Caller], Protocol):
    """The providers of the host methods that are not about the connection itself: the catalog's
    `user_question` and `push` services, each method called with the request's `Caller`."""


class NoHostServices(HostServices):
    """A host without a question store or push registry: no question exists, and no device can register."""

    async def user_question_answer(
        self, params: UserQuestionAnswerParams, caller: Caller
    ) -> UserQuestionAnswerResult:
        raise UserHostError(UserHostErrorCode.NOT_FOUND, f"no question {params.question_id}")

    async def user_question_dismiss(
        self, params: UserQuestionDismissParams, caller: Caller
    ) -> UserQuestionDismissResult:
        raise UserHostError(UserHostErrorCode.NOT_FOUND, f"no question {params.question_id}")

    async def push_register(self, params: PushRegisterParams, caller: Caller) -> PushRegisterResult:
        raise UserHostError(UserHostErrorCode.PERMISSION_DENIED, _no_registry(caller))

    async def push_unregister(self, params: PushUnregisterParams, caller: Caller) -> PushUnregisterResult:
        raise UserHostError(UserHostErrorCode.PERMISSION_DENIED, _no_registry(caller))


def _no_registry(caller: Caller) -> str:
    if caller.device_id is None:
        return f"the {caller.transport} transport authenticates no device"
    return "this host keeps no push registrations"
