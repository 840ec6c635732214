"""Waiting-user questions and their decisions (`user_question/answer`, `user_question/dismiss`), and
device-bound push registrations (`push/register`, `push/unregister`), over real transports
(spec/schema/userhost/questions.schema.json, push.schema.json).

Covered, questions (raw JSON over the Unix socket): the stand-in agent's `/ask ` end to end (the question is
an assistant message with its `question_id`; the answer updates the original task, which runs again, and
opens no session or chat), also for an input whose client input ID has the longest allowed length;
dismissal; idempotence by `request_id` (`replayed`, the saved decision unchanged); another decision on a
decided question (`question_already_decided`); a request ID reused for another question or decision
(`request_id_conflict`); an unknown question (`not_found`); bad params naming their field; a waiting task
refusing completion (`waiting_user`) and the races answer vs result and answer vs dismissal, each in both
commit orders (driven in-process through the host's services so the order is deterministic: never
completed while still waiting, one decision only); decisions surviving a restart.

Covered, push: a transport without an authenticated device is refused (`permission_denied`); over a
session with an authenticated device (a `ClientSession` built as an authenticating transport would), a
registration's exact result (the token never returned) and row, replacement by the same device and app,
no effect on another device's registration, unregistering once, bad params, and durability across a
restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.host.userhost.personal.conftest import (
    Attach,
    Clock,
    Inputs,
    Space,
    StartSpace,
    call,
    error,
    result,
    send,
)
from wuu.generated.models import UserHostErrorCode as Code
from wuu.generated.models import (
    UserQuestionAnswerParams,
    UserQuestionAnswerResult,
    UserQuestionDismissParams,
    UserQuestionDismissResult,
    UserQuestionStatus,
)
from wuu.host.userhost.client import UserHostClient
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.personal.provider import Decision, TaskRecord, TaskStateError
from wuu.host.userhost.personal.tasks import TaskBoard
from wuu.host.userhost.protocol import Request
from wuu.host.userhost.services import Caller
from wuu.host.userhost.session import ClientSession

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MAX_TEXT = 64_000
ANSWERED, DISMISSED = UserQuestionStatus.ANSWERED, UserQuestionStatus.DISMISSED


def at(clock: Clock, second: int) -> str:
    """Set the held clock to 12:00:<second>; the stamp the store writes for it."""
    clock.now = START + timedelta(seconds=second)
    return f"2026-03-01T12:00:{second:02d}.000000Z"


@pytest.fixture
def clock() -> Clock:
    """The conftest's clock, held: every reading is the moment the test set."""
    held = Clock()
    held.step = timedelta(0)
    return held


def tasks_of(space: Space) -> TaskBoard:
    board = space.plugin.tasks
    assert board is not None
    return board


async def asked(space: Space, request_id: str = "dispatch-1", text: str = "Which city?") -> tuple[str, str]:
    """A task of the dispatch `request_id` asks the owner `text`, delivered: (task ID, question ID)."""
    board = tasks_of(space)
    task = await board.create(request_id)
    question_id = await board.ask(task.task_id, text)
    await space.idle()
    return task.task_id, question_id


async def answer(client: UserHostClient, question_id: str, request_id: str, text: str) -> dict[str, Any]:
    """`user_question/answer` as raw JSON; the whole response."""
    params = {"question_id": question_id, "request_id": request_id, "text": text}
    response: dict[str, Any] = await client.request("user_question/answer", params)
    return response


async def dismiss(client: UserHostClient, question_id: str, request_id: str) -> dict[str, Any]:
    response: dict[str, Any] = await client.request(
        "user_question/dismiss", {"question_id": question_id, "request_id": request_id}
    )
    return response


def decided(response: dict[str, Any]) -> dict[str, Any]:
    """The result of a successful host-method response."""
    assert "result" in response, response
    found: dict[str, Any] = response["result"]
    return found


def question_row(space: Space, question_id: str) -> tuple[Any, ...]:
    """(status, answer, request_id, decided_at) of a question in the store's file."""
    return space.rows(
        "SELECT status, answer, request_id, decided_at FROM questions WHERE question_id = ?", question_id
    )[0]


async def task_of(space: Space, task_id: str) -> TaskRecord:
    task = await tasks_of(space).task(task_id)
    assert task is not None
    return task


