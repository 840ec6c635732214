"""Path resolution against the bound root, and the sensitive-path guard, on real files and the spec's vectors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.spec.specdata import SPEC
from wuu.generated.models import ErrorCode, SensitivePathVector, SensitivePathVectors
from wuu.worker.errors import WorkerError
from wuu.worker.native import paths
from wuu.worker.native.paths import resolve, resolve_tool_path
from wuu.worker.native.sensitive import SensitivePaths, default_home, default_wuu_home

VECTORS = SensitivePathVectors.model_validate_json(
    (SPEC / "data" / "sensitive_path_vectors.json").read_text("utf-8"), strict=True
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A root with ordinary files and symlinks of every kind, beside an outside directory.

    tmp/outside/secret.txt, tmp/root2/ (a sibling sharing the root's name as prefix), tmp/rootlink -> root,
    and in tmp/root: a.txt, sub/b.txt and the symlinks the tests name.
    """
    real = tmp_path.resolve()
    (real / "outside").mkdir()
    (real / "outside" / "secret.txt").write_text("secret")
    (real / "root2").mkdir()
    root = real / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    links = {
        "link_in_file": "sub/b.txt",
        "link_in_abs": str(root / "sub"),
        "link_in_detour": str(real / "outside" / ".." / "root" / "sub"),
        "link_out_file": "../outside/secret.txt",
        "link_out_dir": str(real / "outside"),
        "link_out_back": "../root/sub",
        "dangling_out": str(real / "outside" / "new.txt"),
        "dangling_in": "sub/new.txt",
        "loop1": "loop2",
        "loop2": "loop1",
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    (real / "rootlink").symlink_to(root)
    return root


def refused(root: Path, path: str, code: ErrorCode = ErrorCode.PATH_OUTSIDE_ROOT) -> WorkerError:
    with pytest.raises(WorkerError) as caught:
        resolve(root, path, confined=True)
    assert caught.value.code is code
    return caught.value


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.txt", "a.txt"),
        ("sub/b.txt", "sub/b.txt"),
        ("./sub//b.txt", "sub/b.txt"),
        ("sub/../a.txt", "a.txt"),
        (".", ""),
        ("sub/", "sub"),
    ],
)
def test_relative_paths_inside_resolve_against_the_root(tree: Path, path: str, expected: str) -> None:
    assert resolve(tree, path, confined=True) == (tree / expected if expected else tree)


def test_absolute_paths_inside_are_taken_as_is(tree: Path) -> None:
    assert resolve(tree, str(tree / "sub" / "b.txt"), confined=True) == tree / "sub" / "b.txt"
    assert resolve(tree, str(tree), confined=True) == tree


@pytest.mark.parametrize("path", ["..", "../outside/secret.txt", "sub/../../outside", "sub/../../root/a.txt"])
def test_dotdot_out_of_the_root_is_refused(tree: Path, path: str) -> None:
    assert repr(path) in str(refused(tree, path))


def test_absolute_paths_outside_are_refused(tree: Path) -> None:
    refused(tree, str(tree.parent / "outside" / "secret.txt"))
    refused(tree, str(tree.parent / "root2" / "x.txt"))  # shares the root's name as a prefix
    refused(tree, "/")
    refused(tree, str(tree / ".." / "root" / "a.txt"))  # enters the root, then leaves it


@pytest.mark.parametrize(
    "path",
    [
        "link_out_file",
        "link_out_dir",
        "link_out_dir/secret.txt",
        "link_out_dir/new.txt",
        "sub/../link_out_dir",
    ],
)
def test_symlinks_to_outside_are_refused(tree: Path, path: str) -> None:
    refused(tree, path)


def test_a_link_may_not_step_out_even_to_come_back(tree: Path) -> None:
    refused(tree, "link_out_back/b.txt")
    refused(tree, "link_out_dir/../root/a.txt")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("link_in_file", "sub/b.txt"),
        ("link_in_abs/b.txt", "sub/b.txt"),
        ("link_in_abs/../a.txt", "a.txt"),
        ("link_in_detour/b.txt", "sub/b.txt"),
    ],
)
def test_symlinks_inside_are_followed(tree: Path, path: str, expected: str) -> None:
    assert resolve(tree, path, confined=True) == tree / expected


def test_dangling_symlinks_resolve_to_their_target_only_inside(tree: Path) -> None:
    refused(tree, "dangling_out")
    assert resolve(tree, "dangling_in", confined=True) == tree / "sub" / "new.txt"


