"""The search index of the bundled store, kept a little behind the history: its trigram index of the main
conversation's visible text (`messages_fts`) covers every message up to a mark, and search reads the few
messages past the mark directly.

Adding rows to an FTS5 index writes a new index segment in the transaction that adds them: several pages of
the file, which each commit writes and syncs. An admission that indexed its own message paid for those
pages every time; the messages are indexed instead in batches, in the transaction of the message whose row
id is a multiple of `LAG`, so a commit writes a segment once per `LAG` messages and the index never trails by
`LAG` messages or more. The mark and the index move
in the same transaction as the messages, so a crash leaves them as consistent as a commit does.
"""

from __future__ import annotations

import sqlite3

from .projection import VISIBLE

LAG = 64
"""The batch: messages (of any session) are indexed when a row id reaches a multiple of it."""


def indexed_through(connection: sqlite3.Connection) -> int:
    """The mark: the index holds every indexed message with this row id or a lower one, and none higher."""
    (mark,) = connection.execute("SELECT indexed_through FROM search_index").fetchone()
    return int(mark)


def appended(connection: sqlite3.Connection, row_id: int) -> None:
    """Message `row_id` was saved: at a multiple of `LAG`, index the messages past the mark and move it."""
    if row_id % LAG:
        return  # most writes: not even the mark is read
    mark = indexed_through(connection)
    # The main conversation's visible text: the public conversation projection, all that search reads.
    # `+`: the rows by id range (the session's index would walk all of its rows).
    rows = connection.execute(
        "SELECT m.id, m.text FROM messages m WHERE m.id > ? AND m.id <= ? "
        f"AND +m.session_id = (SELECT main_session_id FROM space) AND {VISIBLE}",
        (mark, row_id),
    ).fetchall()
    connection.executemany(
        "INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", [(id_, text.casefold()) for id_, text in rows]
    )
    connection.execute("UPDATE search_index SET indexed_through = ?", (row_id,))
