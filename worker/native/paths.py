"""Resolving a workspace tool's path argument against the bound root, and opening it without a race
(the path rules of execute.schema.json).

resolve() decides: it walks the path, symlinks included, and refuses it when it leaves the root. The
answer only holds when it is given, so file tools never reopen the path it returns by name: Resolved.open
opens it with `openat2(2)` from a descriptor of the root, with RESOLVE_BENEATH (no step, symlink or `..`
may leave the root) and RESOLVE_NO_MAGICLINKS (no `/proc/*/fd` or `/proc/*/root` jumps). Where openat2 is
missing (ENOSYS, or refused by a seccomp filter), the open walks the components from the root descriptor
with O_NOFOLLOW instead. Either way a directory swapped for a symlink out of the root between the check
and the open is refused with `path_outside_root`, never followed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wuu.generated.plain import ErrorCode
from wuu.worker.errors import WorkerError

MAX_SYMLINK_HOPS = 40
"""How many symlinks one resolution follows before giving up, as Linux does (its ELOOP limit)."""

# openat2 has number 437 on the architectures that use the unified syscall table; elsewhere the O_NOFOLLOW
# walk is used rather than calling a wrong syscall.
_SYSCALL_MACHINES = frozenset({"x86_64", "aarch64"})
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_EAGAIN_RETRIES = 8
"""openat2 answers EAGAIN when a concurrent rename might have let `..` escape; it is retried this often."""


class _OpenHow(ctypes.Structure):
    """`struct open_how` of openat2(2)."""

    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@dataclass(frozen=True)
class Resolved:
    """A tool's path, resolved (resolve()), with the boundary it is opened under."""

    path: Path
    """The absolute path acted on; its existing part holds no symlink (each was replaced by its target)."""
    root: str | None
    """The root's real path when the boundary applies (`standard`, `read_only`), else None."""
    requested: str
    """The path as the request named it, for error messages."""
    check_opened: Callable[[os.stat_result, bool], None] | None = None
    """Called with the fstat of each file opened for its content, and whether it is opened for writing,
    before anything else touches it; it raises to refuse the file (the sensitive-path guard by identity)."""

    def open(self, flags: int, mode: int = 0o644) -> int:
        """os.open() of the path with `flags` (plus O_NOFOLLOW and O_CLOEXEC), race-free under the boundary.

        Under the boundary the open never leaves the root, whatever was swapped in since resolution:
        it is refused with `path_outside_root` instead, and so is a file opened for writing that has
        more than one hard link (another link may name a file outside). Then `check_opened` sees the file
        (not for an O_PATH open, which reaches no content). Other failures raise OSError.
        """
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        if self.root is None:
            fd = os.open(self.path, flags, mode)
        else:
            fd = _open_beneath(self.root, self._parts(), flags, mode, self._changed)
        writes = flags & os.O_ACCMODE != os.O_RDONLY
        if flags & os.O_PATH or (writes and self.root is not None):
            info = os.fstat(fd)
            if stat.S_ISLNK(info.st_mode):  # O_PATH with O_NOFOLLOW opens a symlink swapped in, not fails
                os.close(fd)
                if self.root is not None:
                    raise self._changed()
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(self.path))
            if writes and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                os.close(fd)
                raise _multi_link(self.requested)
        if self.check_opened is not None and not flags & os.O_PATH:
            try:
                self.check_opened(os.fstat(fd), writes)
            except BaseException:
                os.close(fd)
                raise
        return fd

    def directory(self) -> Path:
        """The path as a command's working directory: under the boundary, first opened (O_PATH) as open()
        does, so that a symlink swapped in gets `path_outside_root`; a missing path or a file is left to
        the spawn to report. The spawn then enters it by name: a swap after this check gains a command
        nothing, as the OS sandbox confines what it touches, not its working directory."""
        if self.root is not None:
            with contextlib.suppress(OSError):
                os.close(self.open(os.O_PATH))
        return self.path

    def make_parents(self) -> None:
        """Create the missing parent directories of the path, under the boundary never outside the root."""
        if self.root is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return
        directory = os.open(self.root, _DIRECTORY)
        try:
            for part in self._parts()[:-1]:
                try:
                    step = _descend(directory, part, self._changed)
                except FileNotFoundError:
                    with contextlib.suppress(FileExistsError):  # made meanwhile: descend into it
                        os.mkdir(part, dir_fd=directory)
                    step = _descend(directory, part, self._changed)
                os.close(directory)
                directory = step
        finally:
            os.close(directory)

    def _parts(self) -> list[str]:
        assert self.root is not None
        return [part for part in os.fspath(self.path)[len(self.root) :].split("/") if part]

    def _changed(self) -> WorkerError:
        return WorkerError(
            ErrorCode.PATH_OUTSIDE_ROOT,
            f"path {self.requested!r} changed while it was opened: a symlink took the place of a directory or"
            " file, so it may lead outside the workspace root",
        )


