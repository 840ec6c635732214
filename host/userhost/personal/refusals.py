"""What a `session.domain` provider refuses: one plain exception per rule of the stored state.

A provider raises these from its rules (the bundled one from inside its SQL transactions); they carry no wire
code. The Personal plugin, its agent step and the host's question service turn them into the user host's
errors in one place (`wire_errors.py`), so the rules themselves stay testable on a bare connection.
"""

from __future__ import annotations


class Refusal(Exception):
    """The stored state refuses the call: the class names the rule, the message says what was refused."""


class MainSessionMissing(Refusal):
    """The space's main conversation is gone from the store; it is never recreated."""


class SessionNotFound(Refusal):
    """No such session in this space."""


class RequestIdConflict(Refusal):
    """The business request ID was already used for another input, reaction or decision."""


class ClientInputIdTaken(Refusal):
    """The client input ID already names another input of the session."""


class NotReactionTarget(Refusal):
    """The message is not one the actor may react to."""


class StaleRevision(Refusal):
    """The write expected another revision (or digest) than the message, card, rule or setting is at."""


class QuestionNotFound(Refusal):
    """No such question."""


class QuestionAlreadyDecided(Refusal):
    """The question already has another decision."""


class CardNotFound(Refusal):
    """No such approval card in this session."""


class RuleNotFound(Refusal):
    """No such approval rule in this space."""
