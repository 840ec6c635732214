"""The targets of Personal file actions on a real files root: what is refused with which code, the preview of
the original, and the precondition that `check` holds a file to before the action runs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from wuu.host.userhost.personal.approvals.files import ORIGINAL_LIMIT, FilesRoot, TargetRefused
from wuu.host.userhost.storage import StorageLayout


@pytest.fixture
def layout(tmp_path: Path) -> StorageLayout:
    layout = StorageLayout.under(tmp_path / "home", "space", "personal")
    for directory in layout.directories:
        directory.mkdir(exist_ok=True)
    return layout


@pytest.fixture
def root(layout: StorageLayout) -> FilesRoot:
    return FilesRoot(layout.files)


def refused(root: FilesRoot, path: str) -> str:
    with pytest.raises(TargetRefused) as caught:
        root.inspect(path)
    return caught.value.code


def test_a_missing_file_is_a_missing_target(root: FilesRoot) -> None:
    target = root.inspect("notes/todo.txt")
    assert target.existing is None
    assert target.original.as_json() == {"state": "missing"}
    assert target.precondition() is None
    assert target.absolute == root.root / "notes" / "todo.txt"


def test_a_text_original_is_previewed_whole(root: FilesRoot) -> None:
    (root.root / "notes").mkdir()
    (root.root / "notes" / "todo.txt").write_text("buy milk\n")
    digest = hashlib.sha256(b"buy milk\n").hexdigest()
    target = root.inspect("notes/todo.txt")
    assert target.original.as_json() == {"state": "text", "text": "buy milk\n", "size": 9, "sha256": digest}
    assert target.precondition() == {"sha256": digest, "size": 9}


def test_large_and_binary_originals_are_unavailable(root: FilesRoot) -> None:
    (root.root / "exact.txt").write_text("a" * ORIGINAL_LIMIT)
    (root.root / "large.txt").write_text("a" * (ORIGINAL_LIMIT + 1))
    (root.root / "nul.txt").write_bytes(b"text\0more")
    (root.root / "latin1.txt").write_bytes("caf\u00e9".encode("latin-1"))
    assert root.inspect("exact.txt").original.state == "text"
    assert root.inspect("large.txt").original.as_json()["reason"] == "too_large"
    assert root.inspect("large.txt").original.text is None
    assert root.inspect("nul.txt").original.reason == "binary"
    assert root.inspect("latin1.txt").original.reason == "binary"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("../state/personal.sqlite", "path_outside_root"),
        ("notes/../../outside.txt", "path_outside_root"),
        ("/etc/passwd", "path_outside_root"),
        ("", "invalid_action"),
        ("notes//todo.txt", "invalid_action"),
        ("./todo.txt", "invalid_action"),
        ("notes/", "invalid_action"),
        ("nul\0.txt", "invalid_action"),
        ("a" * 4097, "invalid_action"),
        (".env", "sensitive_path"),
        ("project/.env.local", "sensitive_path"),
        ("keys/.ssh/id_ed25519", "sensitive_path"),
        ("attachments/att_1", "protected_path"),
        ("attachments/.incoming/x", "protected_path"),
    ],
)
def test_paths_that_are_not_clean_allowed_ones_are_refused(root: FilesRoot, path: str, code: str) -> None:
    assert refused(root, path) == code


def test_symlinks_are_refused_anywhere_on_the_way(root: FilesRoot, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the owner's notes")
    (root.root / "inside.txt").write_text("inside")
    (root.root / "link.txt").symlink_to(root.root / "inside.txt")
    (root.root / "dangling.txt").symlink_to(root.root / "missing.txt")
    (root.root / "out").symlink_to(outside)
    assert refused(root, "link.txt") == "symlink"
    assert refused(root, "dangling.txt") == "symlink"
    assert refused(root, "out/secret.txt") == "symlink"
    assert refused(root, "out/new.txt") == "symlink"
    assert (outside / "secret.txt").read_text() == "not the owner's notes"


def test_a_file_with_another_link_is_refused(root: FilesRoot, tmp_path: Path) -> None:
    (root.root / "shared.txt").write_text("two names")
    os.link(root.root / "shared.txt", tmp_path / "elsewhere.txt")
    assert refused(root, "shared.txt") == "multiple_links"


def test_what_is_not_a_regular_file_is_refused(root: FilesRoot) -> None:
    (root.root / "folder").mkdir()
    os.mkfifo(root.root / "pipe")
    (root.root / "plain.txt").write_text("a file")
    assert refused(root, "folder") == "not_regular_file"
    assert refused(root, "pipe") == "not_regular_file"
    assert refused(root, "plain.txt/below.txt") == "not_regular_file"


def test_a_missing_directory_on_the_way_leaves_the_target_missing(root: FilesRoot) -> None:
    assert root.inspect("new/deeper/todo.txt").existing is None