async def history(client: UserHostClient, session_id: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = result(
        await call(client, "agents.history.read", {"session_id": session_id})
    )["messages"]
    return messages


# --- the stand-in's /ask, end to end ---------------------------------------------------------------------


async def test_ask_end_to_end_the_answer_updates_the_original_task_and_opens_no_chat(
    space: Space, client: UserHostClient, inputs: Inputs
) -> None:
    asked_at = at(space.clock, 1)
    result(await send(client, space.main, inputs("/ask Which city?")))
    await space.idle()
    messages = await history(client, space.main)
    question_id = messages[0].get("question_id")
    assert isinstance(question_id, str)
    assert messages == [
        {
            "message_seq": 3,  # 2 is the agent's hidden record of its ask_owner call
            "role": "assistant",
            "text": "Which city?",
            "created_at": asked_at,
            "reaction_eligible": True,
            "reactions": {"revision": 0},
            "attachments": [],
            "question_id": question_id,
        },
        {
            "message_seq": 1,
            "role": "user",
            "text": "/ask Which city?",
            "created_at": asked_at,
            "reaction_eligible": False,
            "reactions": {"revision": 0},
            "attachments": [],
        },
    ]
    ask_request = (
        "ask-" + hashlib.sha256(b"in-1\nWhich city?").hexdigest()[:32]
    )  # the stand-in's task dispatch
    ((task_id, task_session),) = space.rows(
        "SELECT task_id, session_id FROM tasks WHERE request_id = ?", ask_request
    )
    waiting = await task_of(space, task_id)
    assert (waiting.status, waiting.decisions, waiting.session_id) == ("waiting_user", (), task_session)
    (delivery,) = await tasks_of(space).deliveries(task_id)
    assert (delivery.kind.value, delivery.status.value, delivery.history_seq, delivery.session_id) == (
        "question",
        "delivered",
        3,
        space.main,
    )
    sessions = sorted(space.rows("SELECT session_id, kind FROM sessions"))
    assert sessions == sorted([(space.main, "main"), (task_session, "task")])

    decided_at = at(space.clock, 2)
    assert decided(await answer(client, question_id, "answer-1", "Lisbon")) == {
        "question_id": question_id,
        "task_id": task_id,
        "status": "answered",
        "decided_at": decided_at,
        "replayed": False,
    }
    running = await task_of(space, task_id)
    assert running.status == "running"
    assert running.decisions == (Decision(question_id, ANSWERED, "Lisbon", decided_at),)
    assert running.revision == waiting.revision + 1
    assert question_row(space, question_id) == ("answered", "Lisbon", "answer-1", decided_at)
    await space.idle()
    # No execution chat: the same sessions, the same conversation, the same single task.
    assert sorted(space.rows("SELECT session_id, kind FROM sessions")) == sessions
    assert await history(client, space.main) == messages
    assert space.count("tasks") == 1


async def test_ask_from_an_input_with_the_longest_client_input_id_reaches_the_owner(
    space: Space, client: UserHostClient
) -> None:
    """A client input ID may have 128 characters; the question it asks is delivered all the same, and
    does not hold up later replies."""
    envelope = {"client_input_id": "c" * 128, "request_id": "req-long", "text": "/ask Which city?"}
    result(await send(client, space.main, envelope))
    await space.idle()
    later = await tasks_of(space).create("dispatch-later")
    await tasks_of(space).complete(later.task_id, "Later reply")
    await space.idle()
    assert space.rows("SELECT kind, status FROM task_deliveries ORDER BY created") == [
        ("question", "delivered"),
        ("result", "delivered"),
    ]
    texts = [(m["role"], m["text"], "question_id" in m) for m in await history(client, space.main)]
    assert texts == [
        ("assistant", "Later reply", False),
        ("assistant", "Which city?", True),
        ("user", "/ask Which city?", False),
    ]


# --- decisions ----------------------------------------------------------------------------------------------


async def test_a_dismissal_is_saved_and_the_task_runs_again(space: Space, client: UserHostClient) -> None:
    task_id, question_id = await asked(space)
    decided_at = at(space.clock, 1)
    assert decided(await dismiss(client, question_id, "dismiss-1")) == {
        "question_id": question_id,
        "task_id": task_id,
        "status": "dismissed",
        "decided_at": decided_at,
        "replayed": False,
    }
    task = await task_of(space, task_id)
    assert task.status == "running"
    assert task.decisions == (Decision(question_id, DISMISSED, None, decided_at),)
    assert question_row(space, question_id) == ("dismissed", None, "dismiss-1", decided_at)


async def test_a_task_with_two_open_questions_waits_until_both_are_decided(
    space: Space, client: UserHostClient
) -> None:
    board = tasks_of(space)
    task = await board.create("dispatch-1")
    first = await board.ask(task.task_id, "Which city?")
    second = await board.ask(task.task_id, "Which day?")
    await space.idle()
    decided(await answer(client, first, "answer-1", "Lisbon"))
    assert (await task_of(space, task.task_id)).status == "waiting_user"
    with pytest.raises(TaskStateError) as raised:
        await board.complete(task.task_id, "Booked")
    assert raised.value.reason == "waiting_user"
    decided(await dismiss(client, second, "dismiss-2"))
    assert (await task_of(space, task.task_id)).status == "running"
    await board.complete(task.task_id, "Booked")
    assert (await task_of(space, task.task_id)).status == "completed"


@pytest.mark.parametrize("method", ["answer", "dismiss"])
async def test_the_same_request_id_replays_the_saved_decision(
    space: Space, client: UserHostClient, method: str
) -> None:
    task_id, question_id = await asked(space)

    async def decide() -> dict[str, Any]:
        if method == "answer":
            return await answer(client, question_id, "decision-1", "Lisbon")
        return await dismiss(client, question_id, "decision-1")

    decided_at = at(space.clock, 1)
    first = decided(await decide())
    row = question_row(space, question_id)
    revision = (await task_of(space, task_id)).revision
    at(space.clock, 5)
    again = decided(await decide())
    assert again == {**first, "replayed": True}
    assert again["decided_at"] == decided_at
    assert question_row(space, question_id) == row
    assert (await task_of(space, task_id)).revision == revision  # nothing changed


async def test_another_decision_on_a_decided_question_is_question_already_decided(
    space: Space, client: UserHostClient
) -> None:
    task_id, question_id = await asked(space)
    decided(await answer(client, question_id, "answer-1", "Lisbon"))
    row = question_row(space, question_id)
    task = await task_of(space, task_id)
    error(await answer(client, question_id, "answer-2", "Porto"), Code.QUESTION_ALREADY_DECIDED)
    error(await answer(client, question_id, "answer-3", "Lisbon"), Code.QUESTION_ALREADY_DECIDED)
    error(await dismiss(client, question_id, "dismiss-4"), Code.QUESTION_ALREADY_DECIDED)
    assert question_row(space, question_id) == row
    assert await task_of(space, task_id) == task


async def test_a_request_id_reused_for_another_question_or_decision_is_a_conflict(
    space: Space, client: UserHostClient
) -> None:
    _, first = await asked(space, "dispatch-1")
    other_task, second = await asked(space, "dispatch-2", "Which day?")
    decided(await answer(client, first, "decision-1", "Lisbon"))
    error(await answer(client, second, "decision-1", "Lisbon"), Code.REQUEST_ID_CONFLICT)
    error(await dismiss(client, second, "decision-1"), Code.REQUEST_ID_CONFLICT)
    error(await answer(client, first, "decision-1", "Porto"), Code.REQUEST_ID_CONFLICT)
    error(await dismiss(client, first, "decision-1"), Code.REQUEST_ID_CONFLICT)
    assert question_row(space, second) == (None, None, None, None)
    assert (await task_of(space, other_task)).status == "waiting_user"
    assert question_row(space, first)[:3] == ("answered", "Lisbon", "decision-1")


async def test_an_unknown_question_is_not_found(space: Space, client: UserHostClient) -> None:
    await asked(space)
    error(await answer(client, "q_000000000000000000000000", "answer-1", "Lisbon"), Code.NOT_FOUND)
    error(await dismiss(client, "q_000000000000000000000000", "dismiss-1"), Code.NOT_FOUND)
    assert space.rows("SELECT status, request_id FROM questions") == [(None, None)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"request_id": "a-1", "text": "Lisbon"}, "question_id"),
        ({"question_id": "", "request_id": "a-1", "text": "Lisbon"}, "question_id"),
        ({"question_id": "QID", "text": "Lisbon"}, "request_id"),
        ({"question_id": "QID", "request_id": "a 1", "text": "Lisbon"}, "request_id"),
        ({"question_id": "QID", "request_id": "a-1"}, "text"),
        ({"question_id": "QID", "request_id": "a-1", "text": ""}, "text"),
        ({"question_id": "QID", "request_id": "a-1", "text": "€" * 21_333 + "ab"}, "text"),
        ({"question_id": "QID", "request_id": "a-1", "text": "x" * (MAX_TEXT + 1)}, "text"),
        ({"question_id": "QID", "request_id": "a-1", "text": "Lisbon", "task_id": "t"}, "task_id"),
    ],
    ids=[
        "no-question",
        "empty-question",
        "no-request",
        "bad-request",
        "no-text",
        "empty-text",
        "euro-64001-bytes",
        "ascii-64001",
        "extra",
    ],
)
async def test_bad_answer_params_are_invalid_params_naming_the_field(
    space: Space, client: UserHostClient, params: dict[str, Any], field: str
) -> None:
    _, question_id = await asked(space)
    sent = {key: question_id if value == "QID" else value for key, value in params.items()}
    error(await client.request("user_question/answer", sent), Code.INVALID_PARAMS, field)
    assert question_row(space, question_id) == (None, None, None, None)


