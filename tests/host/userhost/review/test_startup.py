"""A Personal host that starts with an unmigrated legacy ledger fails with
`personal_review_legacy_migration_required`, creates no selected ledger (nor its own store) and leaves the
space free for the migration; once the ledger is migrated, the host starts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DEADLINE
from tests.host.userhost.review.conftest import (
    PERSONAL,
    SPACE,
    apply,
    content,
    destination_of,
    digest_of,
    files_in,
    inspect,
    make_ledger,
    wuu,
)
from wuu.generated.models import UserHostErrorCode
from wuu.host.userhost import UserHost, UserHostStartError
from wuu.host.userhost.personal import personal

REQUIRED = UserHostErrorCode.PERSONAL_REVIEW_LEGACY_MIGRATION_REQUIRED


async def start_host(home: Path) -> UserHost:
    return await UserHost.start(
        user_space_id=SPACE, product_domain="personal", home=home, compose=[personal()]
    )


async def test_an_unmigrated_ledger_stops_the_host_until_it_is_migrated(home: Path, state: Path) -> None:
    make_ledger(state, leave_wal=True)
    (home / "user-spaces" / SPACE / "personal" / "files").mkdir(mode=0o700)
    before = files_in(home)
    with pytest.raises(UserHostStartError) as refused:
        await start_host(home)
    assert refused.value.code is REQUIRED
    assert "migrate-personal-review --user-space local" in refused.value.message
    assert files_in(home) == before  # no selected ledger, no Personal store, the source as it was
    assert not destination_of(state).exists()

    assert (await asyncio.to_thread(inspect, home))["status"] == "migration-required"  # the lock was released
    await asyncio.to_thread(apply, home, digest_of(content()))
    host = await start_host(home)
    await host.close()


async def test_a_destination_without_the_marker_stops_the_host(home: Path, state: Path) -> None:
    make_ledger(state)
    destination_of(state).write_bytes(b"")  # what an import killed before its commit can leave
    with pytest.raises(UserHostStartError) as refused:
        await start_host(home)
    assert refused.value.code is REQUIRED and "holds no migration marker" in refused.value.message
    assert destination_of(state).read_bytes() == b""


def test_the_serve_command_reports_the_code_and_exits_2(home: Path, state: Path) -> None:
    make_ledger(state)
    (home / "user-spaces" / SPACE / "personal" / "files").mkdir(mode=0o700)
    before = files_in(home)
    command = [str(Path(sys.executable).parent / "wuu-userhost"), "serve", "--user-space", SPACE]
    done = subprocess.run(
        [*command, "--product-domain", "personal", *PERSONAL, "--home", str(home), "--stdio"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert "personal_review_legacy_migration_required" in done.stderr
    assert files_in(home) == before
    assert wuu(home, *PERSONAL).returncode == 0
