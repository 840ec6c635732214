"""Cases of the Personal Memory service (spec/schema/userhost/memory.schema.json): a saved memory is listed by a
query, a correction is a new version, a forgotten memory is never listed or corrected again, and memories are
kept across a kill.

The spec gives a client no memory method: the host's agent reaches memory through its tools, in conversation.
The cases drive it with the bundled stand-in's scripted intents (`/remember TEXT`, `/recall [QUERY]`,
`/correct MEMORY_ID TEXT`, `/forget MEMORY_ID`), after which the stand-in replies with the Memory service's
result as is (see `StandInModel` and host/userhost/personal/memory.py): `remembered ID (version 1): TEXT`,
one line `ID vN: TEXT (saved|corrected by main agent, message SEQ)` per match or `no memories match`,
`corrected ID (version N): TEXT`, `forgot ID: ...`, and `refused (memory_forgotten): ...`. A case skips when
the host's agent answers `/remember` otherwise.
"""

from __future__ import annotations

import re

from ..conversation import exchange
from ..personal import open_main
from ..session import HostSession
from ..suite import USERHOST

SAVED = re.compile(r"remembered (mem_[0-9a-f]{32}) \(version 1\): (.*)", re.DOTALL)
NO_MATCH = "no memories match"
FORGOTTEN = "refused (memory_forgotten)"


async def remember(host: HostSession, session_id: str, text: str) -> tuple[str, int]:
    """Ask the agent to remember `text`: (the memory's ID, the user message's sequence). Skips when the agent
    answers otherwise."""
    seq, reply = await exchange(host, session_id, f"/remember {text}")
    match = SAVED.fullmatch(reply["text"])
    if match is None:
        host.skip(f"the host's agent did not save a memory for /remember: it answered {reply['text']!r}")
    assert match is not None
    host.expect(match.group(2) == text, f"the memory saved for /remember {text!r} reads {match.group(2)!r}")
    return match.group(1), seq


async def say(host: HostSession, session_id: str, text: str) -> str:
    """Send `text`; the text of the agent's reply."""
    return str((await exchange(host, session_id, text))[1]["text"])


def line(memory_id: str, version: int, text: str, seq: int) -> str:
    """A query's line for a memory the main agent saved or corrected answering message `seq`."""
    how = "saved" if version == 1 else "corrected"
    return f"{memory_id} v{version}: {text} ({how} by main agent, message {seq})"


@USERHOST.case("memory.save-recall")
async def saved_memory_is_recalled(host: HostSession) -> None:
    """A memory saved with `/remember` is version 1, and `/recall` of part of it in another letter case lists it,
    attributed to the message that saved it."""
    session_id = await open_main(host)
    memory_id, seq = await remember(host, session_id, "The owner's sister is called Ana.")
    recalled = await say(host, session_id, "/recall SISTER IS CALLED")
    expected = line(memory_id, 1, "The owner's sister is called Ana.", seq)
    host.expect(recalled == expected, f"/recall answered {recalled!r}, not {expected!r}")
    listed = await say(host, session_id, "/recall")
    host.expect(
        expected in listed.split("\n"), f"/recall without a query answered {listed!r}: {memory_id} missing"
    )


@USERHOST.case("memory.correct-versions")
async def correction_is_version_2(host: HostSession) -> None:
    """`/correct` makes version 2 with its own attribution: `/recall` lists the corrected text at version 2, and
    the earlier text matches nothing."""
    session_id = await open_main(host)
    memory_id, _ = await remember(host, session_id, "Flight to Lisbon on 3 May.")
    seq, reply = await exchange(host, session_id, f"/correct {memory_id} Flight to Lisbon on 5 May.")
    expected = f"corrected {memory_id} (version 2): Flight to Lisbon on 5 May."
    host.expect(reply["text"] == expected, f"/correct answered {reply['text']!r}, not {expected!r}")
    recalled = await say(host, session_id, "/recall lisbon")
    wanted = line(memory_id, 2, "Flight to Lisbon on 5 May.", seq)
    host.expect(recalled == wanted, f"/recall after a correction answered {recalled!r}, not {wanted!r}")
    earlier = await say(host, session_id, "/recall 3 May")
    host.expect(earlier == NO_MATCH, f"/recall of the earlier text answered {earlier!r}, not {NO_MATCH!r}")


@USERHOST.case("memory.forget")
async def forgotten_memory_is_gone(host: HostSession) -> None:
    """After `/forget`, `/recall` never lists the memory (by its text or without a query) while another one is
    still listed, and a `/correct` or a second `/forget` of it is refused as forgotten."""
    session_id = await open_main(host)
    kept, kept_seq = await remember(host, session_id, "Prefers window seats.")
    gone, _ = await remember(host, session_id, "Passport number P1234567.")
    forgot = await say(host, session_id, f"/forget {gone}")
    host.expect(forgot.startswith(f"forgot {gone}:"), f"/forget answered {forgot!r}")
    by_text = await say(host, session_id, "/recall passport")
    host.expect(by_text == NO_MATCH, f"/recall of a forgotten memory's text answered {by_text!r}")
    listed = await say(host, session_id, "/recall")
    host.expect(gone not in listed, f"/recall lists the forgotten memory {gone}: {listed!r}")
    host.expect(
        listed.split("\n") == [line(kept, 1, "Prefers window seats.", kept_seq)],
        f"/recall after a forget answered {listed!r}: the other memory must stay listed",
    )
    corrected = await say(host, session_id, f"/correct {gone} Passport number P7654321.")
    host.expect(corrected.startswith(FORGOTTEN), f"/correct of a forgotten memory answered {corrected!r}")
    again = await say(host, session_id, f"/forget {gone}")
    host.expect(again.startswith(FORGOTTEN), f"a second /forget answered {again!r}")
    still = await say(host, session_id, "/recall passport")
    host.expect(still == NO_MATCH, f"/recall after a refused correction answered {still!r}")


@USERHOST.case("memory.durable")
async def kept_across_a_kill(host: HostSession) -> None:
    """A saved, a corrected and a forgotten memory, each acknowledged in conversation, are as they were after
    the host is killed (SIGKILL) and started again on the same home."""
    session_id = await open_main(host)
    saved, saved_seq = await remember(host, session_id, "Birthday on 9 October.")
    corrected, _ = await remember(host, session_id, "Dentist on Tuesday.")
    corrected_seq, _ = await exchange(host, session_id, f"/correct {corrected} Dentist on Wednesday.")
    gone, _ = await remember(host, session_id, "Locker code 4711.")
    await say(host, session_id, f"/forget {gone}")
    await host.kill()
    await host.restart()
    session_id = await open_main(host)
    listed = await say(host, session_id, "/recall")
    expected = [
        line(corrected, 2, "Dentist on Wednesday.", corrected_seq),
        line(saved, 1, "Birthday on 9 October.", saved_seq),
    ]
    host.expect(listed.split("\n") == expected, f"/recall after a kill answered {listed!r}, not {expected!r}")
    refused = await say(host, session_id, f"/correct {gone} Locker code 1174.")
    host.expect(
        refused.startswith(FORGOTTEN), f"/correct of a memory forgotten before a kill answered {refused!r}"
    )