async def test_an_answer_of_exactly_64000_utf8_bytes_is_saved(space: Space, client: UserHostClient) -> None:
    _, question_id = await asked(space)
    text = "😀" * 15_999 + "€" + "a"  # 63,996 + 3 + 1 bytes
    assert len(text.encode("utf-8")) == MAX_TEXT
    decided(await answer(client, question_id, "answer-1", text))
    assert question_row(space, question_id)[:2] == ("answered", text)


async def test_bad_dismiss_params_are_invalid_params_naming_the_field(
    space: Space, client: UserHostClient
) -> None:
    _, question_id = await asked(space)
    error(
        await client.request(
            "user_question/dismiss", {"question_id": question_id, "request_id": "d", "text": "x"}
        ),
        Code.INVALID_PARAMS,
        "text",
    )
    error(
        await client.request("user_question/dismiss", {"question_id": question_id}),
        Code.INVALID_PARAMS,
        "request_id",
    )
    assert question_row(space, question_id) == (None, None, None, None)


# --- the races ------------------------------------------------------------------------------------------------


async def test_a_waiting_task_refuses_a_result(space: Space) -> None:
    task_id, _ = await asked(space)
    before = await task_of(space, task_id)
    with pytest.raises(TaskStateError) as raised:
        await tasks_of(space).complete(task_id, "Lisbon, I guess")
    assert raised.value.reason == "waiting_user"
    assert await task_of(space, task_id) == before
    assert [d.kind.value for d in await tasks_of(space).deliveries(task_id)] == ["question"]