def test_a_symlink_loop_is_an_error(tree: Path) -> None:
    error = refused(tree, "loop1", ErrorCode.INVALID_REQUEST)
    assert "symbolic links" in str(error)
    with pytest.raises(WorkerError):
        resolve(tree, "loop2/x", confined=False)


def test_files_that_do_not_exist_yet_resolve_inside(tree: Path) -> None:
    assert resolve(tree, "sub/new.txt", confined=True) == tree / "sub" / "new.txt"
    assert resolve(tree, "new/dirs/file.txt", confined=True) == tree / "new" / "dirs" / "file.txt"
    # A missing directory is no licence to walk past the symlinks after it.
    refused(tree, "missing/../link_out_file")
    refused(tree, "missing/../../outside")


def test_a_root_given_through_a_symlink_still_works(tree: Path) -> None:
    alias = tree.parent / "rootlink"
    assert resolve(alias, "sub/b.txt", confined=True) == tree / "sub" / "b.txt"
    assert resolve(alias, str(alias / "sub" / "b.txt"), confined=True) == tree / "sub" / "b.txt"
    assert resolve(alias, "link_in_abs/new.txt", confined=True) == tree / "sub" / "new.txt"
    refused(alias, "link_out_dir/secret.txt")
    refused(alias, "../outside")


def test_unconfined_resolves_without_a_boundary(tree: Path) -> None:
    outside = tree.parent / "outside"
    assert resolve(tree, str(outside / "secret.txt"), confined=False) == outside / "secret.txt"
    assert resolve(tree, "../outside/secret.txt", confined=False) == outside / "secret.txt"
    assert resolve(tree, "link_out_file", confined=False) == outside / "secret.txt"
    assert resolve(tree, "link_out_dir/new.txt", confined=False) == outside / "new.txt"
    assert resolve(tree, "dangling_out", confined=False) == outside / "new.txt"
    assert resolve(tree, "sub/b.txt", confined=False) == tree / "sub" / "b.txt"


def test_a_nul_byte_is_an_invalid_request(tree: Path) -> None:
    refused(tree, "a.txt\0", ErrorCode.INVALID_REQUEST)


@pytest.fixture(scope="module")
def vector_guard() -> SensitivePaths:
    return SensitivePaths.load(home=Path(VECTORS.home), wuu_home=Path(VECTORS.wuu_home))


@pytest.mark.parametrize("vector", VECTORS.vectors, ids=[vector.path for vector in VECTORS.vectors])
def test_sensitive_path_vector(vector_guard: SensitivePaths, vector: SensitivePathVector) -> None:
    path = Path(vector.path)
    found = vector_guard.match(path)
    assert (found.sensitive, found.read_blocked, list(found.rules)) == (
        vector.sensitive,
        vector.read_blocked,
        vector.rules,
    ), vector.description
    for write, refused_expected in ((True, vector.sensitive), (False, vector.read_blocked)):
        if refused_expected:
            with pytest.raises(WorkerError) as caught:
                vector_guard.check(path, write=write)
            assert caught.value.code is ErrorCode.SENSITIVE_PATH
        else:
            vector_guard.check(path, write=write)


def test_sensitive_matching_folds_ascii_case_only(vector_guard: SensitivePaths) -> None:
    assert vector_guard.match(Path("/work/repo/SERVER.KEY")).rules == ("private-key-file",)
    assert vector_guard.match(Path("/SRV/Wuu/Remote.JSON")).read_blocked
    # KELVIN SIGN folds to `k` in Unicode, but the rules compare ASCII case only.
    assert not vector_guard.match(Path("/work/repo/server.\u212aey")).sensitive


def test_sensitive_paths_are_normalized_and_must_be_absolute(vector_guard: SensitivePaths) -> None:
    assert vector_guard.match(Path("/work/repo/sub/../.env")).rules == ("environment-file",)
    assert vector_guard.match(Path("/srv/wuu/sessions/../auth.json")).read_blocked
    with pytest.raises(ValueError):
        vector_guard.match(Path("repo/.env"))


def test_symlinks_are_checked_by_name_and_by_target(tmp_path: Path) -> None:
    real = tmp_path.resolve()
    guard = SensitivePaths.load(home=real / "home", wuu_home=real / "wuu")
    (real / "notes.txt").write_text("")
    (real / ".env").symlink_to("notes.txt")
    (real / "innocent.txt").symlink_to(".env.local")
    (real / "dangling.txt").symlink_to("id_rsa")
    assert guard.match(real / ".env").rules == ("environment-file",)  # the name, pointing to a plain file
    assert guard.match(real / "innocent.txt").rules == ("environment-file",)  # the target
    assert not guard.match(real / "notes.txt").sensitive
    with pytest.raises(WorkerError) as caught:
        guard.check(real / "dangling.txt", write=True)  # writing it would create id_rsa
    assert caught.value.code is ErrorCode.SENSITIVE_PATH
    guard.check(real / "dangling.txt", write=False)