def resolve_tool_path(
    root: Path, path: str, *, confined: bool, write: bool, file_roots: Sequence[Path] = ()
) -> Resolved:
    """resolve() `path` for a tool; a `write` under the boundary (`confined`) to an existing regular file
    with more than one hard link gets `path_outside_root` (Resolved.open checks it again on the open file).

    Under the boundary an absolute `path` may resolve inside one of `file_roots` (the binding's) instead of
    `root`: inside the first of `root` and `file_roots`, in that order, in which it lands. Whichever root it
    resolves in is the boundary it is then opened under.
    """
    scope = (root, *file_roots) if confined and os.path.isabs(path) else (root,)
    location, real_root = _resolve_in_scope(scope, path, confined)
    if confined and write:
        try:
            info = os.lstat(location)
        except OSError:  # missing, or unreachable: the open reports it
            info = None
        if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise _multi_link(path)
    return Resolved(Path(location), real_root if confined else None, path)


def resolve(root: Path, path: str, *, confined: bool) -> Path:
    """Resolve a tool's `path` argument to an absolute path, following symlinks.

    `root` is the bound root: absolute and existing (it may itself be reached through symlinks). A
    relative `path` is taken against the root, an absolute one as is. The path is walked component by
    component, and each symlink met is replaced by its target (at most MAX_SYMLINK_HOPS of them).
    Components that do not exist, such as a file about to be written or directories about to be created,
    are appended as named: the result is then the resolved existing part plus the remaining names, and a
    dangling symlink resolves to its would-be target. `..` steps back from the resolved location, never
    lexically over a symlink.

    When `confined` (`standard` and `read_only`), every location of the walk must stay inside the root's
    real path: `..` above the root, an absolute path outside it, and a symlink (at any component,
    dangling or not) whose target is outside raise WorkerError `path_outside_root`. An absolute path, or
    an absolute symlink target, may cross directories outside the root on its way in: only where it
    lands counts, and from there on it may not leave again. When not confined (`unconfined`) the walk is
    the same with no boundary.

    Raises WorkerError `invalid_request` for a NUL byte or too many symlinks (a loop), and
    `permission_denied` when a directory on the way cannot be searched (its entries cannot be checked).

    Only metadata is read (lstat, readlink), never content. The answer holds when it is given: a
    concurrent writer can swap a component for a symlink before the caller uses the path, so file tools
    open it with Resolved.open, never by name. Commands are contained by the OS sandbox.
    """
    return Path(_resolve(root, path, confined)[0])


def _resolve_in_scope(roots: Sequence[Path], path: str, confined: bool) -> tuple[str, str]:
    """_resolve() in the first of `roots` that `path` stays inside; the first root's refusal when it stays
    inside none."""
    refusal: WorkerError | None = None
    for root in roots:
        try:
            return _resolve(root, path, confined)
        except WorkerError as error:
            if error.code is not ErrorCode.PATH_OUTSIDE_ROOT:
                raise
            refusal = refusal or error
    assert refusal is not None
    raise refusal


def _resolve(root: Path, path: str, confined: bool) -> tuple[str, str]:
    """resolve(), and the root's real path."""
    if "\0" in path:
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"path {path!r} contains a NUL byte")
    real_root = os.path.realpath(root)
    start = "/" if os.path.isabs(path) else real_root
    location = _walk(start, path, real_root, path if confined else None)
    if confined and not _within(location, real_root):
        raise _outside(path)
    return location, real_root


