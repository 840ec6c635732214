"""The sensitive-path guard: the rules of the spec's data/sensitive_paths.json, held in every permission mode."""

from __future__ import annotations

import functools
import os
import pwd
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wuu.generated.plain import (
    ErrorCode,
    SensitiveHomeRule,
    SensitivePathAccess,
    SensitivePathHome,
    SensitivePathRule,
    SensitivePathRules,
    spec_data,
)
from wuu.worker.errors import WorkerError

# Only ASCII letters fold: without re.ASCII, Unicode folding would let e.g. the Kelvin sign match `k`.
_FLAGS = re.ASCII | re.IGNORECASE | re.DOTALL

_Components = tuple[str, ...]
_Glob = tuple[re.Pattern[str], ...]


@dataclass(frozen=True)
class SensitiveMatch:
    """What the rules say about one path."""

    sensitive: bool
    """Some rule matches, so writes are refused."""
    read_blocked: bool
    """A matching rule's access is `read_write`, so reads of the content are refused too."""
    rules: tuple[str, ...]
    """The ids of the matching rules, in the order of the rule list."""


@dataclass(frozen=True)
class _Rule:
    id: str
    read_blocked: bool
    suffixes: tuple[_Glob, ...]
    """Globs matched against as many trailing components of the path."""
    wholes: tuple[_Glob, ...]
    """Globs matched against all the components of the path."""
    exempt: tuple[re.Pattern[str], ...]
    named: tuple[tuple[Path, _Glob], ...] = ()
    """For an `under_home` rule: its home directory, with each glob relative to it, to find the files it names."""

    def matches(self, parts: _Components) -> bool:
        if not parts or any(glob.fullmatch(parts[-1]) for glob in self.exempt):
            return False
        trailing = any(len(glob) <= len(parts) and _fits(glob, parts[-len(glob) :]) for glob in self.suffixes)
        return trailing or any(len(glob) == len(parts) and _fits(glob, parts) for glob in self.wholes)


class SensitivePaths:
    """The sensitive-path guard of the dedicated file tools, in every permission mode.

    A path is checked in two forms, and is sensitive when either matches: the path as the tool named it
    (made absolute, lexically normalized) and the path the operation acts on. So callers pass the path
    as requested, joined to the root when relative (`root / path`), and the result of `paths.resolve`
    beside it: a symlink named `.env` must be refused even when it points to an ordinary file, and an
    ordinary name must be refused when the write would land on `.env`, also through a dangling symlink
    (or a chain of them) whose target does not exist yet, or through `..` after a symlink (`link/../x`
    acts on the parent of the link's target, not on the root's `x`).

    Names are not enough for the files that `under_home` rules name (Wuu's credentials): another hard link,
    or another way to the same directory, reaches the same file under a name no rule matches. So the file a
    tool has opened is checked too (`check_opened`), by identity against those files as they are now.
    """

    def __init__(self, rules: SensitivePathRules, *, home: Path, wuu_home: Path | tuple[Path, ...]) -> None:
        """Compile `rules`; `home` (`$HOME`) and `wuu_home` (one or more) are the directories `under_home`
        rules use."""
        self._source = rules
        self._homes = {
            SensitivePathHome.USER: (home,),
            SensitivePathHome.WUU: wuu_home if isinstance(wuu_home, tuple) else (wuu_home,),
        }

    @functools.cached_property
    def _rules(self) -> tuple[_Rule, ...]:
        # Compiled on the first check, not at start-up: a worker that touches no file never needs them.
        return tuple(_compile(rule, self._homes) for rule in self._source.rules)

    def with_wuu_home(self, wuu_home: Path) -> SensitivePaths:
        """This guard with `wuu_home` one more Wuu home (a binding's `wuu_home` file root)."""
        homes = self._homes[SensitivePathHome.WUU]
        if wuu_home in homes:
            return self
        return SensitivePaths(
            self._source, home=self._homes[SensitivePathHome.USER][0], wuu_home=(*homes, wuu_home)
        )

    @classmethod
    def load(cls, *, home: Path, wuu_home: Path) -> SensitivePaths:
        """The guard built from the rules packaged with wuu (the spec's data/sensitive_paths.json)."""
        rules = SensitivePathRules.model_validate_json(spec_data("sensitive_paths.json"))
        return cls(rules, home=home, wuu_home=wuu_home)

    def match(self, path: Path, acts_on: Path | None = None) -> SensitiveMatch:
        """Match an absolute `path` against every rule: lexically, and as `acts_on`, the resolved path that
        the operation acts on (`paths.resolve`); without it, as the real path of `path` (lstat and readlink
        only; a dangling symlink gives its would-be target)."""
        forms = _forms(path, acts_on)
        found = [rule for rule in self._rules if any(rule.matches(parts) for parts in forms)]
        return SensitiveMatch(
            sensitive=bool(found),
            read_blocked=any(rule.read_blocked for rule in found),
            rules=tuple(rule.id for rule in found),
        )

    def check_opened(self, opened: os.stat_result, path: Path, *, write: bool) -> None:
        """Refuse the file a tool opened (`opened`, its fstat) for writing, or for reading when the rule's
        access is `read_write`, with `sensitive_path` when it is a file that an `under_home` rule names:
        the same device and inode as one found under that home at the time of the call. `path` is the
        path as requested, for the message."""
        for rule in self._rules:
            if not rule.named or not (write or rule.read_blocked):
                continue
            for named in _named_files(rule.named):
                if any(glob.fullmatch(named.name) for glob in rule.exempt):
                    continue
                try:
                    info = os.stat(named)
                except OSError:  # gone meanwhile, or unreachable: it names no file the tool could open
                    continue
                if (info.st_dev, info.st_ino) == (opened.st_dev, opened.st_ino):
                    operation = "writing" if write else "reading"
                    raise WorkerError(
                        ErrorCode.SENSITIVE_PATH,
                        f"{operation} {os.fspath(path)!r} is refused: sensitive path ({rule.id}): it is the"
                        f" file {os.fspath(named)!r}",
                    )

    def check(self, path: Path, *, write: bool, acts_on: Path | None = None) -> None:
        """Refuse a write to a sensitive `path`, or a read of a read-blocked one, with `sensitive_path`
        (`path` and `acts_on` as for `match`)."""
        found = self.match(path, acts_on)
        if found.read_blocked or (write and found.sensitive):
            operation = "writing" if write else "reading"
            leads = (
                f" (it leads to {os.fspath(acts_on)!r})" if acts_on is not None and acts_on != path else ""
            )
            raise WorkerError(
                ErrorCode.SENSITIVE_PATH,
                f"{operation} {os.fspath(path)!r}{leads} is refused: sensitive path ({', '.join(found.rules)})",
            )