def never_completed_while_waiting(space: Space) -> None:
    """No task is completed while one of its questions is still open."""
    assert (
        space.rows(
            "SELECT t.task_id FROM tasks t JOIN questions q ON q.task_id = t.task_id "
            "WHERE t.status = 'completed' AND q.status IS NULL"
        )
        == []
    )


@pytest.mark.parametrize("decision", ["answer", "dismiss"])
@pytest.mark.parametrize("first", ["decision", "result"])
async def test_a_decision_and_a_result_submitted_at_once_never_complete_a_waiting_task(
    space: Space, decision: str, first: str
) -> None:
    """Both are queued to the store in the order of `asyncio.gather`'s arguments (each queues its write
    on its first step), so each commit order is driven deterministically."""
    task_id, question_id = await asked(space)
    caller = Caller("unix")
    services = space.host.services
    decided_at = at(space.clock, 1)

    def deciding() -> Awaitable[UserQuestionAnswerResult | UserQuestionDismissResult]:
        if decision == "answer":
            return services.user_question_answer(
                UserQuestionAnswerParams(question_id=question_id, request_id="decision-1", text="Lisbon"),
                caller,
            )
        return services.user_question_dismiss(
            UserQuestionDismissParams(question_id=question_id, request_id="decision-1"), caller
        )

    completing = tasks_of(space).complete(task_id, "Booked in Lisbon")
    decision_outcome: object
    result_outcome: object
    if first == "decision":
        decision_outcome, result_outcome = await asyncio.gather(
            deciding(), completing, return_exceptions=True
        )
    else:
        result_outcome, decision_outcome = await asyncio.gather(
            completing, deciding(), return_exceptions=True
        )
    await space.idle()

    assert isinstance(decision_outcome, UserQuestionAnswerResult | UserQuestionDismissResult), (
        decision_outcome
    )
    assert decision_outcome.to_wire() == {
        "question_id": question_id,
        "task_id": task_id,
        "status": "answered" if decision == "answer" else "dismissed",
        "decided_at": decided_at,
        "replayed": False,
    }
    task = await task_of(space, task_id)
    status = ANSWERED if decision == "answer" else DISMISSED
    assert task.decisions == (
        Decision(question_id, status, "Lisbon" if decision == "answer" else None, decided_at),
    )
    kinds = [d.kind.value for d in await tasks_of(space).deliveries(task_id)]
    if first == "decision":  # the task ran again, then its result was accepted
        assert isinstance(result_outcome, str), result_outcome
        assert (task.status, task.outcome) == ("completed", "Booked in Lisbon")
        assert kinds == ["question", "result"]
    else:  # the result came while the task still waited: refused, the decision then applied
        assert isinstance(result_outcome, TaskStateError) and result_outcome.reason == "waiting_user"
        assert (task.status, task.outcome) == ("running", None)
        assert kinds == ["question"]
    never_completed_while_waiting(space)