def test_the_path_acted_on_is_checked_beside_the_name(tmp_path: Path) -> None:
    real = tmp_path.resolve()
    guard = SensitivePaths.load(home=real / "home", wuu_home=real / "wuu")
    # `link/../config` with link -> .ssh/known names ./config and writes .ssh/config.
    assert guard.match(real / "config", acts_on=real / ".ssh" / "config").rules == ("ssh-directory",)
    assert guard.match(real / ".env", acts_on=real / "notes.txt").rules == ("environment-file",)
    assert not guard.match(real / "notes.txt", acts_on=real / "plain.txt").sensitive
    with pytest.raises(WorkerError) as caught:
        guard.check(real / "config", write=True, acts_on=real / ".ssh" / "config")
    assert caught.value.code is ErrorCode.SENSITIVE_PATH
    assert ".ssh/config" in caught.value.message
    with pytest.raises(ValueError):
        guard.match(real / "config", acts_on=Path(".ssh/config"))


def test_wuu_home_is_recognized_through_its_real_path(tmp_path: Path) -> None:
    real = tmp_path.resolve()
    (real / "wuu-data").mkdir()
    (real / "wuu-link").symlink_to(real / "wuu-data")
    guard = SensitivePaths.load(home=real / "home", wuu_home=real / "wuu-link")
    assert guard.match(real / "wuu-link" / "remote.json").read_blocked
    assert guard.match(real / "wuu-data" / "remote.json").read_blocked
    with pytest.raises(WorkerError) as caught:
        guard.check(real / "wuu-data" / "phone.json", write=False)
    assert caught.value.code is ErrorCode.SENSITIVE_PATH
    guard.check(real / "wuu-data" / "config.json", write=True)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WUU_HOME": "/srv/wuu", "HOME": "/home/u"}, "/srv/wuu"),
        ({"WUU_HOME": "/srv/wuu/", "HOME": "/home/u"}, "/srv/wuu"),
        ({"HOME": "/home/u"}, "/home/u/.wuu"),
        ({"WUU_HOME": "", "HOME": "/home/u"}, "/home/u/.wuu"),
        ({"WUU_HOME": "relative/wuu", "HOME": "/home/u"}, "/home/u/.wuu"),
    ],
)
def test_default_wuu_home(environ: dict[str, str], expected: str) -> None:
    assert default_wuu_home(environ) == Path(expected)


def test_default_home_falls_back_to_the_account() -> None:
    assert default_home({"HOME": "/home/u"}) == Path("/home/u")
    assert default_home({}).is_absolute()