def _walk(start: str, path: str, real_root: str, confined_path: str | None) -> str:
    """Walk `path` from `start`; `confined_path` is the path to name in errors, or None when unconfined."""
    location = start
    entered = _within(location, real_root)
    # The components still to walk, last first; None marks where the target of an absolute symlink, met
    # inside the root, ends.
    pending: list[str | None] = list(reversed(path.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part is None:
            # A symlink inside the root pointed to an absolute target: that target must be inside too.
            if confined_path is not None and not _within(location, real_root):
                raise _outside(confined_path)
            entered = True
            continue
        if part in ("", "."):
            continue
        if part == "..":
            location = os.path.dirname(location)
        else:
            candidate = os.path.join(location, part)
            if _is_symlink(candidate, path):
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise WorkerError(
                        ErrorCode.INVALID_REQUEST, f"path {path!r}: too many levels of symbolic links"
                    )
                try:
                    target = os.readlink(candidate)
                except OSError as error:
                    if error.errno not in (errno.EINVAL, errno.ENOENT):
                        raise
                    pending.append(part)  # no symlink any more since the lstat: look at it again
                    continue
                if os.path.isabs(target):
                    if entered:
                        pending.append(None)
                    location, entered = "/", _within("/", real_root)
                pending.extend(reversed(target.split("/")))
                continue
            location = candidate
        if _within(location, real_root):
            entered = True
        elif entered and confined_path is not None:
            raise _outside(confined_path)
    return location


def _is_symlink(candidate: str, path: str) -> bool:
    """Whether `candidate` is a symlink; a missing entry (or one below a non-directory) is not one."""
    try:
        return stat.S_ISLNK(os.lstat(candidate).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except PermissionError as error:
        raise WorkerError(ErrorCode.PERMISSION_DENIED, f"path {path!r}: {error.strerror}") from error
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"path {path!r}: {error.strerror}") from error
        raise


def _within(location: str, real_root: str) -> bool:
    return location == real_root or location.startswith(real_root.rstrip("/") + "/")


def _outside(path: str) -> WorkerError:
    return WorkerError(ErrorCode.PATH_OUTSIDE_ROOT, f"path {path!r} resolves outside the workspace root")


def _multi_link(path: str) -> WorkerError:
    return WorkerError(
        ErrorCode.PATH_OUTSIDE_ROOT,
        f"path {path!r} names a file with more than one hard link, which may also be named outside the"
        " workspace root: it is not written",
    )


def _open_beneath(
    root: str, parts: list[str], flags: int, mode: int, changed: Callable[[], WorkerError]
) -> int:
    """Open root/`parts` without leaving `root`: openat2 RESOLVE_BENEATH, else an O_NOFOLLOW walk."""
    root_fd = os.open(root, _DIRECTORY)
    try:
        if _openat2_works():
            for _ in range(_EAGAIN_RETRIES):
                try:
                    return _openat2(root_fd, "/".join(parts) or ".", flags, mode)
                except OSError as error:
                    # EXDEV: the walk would leave the root; ELOOP: a symlink where resolution found none
                    # (at the final component, or a magic link), or too many of them.
                    if error.errno in (errno.EXDEV, errno.ELOOP):
                        raise changed() from None
                    if error.errno != errno.EAGAIN:
                        raise
            raise changed()
        return _walk_open(root_fd, parts, flags, mode, changed)
    finally:
        os.close(root_fd)


def _walk_open(
    root_fd: int, parts: list[str], flags: int, mode: int, changed: Callable[[], WorkerError]
) -> int:
    """The fallback: open each directory of `parts` from `root_fd` with O_NOFOLLOW, then the last one.

    Resolution replaced every symlink by its target, so any symlink met now was swapped in: it is refused
    (`changed`) rather than followed, even one that would stay inside.
    """
    if not parts:
        return os.open(".", flags, mode, dir_fd=root_fd)
    directory = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            step = _descend(directory, part, changed)
            os.close(directory)
            directory = step
        try:
            return os.open(parts[-1], flags, mode, dir_fd=directory)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise changed() from None
            raise
    finally:
        os.close(directory)


def _descend(directory: int, name: str, changed: Callable[[], WorkerError]) -> int:
    """An O_PATH descriptor of the directory `name` in `directory`; a symlink there is refused (`changed`)."""
    try:
        return os.open(name, _DIRECTORY, dir_fd=directory)
    except OSError as error:
        if error.errno in (errno.ENOTDIR, errno.ELOOP):
            try:
                is_link = stat.S_ISLNK(os.lstat(name, dir_fd=directory).st_mode)
            except OSError:
                is_link = False
            if is_link:
                raise changed() from None
        raise


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    # The kernel refuses a mode without O_CREAT or O_TMPFILE.
    creates = flags & os.O_CREAT or flags & os.O_TMPFILE == os.O_TMPFILE
    how = _OpenHow(flags, mode if creates else 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd = _syscall()(_SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


@functools.cache
def _syscall() -> Callable[..., int]:
    # Explicit long-sized arguments: syscall(2) is variadic.
    function: Any = ctypes.CDLL(None, use_errno=True)["syscall"]
    function.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_long]
    function.restype = ctypes.c_long
    return function  # type: ignore[no-any-return]


@functools.cache
def _openat2_works() -> bool:
    """Whether openat2 can be called here: the machine's syscall number is known and a probe of `.` opens."""
    if platform.machine() not in _SYSCALL_MACHINES:
        return False
    try:
        os.close(_openat2(-100, ".", os.O_PATH | os.O_CLOEXEC, 0))  # -100: AT_FDCWD
    except OSError as error:
        # ENOSYS: a kernel before 5.6; EPERM: a seccomp filter that refuses unknown syscalls so.
        if error.errno in (errno.ENOSYS, errno.EPERM):
            return False
        raise
    return True