@pytest.mark.parametrize("first", ["answer", "dismiss"])
async def test_two_decisions_at_once_save_only_the_first(space: Space, first: str) -> None:
    task_id, question_id = await asked(space)
    caller = Caller("unix")
    services = space.host.services
    answering = services.user_question_answer(
        UserQuestionAnswerParams(question_id=question_id, request_id="answer-1", text="Lisbon"), caller
    )
    dismissing = services.user_question_dismiss(
        UserQuestionDismissParams(question_id=question_id, request_id="dismiss-1"), caller
    )
    winner: object
    loser: object
    if first == "answer":
        winner, loser = await asyncio.gather(answering, dismissing, return_exceptions=True)
    else:
        winner, loser = await asyncio.gather(dismissing, answering, return_exceptions=True)
    assert isinstance(winner, UserQuestionAnswerResult | UserQuestionDismissResult), winner
    assert winner.to_wire()["status"] == ("answered" if first == "answer" else "dismissed")
    assert isinstance(loser, UserHostError) and loser.code is Code.QUESTION_ALREADY_DECIDED
    expected = ("answered", "Lisbon", "answer-1") if first == "answer" else ("dismissed", None, "dismiss-1")
    assert question_row(space, question_id)[:3] == expected
    assert len((await task_of(space, task_id)).decisions) == 1


# --- restart -------------------------------------------------------------------------------------------------


async def test_decisions_survive_a_restart(start_space: StartSpace, attach: Attach, clock: Clock) -> None:
    first = await start_space()
    client = await attach(first)
    task_id, question_id = await asked(first)
    decided_at = at(clock, 1)
    saved = decided(await answer(client, question_id, "answer-1", "Lisbon"))
    await first.host.close()

    at(clock, 2)
    second = await start_space()
    client = await attach(second)
    task = await task_of(second, task_id)
    assert (task.status, task.decisions) == (
        "running",
        (Decision(question_id, ANSWERED, "Lisbon", decided_at),),
    )
    assert decided(await answer(client, question_id, "answer-1", "Lisbon")) == {**saved, "replayed": True}
    error(await dismiss(client, question_id, "dismiss-2"), Code.QUESTION_ALREADY_DECIDED)
    messages = await history(client, second.main)
    assert [(m["text"], m.get("question_id")) for m in messages] == [("Which city?", question_id)]


# --- push ----------------------------------------------------------------------------------------------------


