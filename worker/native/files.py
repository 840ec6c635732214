"""The file tools of `execute`: read_file, write_file, edit_file, list_dir (spec: execute.schema.json).

Paths arrive resolved and checked (paths.resolve_tool_path, sensitive.check) and are only ever opened
through Resolved.open, so a symlink swapped in after resolution cannot lead a tool out of the root; a
listing descends from the directory's descriptor, never by name.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wuu.generated.plain import (
    DirEntry,
    DirEntryType,
    EditFileArguments,
    EditFileMetadata,
    ErrorCode,
    ListDirArguments,
    ListDirMetadata,
    ReadFileArguments,
    ReadFileMetadata,
    ToolResult,
    WriteFileArguments,
    WriteFileMetadata,
)

from ..errors import WorkerError
from .paths import Resolved


@contextmanager
def os_errors(path: Path) -> Iterator[None]:
    """Turn the OS's refusals into protocol errors that name the path."""
    try:
        yield
    except FileNotFoundError:
        raise WorkerError(ErrorCode.NOT_FOUND, str(path)) from None
    except NotADirectoryError:
        raise WorkerError(ErrorCode.NOT_FOUND, f"{path}: a parent is not a directory") from None
    except IsADirectoryError:
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"{path} is a directory") from None
    except PermissionError:
        raise WorkerError(ErrorCode.PERMISSION_DENIED, str(path)) from None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"{path}: {error.strerror}") from None
        if error.errno == errno.ELOOP:
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"{path} is a symlink") from None
        if error.errno == errno.ENXIO:  # a FIFO without a reader, opened for writing without blocking
            raise WorkerError(ErrorCode.INVALID_REQUEST, f"{path} is not a regular file") from None
        raise


def read_file(target: Resolved, args: ReadFileArguments) -> ToolResult:
    with os_errors(target.path):
        fd = _open_regular(target, os.O_RDONLY)
        try:
            info = os.fstat(fd)
            # pread refuses offsets past the largest file size; such a read just finds nothing.
            data = (
                os.pread(fd, args.max_bytes, args.offset_bytes) if args.offset_bytes < info.st_size else b""
            )
        finally:
            os.close(fd)
    metadata = ReadFileMetadata(
        size=info.st_size,
        offset_bytes=args.offset_bytes,
        returned_bytes=len(data),
        eof=args.offset_bytes + len(data) >= info.st_size,
    )
    return ToolResult(output=data.decode("utf-8", "replace"), is_error=False, metadata=metadata.to_wire())


def _open_regular(target: Resolved, flags: int) -> int:
    """Open a regular file; anything else (a directory, a FIFO, a device) is refused.

    O_NONBLOCK keeps a FIFO from blocking the worker in open(); it changes nothing for a regular file.
    """
    fd = target.open(flags | os.O_NONBLOCK)
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        if stat.S_ISDIR(kind):
            raise IsADirectoryError(target.path)
        raise WorkerError(ErrorCode.INVALID_REQUEST, f"{target.path} is not a regular file")
    return fd


def _open_for_writing(target: Resolved) -> tuple[int, bool]:
    """The file opened for writing, created when missing, and whether it was created."""
    while True:
        try:
            return _open_regular(target, os.O_WRONLY), False
        except FileNotFoundError:
            try:
                return _open_regular(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL), True
            except FileExistsError:  # created meanwhile: open it as an existing file
                continue


def _write(target: Resolved, data: bytes) -> bool:
    """Replace the file's content (creating it), never following a symlink; whether it was created."""
    fd, created = _open_for_writing(target)
    try:
        os.ftruncate(fd, 0)  # only now: a FIFO or device was refused before anything changed
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return created


def write_file(target: Resolved, args: WriteFileArguments) -> ToolResult:
    path = target.path
    with os_errors(path):
        if args.create_dirs:
            target.make_parents()
        data = args.content.encode("utf-8")
        created = _write(target, data)
    metadata = WriteFileMetadata(bytes_written=len(data), created=created)
    verb = "created" if created else "updated"
    return ToolResult(
        output=f"{verb} {path} ({len(data)} bytes)", is_error=False, metadata=metadata.to_wire()
    )


def edit_file(target: Resolved, args: EditFileArguments) -> ToolResult:
    path = target.path
    with os_errors(path):
        fd = _open_regular(target, os.O_RDONLY)
        try:
            raw = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
        finally:
            os.close(fd)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ToolResult(output=f"{path} is not UTF-8 text; it was not changed", is_error=True)
    count = text.count(args.old_string)
    if count == 0:
        return ToolResult(output=f"old_string was not found in {path}; it was not changed", is_error=True)
    if count > 1 and not args.replace_all:
        return ToolResult(
            output=f"old_string occurs {count} times in {path}; give more context or set replace_all",
            is_error=True,
        )
    with os_errors(path):
        _write(target, text.replace(args.old_string, args.new_string).encode("utf-8"))
    metadata = EditFileMetadata(replacements=count)
    return ToolResult(
        output=f"replaced {count} occurrence(s) in {path}", is_error=False, metadata=metadata.to_wire()
    )


_LISTABLE = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _entry_type(mode: int) -> DirEntryType:
    if stat.S_ISREG(mode):
        return DirEntryType.FILE
    if stat.S_ISDIR(mode):
        return DirEntryType.DIRECTORY
    if stat.S_ISLNK(mode):
        return DirEntryType.SYMLINK
    return DirEntryType.OTHER


def list_dir(target: Resolved, args: ListDirArguments) -> ToolResult:
    entries: list[DirEntry] = []

    def walk(directory: int, prefix: str, depth: int) -> None:
        with os.scandir(directory) as scan:
            for item in scan:
                if item.name.startswith(".") and not args.include_hidden:
                    continue
                info = item.stat(follow_symlinks=False)
                kind = _entry_type(info.st_mode)
                size = info.st_size if kind is not DirEntryType.DIRECTORY else 0
                entries.append(DirEntry(path=prefix + item.name, type=kind, size=size))
                if kind is DirEntryType.DIRECTORY and depth > 1:
                    try:
                        below = os.open(item.name, _LISTABLE, dir_fd=directory)
                    except OSError:  # gone, or swapped for a symlink since it was listed: not followed
                        continue
                    try:
                        walk(below, f"{prefix}{item.name}/", depth - 1)
                    finally:
                        os.close(below)

    path = target.path
    with os_errors(path):
        # O_PATH first: a FIFO or a file is told apart (invalid_request) from a missing path (not_found).
        handle = target.open(os.O_PATH)
        try:
            if not stat.S_ISDIR(os.fstat(handle).st_mode):
                raise WorkerError(ErrorCode.INVALID_REQUEST, f"{path} is not a directory")
            directory = os.open(".", _LISTABLE, dir_fd=handle)
        finally:
            os.close(handle)
        try:
            walk(directory, "", args.depth)
        finally:
            os.close(directory)
    entries.sort(key=lambda entry: entry.path)
    lines = [entry.path + ("/" if entry.type is DirEntryType.DIRECTORY else "") for entry in entries]
    metadata = ListDirMetadata(entries=entries)
    return ToolResult(output="\n".join(lines), is_error=False, metadata=metadata.to_wire())
