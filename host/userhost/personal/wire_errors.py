"""The store's refusals as the user host's errors: the one place a rule of the Personal store gets its wire code
(spec/schema/userhost/envelope.schema.json names the codes, spec/schema/userhost/personal.schema.json and
questions.schema.json and approvals.schema.json the methods that answer them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from wuu.generated.models import UserHostErrorCode

from ..errors import UserHostError
from .refusals import (
    CardNotFound,
    ClientInputIdTaken,
    MainSessionMissing,
    NotReactionTarget,
    QuestionAlreadyDecided,
    QuestionNotFound,
    Refusal,
    RequestIdConflict,
    RuleNotFound,
    SessionNotFound,
    StaleRevision,
)

CODES: dict[type[Refusal], tuple[UserHostErrorCode, str | None]] = {
    MainSessionMissing: (UserHostErrorCode.MAIN_SESSION_MISSING, None),
    SessionNotFound: (UserHostErrorCode.NOT_FOUND, None),
    RequestIdConflict: (UserHostErrorCode.REQUEST_ID_CONFLICT, None),
    ClientInputIdTaken: (UserHostErrorCode.INVALID_PARAMS, "user_input.client_input_id"),
    NotReactionTarget: (UserHostErrorCode.NOT_REACTION_TARGET, None),
    StaleRevision: (UserHostErrorCode.STALE_REVISION, None),
    QuestionNotFound: (UserHostErrorCode.NOT_FOUND, None),
    QuestionAlreadyDecided: (UserHostErrorCode.QUESTION_ALREADY_DECIDED, None),
    CardNotFound: (UserHostErrorCode.NOT_FOUND, None),
    RuleNotFound: (UserHostErrorCode.NOT_FOUND, None),
}
"""Each refusal's code, and the params field it names (for `invalid_params`)."""


def wire_error(refusal: Refusal) -> UserHostError:
    """The user-host error a client gets for the refusal: its code, field and the refusal's own message."""
    code, field = CODES[type(refusal)]
    return UserHostError(code, str(refusal), field)


@contextmanager
def refusals_as_wire_errors() -> Iterator[None]:
    """Raise a refusal of the calls inside as its user-host error."""
    try:
        yield
    except Refusal as refusal:
        raise wire_error(refusal) from refusal
