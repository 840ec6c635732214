"""The search page tokens' key and checks (host/userhost/personal/page_tokens.py, spec/schema/userhost/
personal.schema.json `AgentsHistorySearchParams.page_token`), on real state folders.

Covered: a cursor outside the history sequences is refused even under a valid MAC (what only the key's
holder could make: the range check does not lean on the MAC); a token of one space's key is refused under
another's; hosts that start at once on a fresh space all end with the one key, written 0600.
"""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost.errors import UserHostError
from wuu.host.userhost.personal.page_tokens import KEY_FILE, PageTokens

SCOPE = ("agents.history.search", "ses_main_1", "river", None, None)


def refused(tokens: PageTokens, token: str) -> None:
    with pytest.raises(UserHostError) as raised:
        tokens.cursor(token, SCOPE)
    assert (raised.value.code, raised.value.field) == (UserHostErrorCode.INVALID_PARAMS, "params.page_token")


def test_a_signed_cursor_outside_the_sequences_is_refused(tmp_path: Path) -> None:
    tokens = PageTokens.of_state(tmp_path)
    for cursor in (0, 2**63, 2**64 - 1):
        refused(tokens, tokens.issue(SCOPE, cursor))
    for cursor in (1, 2**63 - 1):
        assert tokens.cursor(tokens.issue(SCOPE, cursor), SCOPE) == cursor


def test_a_token_of_another_spaces_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine, theirs = PageTokens.of_state(tmp_path / "a"), PageTokens.of_state(tmp_path / "b")
    refused(mine, theirs.issue(SCOPE, 7))
    assert mine.cursor(mine.issue(SCOPE, 7), SCOPE) == 7


def test_hosts_starting_at_once_share_one_key_written_0600(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        all_tokens = list(pool.map(lambda _: PageTokens.of_state(tmp_path), range(8)))
    issued = all_tokens[0].issue(SCOPE, 42)
    assert [tokens.cursor(issued, SCOPE) for tokens in all_tokens] == [42] * 8
    key = tmp_path / KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert sorted(path.name for path in tmp_path.iterdir()) == [KEY_FILE]  # no temporary file left
