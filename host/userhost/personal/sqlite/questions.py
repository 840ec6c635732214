"""The owner's decisions on waiting-user questions in the bundled store (spec/schema/userhost/questions.schema.json):
one decision per question, idempotent by request ID, and the waiting task running again once none of its
questions is open. It runs on the database's writer, so two decisions at once resolve by commit order."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from wuu.generated.models import UserQuestionStatus

from ..provider import QuestionDecision
from ..refusals import QuestionAlreadyDecided, QuestionNotFound, RequestIdConflict
from ..stamps import rfc3339


def decide(
    connection: sqlite3.Connection,
    question_id: str,
    status: UserQuestionStatus,
    answer: str | None,
    request_id: str,
    now: datetime,
) -> QuestionDecision:
    """Save the owner's decision and update the original task (waiting → running once none of its questions
    is open); a retry of the saved decision replays it. QuestionNotFound; RequestIdConflict when the request
    ID was used for another question or decision; QuestionAlreadyDecided for another decision."""
    row = connection.execute(
        "SELECT task_id, status, answer, request_id, decided_at FROM questions WHERE question_id = ?",
        (question_id,),
    ).fetchone()
    if row is None:
        raise QuestionNotFound(f"no question {question_id}")
    task_id, saved, saved_answer, saved_request, decided_at = row
    used = connection.execute(
        "SELECT question_id FROM questions WHERE request_id = ?", (request_id,)
    ).fetchone()
    if used is not None and (used[0] != question_id or (saved, saved_answer) != (status.value, answer)):
        raise RequestIdConflict(f"request {request_id} was used for another decision")
    if saved is not None:
        if saved_request == request_id:
            return QuestionDecision(question_id, task_id, UserQuestionStatus(saved), decided_at, True)
        raise QuestionAlreadyDecided(f"question {question_id} is already {saved}")
    stamp = rfc3339(now)
    connection.execute(
        "UPDATE questions SET status = ?, answer = ?, request_id = ?, decided_at = ? WHERE question_id = ?",
        (status.value, answer, request_id, stamp, question_id),
    )
    still_open = connection.execute(
        "SELECT 1 FROM questions WHERE task_id = ? AND status IS NULL", (task_id,)
    ).fetchone()
    connection.execute(
        "UPDATE tasks SET status = CASE WHEN status = 'waiting_user' AND ? THEN 'running' ELSE status END, "
        "revision = revision + 1, updated_at = ? WHERE task_id = ?",
        (still_open is None, stamp, task_id),
    )
    return QuestionDecision(question_id, task_id, status, stamp, False)
