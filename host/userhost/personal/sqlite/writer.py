"""The store's writer process: it owns the one connection that writes the SQLite file and commits what it is
sent in groups, so that no write of the store holds the host's interpreter lock.

    python -m wuu.host.userhost.personal.sqlite.writer

The host (`database.Database`) starts it and talks to it over its standard input and output in frames: a
4-byte big-endian length, then a pickle. The first frame sets the writer up: the host's `sys.path`, the
file's path, and the pickle of the function that prepares a connection (or None). Each later frame is a list
of writes, each `(ident, function, args, kwargs)`: a module-level function of the connection, sent by
reference, and its arguments. The writer runs every write of the frames it has received at the moment in one
transaction, each inside its own savepoint (a write that raises is rolled back alone), commits, and only then
answers with one frame: the list of `(ident, result, error)` of that transaction. So a write is durable
before its answer leaves, and each answer frame is one transaction.

At the end of its input the writer commits what it has and exits; a frame cut short (its host was killed
while sending it) was never answered, and is dropped. A host killed while it is answered leaves no one to
answer: the writer commits the whole frames it was sent, quietly, to the end of its input. It runs in a
session of its own, so a signal to the host's process group reaches the host, which closes it in order.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .database import connect
from .frames import HEADER, Frames

MAX_GROUP = 256
"""The most writes one transaction commits (a longer frame is committed whole)."""

Write = tuple[int, Callable[..., Any], Sequence[Any], Mapping[str, Any]]
Outcome = tuple[int, Any, BaseException | None]


def commit(connection: sqlite3.Connection, group: Sequence[Write]) -> list[Outcome]:
    """Run the group's writes in one transaction and commit it; each write's outcome."""
    outcomes: list[Outcome] = []
    try:
        connection.execute("BEGIN IMMEDIATE")
        if len(group) == 1:  # alone in its transaction: a failure rolls the transaction back
            ident, write, args, kwargs = group[0]
            try:
                outcomes.append((ident, write(connection, *args, **kwargs), None))
            except Exception as error:
                connection.execute("ROLLBACK")
                return [(ident, None, error)]
        else:
            for ident, write, args, kwargs in group:
                connection.execute("SAVEPOINT write")
                try:
                    outcomes.append((ident, write(connection, *args, **kwargs), None))
                except Exception as error:
                    connection.execute("ROLLBACK TO write")
                    outcomes.append((ident, None, error))
                connection.execute("RELEASE write")
        connection.execute("COMMIT")
    except Exception as error:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        return [(ident, None, error) for ident, _, _, _ in group]
    return outcomes


def encoded(outcomes: list[Outcome]) -> bytes:
    """The answer frame of a transaction. An error that does not come back whole from a pickle, or a result
    that cannot be pickled, is answered with a TypeError that names it (the write stays as it ran)."""
    # Errors are rare: each is checked whole. Results are pickled once, with the frame, unless one fails.
    checked = [outcome if outcome[2] is None else _sendable(*outcome) for outcome in outcomes]
    try:
        data = pickle.dumps(checked, pickle.HIGHEST_PROTOCOL)
    except Exception:
        data = pickle.dumps([_sendable(*outcome) for outcome in checked], pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def _sendable(ident: int, result: Any, error: BaseException | None) -> Outcome:
    """The outcome, or a TypeError in its place when its result or error does not come back whole."""
    value = error if error is not None else result
    try:
        pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
    except Exception as problem:
        return (
            ident,
            None,
            TypeError(f"the store's writer cannot send a {type(value).__name__} back: {problem}"),
        )
    return ident, result, error


def serve(frames: Frames, answers: int) -> None:
    """Set up from the first frame, then commit groups until the input ends."""
    setup = frames.next(wait=True)
    if setup is None:
        return
    host_path, path, prepare = pickle.loads(setup)
    sys.path[:] = host_path  # the writes' modules are found where the host found them
    connection = connect(Path(path), pickle.loads(prepare))
    answering = True
    try:
        while (frame := frames.next(wait=True)) is not None:
            group: list[Write] = pickle.loads(frame)
            while len(group) < MAX_GROUP and (more := frames.next(wait=False)) is not None:
                group += pickle.loads(more)
            data = memoryview(encoded(commit(connection, group)))
            try:
                while answering and data:
                    data = data[os.write(answers, data) :]
            except BrokenPipeError:  # the host is gone (killed): its whole frames still commit, unanswered
                answering = False
    finally:
        connection.close()


def main() -> None:
    # Answers go out on a descriptor of their own: whatever a module prints lands on standard error.
    answers = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(Frames(sys.stdin.fileno()), answers)


if __name__ == "__main__":
    main()
