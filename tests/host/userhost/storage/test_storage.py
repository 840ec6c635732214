"""The user host's storage on its own, without a host or an event loop: where a space's folders are, and the
Personal composition's startup check on a state folder's review ledgers, which refuses an unmigrated legacy
ledger (writing nothing) until the migration has committed its marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.userhost.review.conftest import (
    SPACE,
    content,
    destination_of,
    digest_of,
    files_in,
    make_ledger,
)
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UserHostStartError
from wuu.host.userhost.review import migrate, select
from wuu.host.userhost.storage import StorageLayout
from wuu.host.userhost.storage.review_ledger import require_migrated


@pytest.fixture
def state(home: Path) -> Path:
    """The Personal state folder of user space `local` (created, empty)."""
    path = StorageLayout.under(home, SPACE, "personal").state
    path.mkdir(parents=True, mode=0o700)
    return path


def test_a_space_s_folders_are_listed_from_the_home_down(home: Path) -> None:
    layout = StorageLayout.under(home, SPACE, "personal")
    root = home / "user-spaces" / SPACE / "personal"
    assert (layout.root, layout.state, layout.files) == (root, root / "state", root / "files")
    assert layout.directories == [
        home,
        home / "user-spaces",
        root.parent,
        root,
        root / "state",
        root / "files",
    ]


def test_a_state_folder_without_a_legacy_ledger_passes_the_startup_check(home: Path, state: Path) -> None:
    before = files_in(home)
    require_migrated(state, SPACE)
    assert files_in(home) == before


def test_an_unmigrated_ledger_fails_the_startup_check_until_its_marker_is_committed(
    home: Path, state: Path
) -> None:
    make_ledger(state, leave_wal=True)
    before = files_in(home)
    with pytest.raises(UserHostStartError) as refused:
        require_migrated(state, SPACE)
    assert refused.value.code is UserHostErrorCode.PERSONAL_REVIEW_LEGACY_MIGRATION_REQUIRED
    assert f"{destination_of(state)} does not exist" in refused.value.message
    assert files_in(home) == before  # it only read, through frozen copies

    migrate(select(home, SPACE, "personal", None), digest_of(content()))
    require_migrated(state, SPACE)
