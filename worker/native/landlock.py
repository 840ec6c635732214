"""A minimal ctypes binding of Linux Landlock: probe the ABI, build a ruleset, restrict a process.

The filesystem rights, the scopes (ABI 6: abstract Unix sockets and signals) and the TCP network rights
(ABI 4) are bound. A ruleset handles the network rights only when asked (the binding's `command_network`,
spec/schema/worker/initialize.schema.json), and then allows no port.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import functools
import os
import platform
import stat
import sys
from collections.abc import Callable, Mapping
from typing import Any

# Landlock's syscalls carry these numbers on every architecture that uses the unified syscall table. Other
# machines (alpha and mips use offsets) are not listed, so they fail closed instead of calling the wrong syscall.
_SYSCALL_MACHINES = frozenset({"x86_64", "aarch64"})
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446

_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38


class AccessFs(enum.IntFlag):
    """Landlock's filesystem access rights (`LANDLOCK_ACCESS_FS_*`)."""

    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13  # ABI 2
    TRUNCATE = 1 << 14  # ABI 3
    IOCTL_DEV = 1 << 15  # ABI 5


# The rights that make sense on a file rather than a directory; the kernel rejects the others on a file rule.
FILE_ACCESS = (
    AccessFs.EXECUTE | AccessFs.WRITE_FILE | AccessFs.READ_FILE | AccessFs.TRUNCATE | AccessFs.IOCTL_DEV
)
ALL_ACCESS_FS = AccessFs(max(AccessFs) * 2 - 1)


class Scope(enum.IntFlag):
    """Landlock's scopes (`LANDLOCK_SCOPE_*`, ABI 6): what a domain's processes may not reach outside it."""

    ABSTRACT_UNIX_SOCKET = 1 << 0
    """Connecting or sending to an abstract Unix socket bound outside the domain."""
    SIGNAL = 1 << 1
    """Signalling a process outside the domain."""


_FIRST_SCOPED_ABI = 6


class AccessNet(enum.IntFlag):
    """Landlock's network access rights (`LANDLOCK_ACCESS_NET_*`, ABI 4)."""

    BIND_TCP = 1 << 0
    CONNECT_TCP = 1 << 1


FIRST_NETWORK_ABI = 4


def handled_scopes(abi: int) -> Scope:
    """Every scope the given ABI can restrict (none before ABI 6)."""
    return Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL if abi >= _FIRST_SCOPED_ABI else Scope(0)


# The highest right each ABI knows; ABIs 4, 6 and 7 added no filesystem right.
_LAST_RIGHT_BY_ABI = (
    (5, AccessFs.IOCTL_DEV),
    (3, AccessFs.TRUNCATE),
    (2, AccessFs.REFER),
    (1, AccessFs.MAKE_SYM),
)


def handled_access_fs(abi: int) -> AccessFs:
    """Every filesystem right the given ABI can restrict (none for ABI 0)."""
    for first_abi, last_right in _LAST_RIGHT_BY_ABI:
        if abi >= first_abi:
            return AccessFs(last_right * 2 - 1)
    return AccessFs(0)


class _RulesetAttr(ctypes.Structure):
    # `struct landlock_ruleset_attr` as of ABI 6. Only as much of it as a ruleset uses is passed: the first
    # field alone, which every kernel since ABI 1 accepts, when it handles no scope.
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # The kernel's struct is packed: 12 bytes, no padding after parent_fd.
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _libc_function(name: str, argtypes: list[type[ctypes._SimpleCData[Any]]]) -> Callable[..., int]:
    # `CDLL[...]` gives a fresh function object, so each syscall gets its own argtypes; explicit long-sized
    # arguments matter because syscall(2) and prctl(2) are variadic.
    function = ctypes.CDLL(None, use_errno=True)[name]
    function.argtypes = argtypes
    function.restype = ctypes.c_long
    return function


_long, _ptr = ctypes.c_long, ctypes.c_void_p
if sys.platform == "linux":
    _create_ruleset = _libc_function("syscall", [_long, _ptr, _long, _long])
    _add_rule = _libc_function("syscall", [_long, _long, _long, _ptr, _long])
    _restrict_self = _libc_function("syscall", [_long, _long, _long])
    _prctl = _libc_function("prctl", [ctypes.c_int, _long, _long, _long, _long])