def default_home(environ: Mapping[str, str]) -> Path:
    """The user's home directory: `$HOME` if set and absolute, else the account's passwd entry."""
    home = environ.get("HOME", "")
    if os.path.isabs(home):
        return Path(os.path.normpath(home))
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        raise RuntimeError(
            "no home directory: HOME is not an absolute path and the user has no passwd entry"
        ) from None


def default_wuu_home(environ: Mapping[str, str]) -> Path:
    """Wuu home: `$WUU_HOME` if set and absolute, else `~/.wuu` (`~` as default_home gives it)."""
    wuu_home = environ.get("WUU_HOME", "")
    if os.path.isabs(wuu_home):
        return Path(os.path.normpath(wuu_home))
    return default_home(environ) / ".wuu"


def _forms(path: Path, acts_on: Path | None = None) -> tuple[_Components, ...]:
    """The components of `path` lexically normalized, and of `acts_on` (else of the real path of `path`)
    when that differs."""
    text = os.fspath(path)
    if not os.path.isabs(text) or (acts_on is not None and not acts_on.is_absolute()):
        raise ValueError(f"sensitive-path checks need absolute paths, not {text!r} ({acts_on})")
    lexical = _components(text)
    target = _components(os.fspath(acts_on) if acts_on is not None else os.path.realpath(text))
    return (lexical,) if target == lexical else (lexical, target)


def _components(path: str) -> _Components:
    return tuple(part for part in os.path.normpath(path).split("/") if part)


def _compile(rule: SensitivePathRule, homes: Mapping[SensitivePathHome, tuple[Path, ...]]) -> _Rule:
    globs = tuple(tuple(_glob(part) for part in pattern.split("/")) for pattern in rule.patterns)
    named: tuple[tuple[Path, _Glob], ...] = ()
    if isinstance(rule, SensitiveHomeRule):
        # The home is a literal prefix: its characters are matched as themselves, case-insensitively.
        prefixes = [
            tuple(re.compile(re.escape(part), _FLAGS) for part in form)
            for home in homes[rule.home]
            for form in _forms(home)
        ]
        suffixes: tuple[_Glob, ...] = ()
        wholes = tuple(prefix + glob for prefix in prefixes for glob in globs)
        named = tuple((home, glob) for home in homes[rule.home] for glob in globs)
    else:
        suffixes, wholes = globs, ()
    return _Rule(
        id=rule.id,
        read_blocked=rule.access is SensitivePathAccess.READ_WRITE,
        suffixes=suffixes,
        wholes=wholes,
        exempt=tuple(_glob(name) for name in rule.exempt or ()),
        named=named,
    )


def _named_files(named: tuple[tuple[Path, _Glob], ...]) -> list[Path]:
    """The paths that exist under each home and match its glob, component by component."""
    found: list[Path] = []
    for home, glob in named:
        level = [home]
        for pattern in glob:
            below: list[Path] = []
            for directory in level:
                try:
                    with os.scandir(directory) as entries:
                        below += [
                            directory / entry.name for entry in entries if pattern.fullmatch(entry.name)
                        ]
                except OSError:  # missing, not a directory, or unreadable: it holds nothing to find
                    continue
            level = below
        found += level
    return found


def _glob(component: str) -> re.Pattern[str]:
    """A compiled glob over one component: `*` any run, `?` one character, anything else itself."""
    return re.compile("".join(_glob_piece(char) for char in component), _FLAGS)


def _glob_piece(char: str) -> str:
    if char == "*":
        return ".*"
    if char == "?":
        return "."
    return re.escape(char)


def _fits(glob: _Glob, parts: _Components) -> bool:
    return all(pattern.fullmatch(part) for pattern, part in zip(glob, parts, strict=True))