@pytest.fixture(params=["openat2", "nofollow-walk"])
def opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each race test runs with openat2 and with the O_NOFOLLOW walk used where openat2 is missing."""
    if request.param == "openat2" and not paths._openat2_works():
        pytest.skip("openat2 is not available here")
    if request.param == "nofollow-walk":
        monkeypatch.setattr(paths, "_openat2_works", lambda: False)
    return str(request.param)


def swap_for_link(directory: Path, target: Path) -> None:
    """What a concurrent writer does between resolution and the open: the directory becomes a symlink."""
    directory.rename(directory.with_name(directory.name + ".moved"))
    directory.symlink_to(target)


def test_a_directory_swapped_for_a_symlink_out_after_resolution_is_refused(tree: Path, opener: str) -> None:
    outside = tree.parent / "outside"
    (outside / "new").mkdir()
    read = resolve_tool_path(tree, "sub/b.txt", confined=True, write=False)
    write = resolve_tool_path(tree, "sub/secret.txt", confined=True, write=True)
    made = resolve_tool_path(tree, "sub/new/deeper/x.txt", confined=True, write=True)
    swap_for_link(tree / "sub", outside)
    for target, flags in ((read, os.O_RDONLY), (write, os.O_WRONLY | os.O_CREAT), (read, os.O_PATH)):
        with pytest.raises(WorkerError) as caught:
            target.open(flags)
        assert caught.value.code is ErrorCode.PATH_OUTSIDE_ROOT
    with pytest.raises(WorkerError) as caught:
        made.make_parents()
    assert caught.value.code is ErrorCode.PATH_OUTSIDE_ROOT
    assert sorted(p.name for p in outside.iterdir()) == ["new", "secret.txt"]
    assert list((outside / "new").iterdir()) == []
    assert (outside / "secret.txt").read_text() == "secret"


def test_a_final_component_swapped_for_a_symlink_is_refused(tree: Path, opener: str) -> None:
    target = resolve_tool_path(tree, "a.txt", confined=True, write=True)
    (tree / "a.txt").unlink()
    (tree / "a.txt").symlink_to(tree.parent / "outside" / "secret.txt")
    for flags in (os.O_RDONLY, os.O_WRONLY, os.O_PATH):
        with pytest.raises(WorkerError) as caught:
            target.open(flags)
        assert caught.value.code is ErrorCode.PATH_OUTSIDE_ROOT
    assert (tree.parent / "outside" / "secret.txt").read_text() == "secret"


def test_unswapped_paths_open_and_parents_are_made_inside(tree: Path, opener: str) -> None:
    target = resolve_tool_path(tree, "link_in_abs/b.txt", confined=True, write=False)
    fd = target.open(os.O_RDONLY)
    try:
        assert os.read(fd, 10) == b"b"
    finally:
        os.close(fd)
    made = resolve_tool_path(tree, "new/deeper/x.txt", confined=True, write=True)
    made.make_parents()
    os.close(made.open(os.O_WRONLY | os.O_CREAT))
    assert (tree / "new" / "deeper" / "x.txt").is_file()
    os.close(resolve_tool_path(tree, ".", confined=True, write=False).open(os.O_PATH))


def test_a_write_to_a_file_with_several_hard_links_is_refused_where_confined(tree: Path, opener: str) -> None:
    os.link(tree.parent / "outside" / "secret.txt", tree / "hard.txt")
    with pytest.raises(WorkerError) as caught:
        resolve_tool_path(tree, "hard.txt", confined=True, write=True)
    assert caught.value.code is ErrorCode.PATH_OUTSIDE_ROOT
    # A link made after resolution is caught on the open file.
    target = resolve_tool_path(tree, "a.txt", confined=True, write=True)
    os.link(tree / "a.txt", tree.parent / "outside" / "a-link.txt")
    with pytest.raises(WorkerError) as caught:
        target.open(os.O_WRONLY)
    assert caught.value.code is ErrorCode.PATH_OUTSIDE_ROOT
    os.close(target.open(os.O_RDONLY))  # reads are allowed
    unconfined = resolve_tool_path(tree, "hard.txt", confined=False, write=True)
    os.close(unconfined.open(os.O_WRONLY))


def test_an_absolute_path_resolves_in_the_file_root_it_lands_in(tmp_path: Path) -> None:
    real = tmp_path.resolve()
    root, notes, elsewhere = real / "root", real / "notes", real / "elsewhere"
    for directory in (root, notes, elsewhere):
        directory.mkdir()
    (notes / "a.txt").write_text("in notes")
    (root / "into-notes").symlink_to(notes)
    found = resolve_tool_path(root, str(notes / "a.txt"), confined=True, write=False, file_roots=[notes])
    assert (found.path, found.root) == (notes / "a.txt", str(notes))
    fd = found.open(os.O_RDONLY)
    try:
        assert os.read(fd, 100) == b"in notes"
    finally:
        os.close(fd)
    # A relative path resolves against the root only; a symlink from the root into a file root leaves the
    # root; a path outside every root is refused; the root comes first where roots nest.
    for path in ("../notes/a.txt", "into-notes/a.txt", str(elsewhere / "b.txt")):
        with pytest.raises(WorkerError) as caught:
            resolve_tool_path(root, path, confined=True, write=False, file_roots=[notes])
        assert caught.value.code is ErrorCode.PATH_OUTSIDE_ROOT, path
    nested = resolve_tool_path(root, str(root / "x"), confined=True, write=True, file_roots=[root / "x"])
    assert nested.root == str(root)


def test_a_second_wuu_home_is_guarded_beside_the_first(tmp_path: Path) -> None:
    real = tmp_path.resolve()
    guard = SensitivePaths.load(home=real / "home", wuu_home=real / "wuu").with_wuu_home(real / "bound-wuu")
    for home in ("wuu", "bound-wuu"):
        assert guard.match(real / home / "auth.json").read_blocked, home
        guard.check(real / home / "config.json", write=True)
    assert not guard.match(real / "other" / "auth.json").read_blocked