class Device:
    """A client session with an authenticated device, as an authenticating transport would make it."""

    def __init__(self, space: Space, device_id: str) -> None:
        self.sent: list[dict[str, Any]] = []
        self.session = ClientSession(space.host, "https", self.sent.append, lambda: None, device_id=device_id)
        self._ids = 0

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result of a request; UserHostError for its error."""
        self._ids += 1
        return await self.session.call(Request(self._ids, method, params))


async def device(space: Space, device_id: str) -> Device:
    opened = Device(space, device_id)
    await opened.request(
        "initialize", {"protocol_version": 1, "client_info": {"name": "phone", "version": "1"}}
    )
    return opened


def registrations(space: Space) -> list[tuple[Any, ...]]:
    return space.rows(
        "SELECT registration_id, device_id, provider, app_id, token, registered_at FROM push_registrations "
        "ORDER BY device_id, app_id"
    )


async def test_push_over_the_unix_socket_is_permission_denied(space: Space, client: UserHostClient) -> None:
    error(
        await client.request("push/register", {"provider": "apns", "app_id": "dev.wuu.app", "token": "tok"}),
        Code.PERMISSION_DENIED,
    )
    error(await client.request("push/unregister", {"registration_id": "push_x"}), Code.PERMISSION_DENIED)
    assert registrations(space) == []


async def test_a_device_registers_and_the_token_is_never_returned(space: Space) -> None:
    phone = await device(space, "dev-1")
    registered_at = at(space.clock, 1)
    token = "apns-token-0123456789abcdef"
    registered = await phone.request(
        "push/register", {"provider": "apns", "app_id": "dev.wuu.app", "token": token}
    )
    registration_id = registered["registration_id"]
    assert isinstance(registration_id, str) and registration_id
    assert registered == {
        "registration_id": registration_id,
        "device_id": "dev-1",
        "provider": "apns",
        "registered_at": registered_at,
    }
    assert token not in json.dumps(registered)
    assert registrations(space) == [(registration_id, "dev-1", "apns", "dev.wuu.app", token, registered_at)]


async def test_registering_again_from_the_same_device_and_app_replaces_only_that_registration(
    space: Space,
) -> None:
    phone, tablet = await device(space, "dev-1"), await device(space, "dev-2")
    at(space.clock, 1)
    old = await phone.request("push/register", {"provider": "apns", "app_id": "dev.wuu.app", "token": "old"})
    other_app = await phone.request(
        "push/register", {"provider": "apns", "app_id": "dev.wuu.beta", "token": "b"}
    )
    theirs = await tablet.request("push/register", {"provider": "fcm", "app_id": "dev.wuu.app", "token": "t"})
    replaced_at = at(space.clock, 2)
    new = await phone.request("push/register", {"provider": "fcm", "app_id": "dev.wuu.app", "token": "new"})
    assert new["registration_id"] != old["registration_id"]
    assert (new["provider"], new["registered_at"]) == ("fcm", replaced_at)
    stamp = "2026-03-01T12:00:01.000000Z"
    assert registrations(space) == [
        (new["registration_id"], "dev-1", "fcm", "dev.wuu.app", "new", replaced_at),
        (other_app["registration_id"], "dev-1", "apns", "dev.wuu.beta", "b", stamp),
        (theirs["registration_id"], "dev-2", "fcm", "dev.wuu.app", "t", stamp),
    ]
    # The replaced registration is gone.
    assert await phone.request("push/unregister", {"registration_id": old["registration_id"]}) == {
        "unregistered": False
    }


async def test_a_device_unregisters_only_its_own_registration_once(space: Space) -> None:
    phone, stranger = await device(space, "dev-1"), await device(space, "dev-2")
    mine = await phone.request("push/register", {"provider": "apns", "app_id": "dev.wuu.app", "token": "tok"})
    kept = registrations(space)
    unregister = {"registration_id": mine["registration_id"]}
    assert await stranger.request("push/unregister", unregister) == {"unregistered": False}
    assert registrations(space) == kept
    assert await phone.request("push/unregister", unregister) == {"unregistered": True}
    assert registrations(space) == []
    assert await phone.request("push/unregister", unregister) == {"unregistered": False}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"provider": "webpush", "app_id": "dev.wuu.app", "token": "tok"}, "provider"),
        ({"provider": "apns", "app_id": "", "token": "tok"}, "app_id"),
        ({"provider": "apns", "app_id": "dev.wuu.app", "token": ""}, "token"),
        ({"provider": "apns", "app_id": "dev.wuu.app", "token": "t" * 4097}, "token"),
        ({"provider": "apns", "app_id": "dev.wuu.app"}, "token"),
    ],
    ids=["provider", "empty-app", "empty-token", "long-token", "no-token"],
)
async def test_bad_push_params_are_invalid_params_naming_the_field(
    space: Space, params: dict[str, Any], field: str
) -> None:
    phone = await device(space, "dev-1")
    with pytest.raises(UserHostError) as raised:
        await phone.request("push/register", params)
    assert (raised.value.code, raised.value.field) == (Code.INVALID_PARAMS, field)
    assert registrations(space) == []


async def test_push_registrations_survive_a_restart(start_space: StartSpace, clock: Clock) -> None:
    first = await start_space()
    registered_at = at(clock, 1)
    mine = await (await device(first, "dev-1")).request(
        "push/register", {"provider": "fcm", "app_id": "dev.wuu.app", "token": "tok"}
    )
    await first.host.close()

    at(clock, 2)
    second = await start_space()
    assert registrations(second) == [
        (mine["registration_id"], "dev-1", "fcm", "dev.wuu.app", "tok", registered_at)
    ]
    phone = await device(second, "dev-1")
    assert await phone.request("push/unregister", {"registration_id": mine["registration_id"]}) == {
        "unregistered": True
    }
    assert registrations(second) == []
