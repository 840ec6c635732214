"""Cases of `user_question/answer` and `user_question/dismiss`: an unknown question, and one decision per
question, idempotent by request ID.

The spec gives a client no way to raise a question: the host's agent asks one in the main conversation
(an assistant message with `question_id`). The cases ask for one with an input starting `/ask ` (the bundled
stand-in agent asks the rest of the text) and skip when no question appears within the reply timeout."""

from __future__ import annotations

from typing import Any

from ..conversation import poll
from ..personal import open_main, send
from ..session import HostSession
from ..suite import USERHOST

ANSWER = "user_question/answer"
DISMISS = "user_question/dismiss"
UNKNOWN = "conformance-no-such-question"


async def ask(host: HostSession, session_id: str, text: str) -> str:
    """Ask the host's agent to ask the owner `text`; the question's ID once it is in the history (skips when
    no question appears within the reply timeout)."""
    asked = (await send(host, f"/ask {text}"))["history_seq"] or 0

    def question(messages: list[dict[str, Any]]) -> str | None:
        for message in messages:
            if (
                message["message_seq"] > asked
                and message["role"] == "assistant"
                and message.get("question_id")
            ):
                return str(message["question_id"])
        return None

    found = await poll(host, session_id, question)
    if found is None:
        host.skip(f"no assistant message asked {text!r} (with a question_id) within {host.timeout:g} s")
    return str(found)


def answer(question_id: str, request_id: str, text: str = "Lisbon") -> dict[str, Any]:
    return {"question_id": question_id, "request_id": request_id, "text": text}


def dismissal(question_id: str, request_id: str) -> dict[str, Any]:
    return {"question_id": question_id, "request_id": request_id}


def expect_decided(
    host: HostSession, result: dict[str, Any], question_id: str, status: str, what: str
) -> None:
    host.expect(
        (result["question_id"], result["status"], result["replayed"]) == (question_id, status, False),
        f"{what} answered {result}: not a new {status} decision of {question_id}",
    )


@USERHOST.case("questions.unknown-not-found")
async def unknown_not_found(host: HostSession) -> None:
    """user_question/answer and user_question/dismiss of a question that does not exist get not_found (a host
    method: it holds with or without wuu.personal)."""
    await host.initialize()
    await host.error(ANSWER, answer(UNKNOWN, "unknown-1"), "not_found")
    await host.error(DISMISS, dismissal(UNKNOWN, "unknown-2"), "not_found")


@USERHOST.case("questions.decide-once", "questions.replayed")
async def answered_once(host: HostSession) -> None:
    """An answer saves the decision `answered` for the asking task; its retry (same request ID) returns it
    unchanged with replayed true; another answer or a dismissal with another request ID gets
    question_already_decided."""
    session_id = await open_main(host)
    question_id = await ask(host, session_id, "Which city?")
    first = await host.ok(ANSWER, answer(question_id, "answer-1"))
    expect_decided(host, first, question_id, "answered", ANSWER)
    again = await host.ok(ANSWER, answer(question_id, "answer-1"))
    host.expect(again == {**first, "replayed": True}, f"the retry answered {again}, not {first} replayed")
    await host.error(ANSWER, answer(question_id, "answer-2", "Porto"), "question_already_decided")
    await host.error(ANSWER, answer(question_id, "answer-3"), "question_already_decided")
    await host.error(DISMISS, dismissal(question_id, "dismiss-4"), "question_already_decided")
    last = await host.ok(ANSWER, answer(question_id, "answer-1"))
    host.expect(last == again, f"the refused decisions changed the saved one: {last}")


@USERHOST.case("questions.decide-once", "questions.replayed")
async def dismissed_once(host: HostSession) -> None:
    """A dismissal saves the decision `dismissed`; its retry returns it with replayed true; an answer or
    another dismissal with another request ID gets question_already_decided."""
    session_id = await open_main(host)
    question_id = await ask(host, session_id, "Which day?")
    first = await host.ok(DISMISS, dismissal(question_id, "dismiss-1"))
    expect_decided(host, first, question_id, "dismissed", DISMISS)
    again = await host.ok(DISMISS, dismissal(question_id, "dismiss-1"))
    host.expect(again == {**first, "replayed": True}, f"the retry answered {again}, not {first} replayed")
    await host.error(ANSWER, answer(question_id, "answer-2"), "question_already_decided")
    await host.error(DISMISS, dismissal(question_id, "dismiss-3"), "question_already_decided")


@USERHOST.case("questions.request-id-conflict")
async def request_id_conflict(host: HostSession) -> None:
    """A decision's request ID sent for another question, or for another decision of its question (another
    answer text, a dismissal), gets request_id_conflict; the other question stays open."""
    session_id = await open_main(host)
    first = await ask(host, session_id, "Which city?")
    second = await ask(host, session_id, "Which day?")
    await host.ok(ANSWER, answer(first, "decision-1"))
    await host.error(ANSWER, answer(second, "decision-1"), "request_id_conflict")
    await host.error(DISMISS, dismissal(second, "decision-1"), "request_id_conflict")
    await host.error(ANSWER, answer(first, "decision-1", "Porto"), "request_id_conflict")
    await host.error(DISMISS, dismissal(first, "decision-1"), "request_id_conflict")
    still_open = await host.ok(ANSWER, answer(second, "decision-2"))
    expect_decided(host, still_open, second, "answered", "an answer to the other question")