def _last_error() -> OSError:
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code))


@functools.cache
def _probe() -> tuple[int, str]:
    if sys.platform != "linux":
        return 0, f"Landlock is Linux-only and this is {sys.platform}"
    machine = platform.machine()
    if machine not in _SYSCALL_MACHINES:
        return 0, f"the Landlock syscall numbers are not known for {machine}"
    abi = _create_ruleset(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    if abi >= 0:
        return int(abi), ""
    code = ctypes.get_errno()
    if code == errno.ENOSYS:
        return 0, "the kernel is built without Landlock"
    if code == errno.EOPNOTSUPP:
        return 0, "Landlock is disabled at boot (it is not in the kernel's lsm= list)"
    return 0, f"the Landlock probe failed: {os.strerror(code)}"


def abi_version() -> int:
    """The running kernel's Landlock ABI version, or 0 when Landlock is unavailable."""
    return _probe()[0]


def unavailable_reason() -> str:
    """Why `abi_version()` is 0, for error messages; empty when Landlock is available."""
    return _probe()[1]


def create_ruleset(
    rules: Mapping[str | os.PathLike[str], AccessFs], abi: int, *, no_tcp: bool = False
) -> int:
    """Build a ruleset that handles every filesystem right and every scope of `abi` and grants `rules[path]`
    beneath each path; with `no_tcp`, it also handles binding and connecting TCP sockets, and allows no port
    (OSError ENOSYS below ABI 4).

    Rights the ABI does not know are dropped from a rule, and so are directory-only rights on a path that is not
    a directory, so a rule may ask for `ALL_ACCESS_FS`. Everything a rule does not grant is denied once the
    ruleset is enforced, and so is reaching out of the domain where a scope applies (`handled_scopes`).
    Returns the ruleset's file descriptor (close-on-exec: the kernel creates it so); raises OSError when a
    path cannot be opened or the kernel refuses the ruleset.
    """
    handled = handled_access_fs(abi)
    if not handled:
        raise OSError(errno.ENOSYS, f"Landlock ABI {abi} restricts nothing")
    if no_tcp and abi < FIRST_NETWORK_ABI:
        raise OSError(
            errno.ENOSYS, f"Landlock ABI {abi} cannot restrict TCP: no_tcp needs ABI {FIRST_NETWORK_ABI}"
        )
    scoped = handled_scopes(abi)
    network = AccessNet.BIND_TCP | AccessNet.CONNECT_TCP if no_tcp else AccessNet(0)
    attr = _RulesetAttr(handled_access_fs=handled, handled_access_net=network, scoped=scoped)
    # Only as much of the struct as the ruleset uses: older kernels refuse a longer one.
    fields = 3 if scoped else 2 if network else 1
    size = fields * ctypes.sizeof(ctypes.c_uint64)
    ruleset_fd = int(_create_ruleset(_SYS_CREATE_RULESET, ctypes.byref(attr), size, 0))
    if ruleset_fd < 0:
        raise _last_error()
    try:
        for path, access in rules.items():
            _add_path_rule(ruleset_fd, path, access & handled)
    except BaseException:
        os.close(ruleset_fd)
        raise
    return ruleset_fd


def _add_path_rule(ruleset_fd: int, path: str | os.PathLike[str], access: AccessFs) -> None:
    parent_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not stat.S_ISDIR(os.fstat(parent_fd).st_mode):
            access &= FILE_ACCESS
        if not access:
            return  # The kernel rejects an empty rule, and it would grant nothing anyway.
        attr = _PathBeneathAttr(allowed_access=access, parent_fd=parent_fd)
        if _add_rule(_SYS_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0) != 0:
            raise _last_error()
    finally:
        os.close(parent_fd)


def restrict_self(ruleset_fd: int) -> None:
    """Enforce the ruleset on the calling thread and its future children, for good, in a new domain.

    Sets no_new_privs first (Landlock requires it of an unprivileged caller); both are per thread, so the
    worker calls this only in a command's own process, between fork and exec. Raises OSError with the errno
    on failure.
    """
    if sys.platform != "linux":
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _last_error()
    if _restrict_self(_SYS_RESTRICT_SELF, ruleset_fd, 0) != 0:
        raise _last_error()
