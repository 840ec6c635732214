"""Inspection, the default: the exact result (migration-required, the digest, the counts, no marker), a digest
that includes committed WAL rows and depends only on the logical content, a source read without a change
(in a read-only folder too), how the profile and the configuration select the provider, and every refused
flag (exit 2, naming it, nothing written)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.host.userhost.review.conftest import (
    PERSONAL,
    content,
    counts_of,
    destination_of,
    digest_of,
    expected_result,
    files_in,
    inspect,
    make_ledger,
    refused,
    source_of,
    succeeded,
    wuu,
)


def test_inspection_reports_the_digest_the_counts_and_no_marker(home: Path, state: Path) -> None:
    make_ledger(state, leave_wal=True)
    before = files_in(home)
    rows = content(40, 1)
    assert inspect(home) == expected_result(state, "migration-required", digest_of(rows), counts_of(rows))
    assert files_in(home) == before  # the source is untouched and nothing was created: no destination
    assert not destination_of(state).exists()


def test_dry_run_is_inspection(home: Path, state: Path) -> None:
    make_ledger(state)
    assert inspect(home, "--dry-run") == inspect(home)


def test_rows_only_in_the_wal_are_part_of_the_digest(home: Path, state: Path, tmp_path: Path) -> None:
    make_ledger(state, leave_wal=True)
    with_wal = inspect(home)

    # The same folder without its -wal: the rows that were only there are gone, and so is the digest.
    bare = tmp_path / "bare"
    shutil.copytree(home, bare)
    os.remove(f"{source_of(bare / state.relative_to(home))}-wal")
    without = inspect(bare)
    assert without["source_digest"] != with_wal["source_digest"]
    assert without["row_counts"]["actions"] == 20 and with_wal["row_counts"]["actions"] == 40

    # The same logical content checkpointed into the main file: the same digest.
    checkpointed = tmp_path / "checkpointed"
    shutil.copytree(home, checkpointed)
    copy = source_of(checkpointed / state.relative_to(home))
    connection = sqlite3.connect(copy, isolation_level=None)
    assert connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()
    assert not Path(f"{copy}-wal").exists()
    again = inspect(checkpointed)
    assert (again["source_digest"], again["row_counts"]) == (
        with_wal["source_digest"],
        with_wal["row_counts"],
    )


def test_a_read_only_folder_is_read_without_a_change(home: Path, state: Path) -> None:
    make_ledger(state, leave_wal=True)
    before = files_in(home)
    state.chmod(0o555)
    try:
        result = inspect(home)
    finally:
        state.chmod(0o700)
    assert result["status"] == "migration-required" and result["row_counts"]["actions"] == 40
    assert files_in(home) == before  # bytes and modification times, the folder's included


def test_the_configured_profile_selects_the_provider(home: Path, state: Path, tmp_path: Path) -> None:
    make_ledger(state)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"composition_profile": "personal", "execution_environments": {}}))
    assert succeeded(wuu(home, "--config", str(config))) == inspect(home)
    config.write_text(json.dumps({"composition_profile": "coding"}))
    assert succeeded(wuu(home, "--config", str(config), *PERSONAL)) == inspect(home)  # the override wins
    refused(wuu(home, "--config", str(config)), f"--config: {config}: composition_profile", "'coding'")


def test_the_user_configuration_under_the_home_selects_as_the_hosts_do(home: Path, state: Path) -> None:
    make_ledger(state)
    (home / "config.json").write_text(json.dumps({"composition_profile": "personal"}))
    assert succeeded(wuu(home)) == inspect(home)
    # A configured profile that patches the bundle keeps its review-ledger binding; one excluding it has none.
    profiles = {"lean": {"base": "personal", "remove_modules": ["wuu.client-input-receipts"]}}
    profiles["bare"] = {"base": "personal", "exclusions": ["review.ledger"]}
    (home / "config.json").write_text(
        json.dumps({"composition_profile": "lean", "composition_profiles": profiles})
    )
    lean = succeeded(wuu(home))
    assert lean["composition_profile"] == "lean" and {**lean, "composition_profile": "personal"} == inspect(
        home
    )
    refused(
        wuu(home, "--composition-profile", "bare"),
        "'bare' selects no review-ledger provider",
        "review.ledger",
    )


def test_wuu_home_is_the_default_home(home: Path, state: Path) -> None:
    make_ledger(state)
    environment = {"PATH": os.environ["PATH"], "WUU_HOME": str(home)}
    assert succeeded(wuu(None, *PERSONAL, env=environment)) == inspect(home)
    refused(wuu(None, *PERSONAL, env={**environment, "WUU_HOME": "relative/home"}), "WUU_HOME", "absolute")


@pytest.mark.parametrize(
    ("args", "phrases"),
    [
        ([], ["no composition profile", "--composition-profile", "--config"]),
        (["--composition-profile", "coding"], ["--composition-profile", "selects no review-ledger provider"]),
        (["--composition-profile", "Personal"], ["--composition-profile", "not a valid profile name"]),
        (["--config", "config.json"], ["--config", "not an absolute path"]),
        (["--config", "{tmp}/missing.json"], ["--config", "no such file"]),
        (["--config", "{tmp}/unknown.json"], ["--config", "'profile' was unexpected"]),
        ([*PERSONAL, "--config", "{tmp}/unknown.json"], ["--config", "'profile' was unexpected"]),
        (["--config", "{tmp}/broken.json"], ["--config", "line 1 column"]),
        (["--config", "{tmp}/typed.json"], ["--config", "composition_profile", "is not of type 'string'"]),
        ([*PERSONAL, "--apply"], ["--apply needs --expect-source-digest"]),
        (
            [*PERSONAL, "--expect-source-digest", "0" * 64],
            ["--expect-source-digest is only given with --apply"],
        ),
        (
            [*PERSONAL, "--apply", "--expect-source-digest", "sha256:00"],
            ["--expect-source-digest", "SHA-256"],
        ),
        ([*PERSONAL, "--apply", "--expect-source-digest", "A" * 64], ["--expect-source-digest", "SHA-256"]),
        ([*PERSONAL, "--dry-run", "--apply"], ["--apply", "not allowed with argument --dry-run"]),
        ([*PERSONAL, "--home", "relative"], ["--home", "not an absolute path"]),
        ([*PERSONAL, "--user-space", "../escape"], ["--user-space", "not a valid user space ID"]),
    ],
)
def test_a_wrong_flag_is_refused_naming_it(
    home: Path, state: Path, tmp_path: Path, args: list[str], phrases: list[str]
) -> None:
    make_ledger(state)
    (tmp_path / "unknown.json").write_text('{"profile": "personal"}')
    (tmp_path / "broken.json").write_text('{"composition_profile": ')
    (tmp_path / "typed.json").write_text('{"composition_profile": 7}')
    before = files_in(home)
    refused(wuu(home, *[arg.replace("{tmp}", str(tmp_path)) for arg in args]), *phrases)
    assert files_in(home) == before


def test_no_legacy_ledger_is_refused_and_nothing_is_created(home: Path) -> None:
    refused(wuu(home, *PERSONAL), "there is no legacy review ledger", "nothing to migrate")
    assert os.listdir(home) == []


def test_a_ledger_of_another_owner_is_refused(home: Path, state: Path) -> None:
    source = make_ledger(state)
    before = files_in(home)
    os.chown(source, 4242, -1)
    try:
        refused(wuu(home, *PERSONAL), "belongs to uid 4242", "local owner")
    finally:
        os.chown(source, os.geteuid(), -1)
    assert files_in(home) == before
