"""Plain-Python twins of the models a worker or `wuu-host adapter` decodes (the worker protocol's messages and
the configuration they read): decoding validates against the def, and nothing here imports pydantic or
jsonschema, so a worker answers `initialize` without paying for either.

Each class below is generated (tools/plain.py) from its def in the spec, with the attribute and enum member
names of its pydantic model (`models`). `model_validate` and `model_validate_json` check a value the way the
schema does (strict: `"1"` is no integer, `4.0` neither; an optional field may be absent but never null) and
raise `Invalid`, naming the field by its wire path. The constructor, like pydantic's `model_construct`, trusts
its caller: what a worker builds to send is checked where it leaves (the worker SDK decodes every reply it
encodes). `to_wire()` writes exactly the fields that were set, so a decoded message re-encodes to its JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Self

from .keywords import limit_violation  # noqa: F401 (the generated checks below)
from .methods import MethodSpec, ToolSpec  # noqa: F401 (the method tables below)

_ABSENT: Any = object()


class Invalid(ValueError):
    """A value that is not its def's. `location` is the dotted wire path of the first problem ("" for the
    value as a whole; an array item by its index), `message` what is wrong there."""

    def __init__(self, location: str, message: str) -> None:
        super().__init__(f"{location or 'the value'}: {message}")
        self.location = location
        self.message = message


class PlainModel:
    """The base class of the plain twins: fields by attribute, the wire by `__fields__`."""

    __slots__ = ("_extra", "_set")
    # (attribute, wire name, required, default) of each field, in the def's order.
    __fields__: ClassVar[tuple[tuple[str, str, bool, Any], ...]] = ()
    _set: frozenset[str]
    # The extension keys of a decoded open def (`additionalProperties: true`), else None.
    _extra: dict[str, Any] | None

    def __init__(self, **values: Any) -> None:
        given = set()
        for attribute, wire, required, default in self.__fields__:
            value = values.pop(attribute, _ABSENT)
            if value is _ABSENT or (value is None and not required):
                if required:
                    raise TypeError(f"{type(self).__name__}: {attribute} ({wire}) is required")
                # A list or object default is copied (`_dump` builds new ones): no two instances share one.
                value = _dump(default) if isinstance(default, list | dict) else default
            else:
                given.add(attribute)
            setattr(self, attribute, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no field {sorted(values)[0]!r}")
        self._set = frozenset(given)
        self._extra = None

    @classmethod
    def _decode(cls, value: Any, at: str) -> Self:
        raise NotImplementedError

    @classmethod
    def model_validate(cls, value: Any) -> Self:
        """`value` (decoded JSON) as this def; `Invalid` when it is not. An instance of the class, here or
        nested where its def belongs, is taken as it is."""
        return cls._decode(value, "")

    @classmethod
    def model_validate_json(cls, data: str | bytes, *, strict: bool = True) -> Self:
        """JSON text as this def (always strict; `strict` is accepted for the models' signature)."""
        import orjson  # here, not above: the configuration a `command` adapter reads first is a file's dict

        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError as error:
            raise Invalid("", f"is not JSON: {error}") from None
        return cls._decode(value, "")

    def to_wire(self) -> dict[str, Any]:
        """The message as JSON, by wire name: the fields that were set (a nullable one also as null) and the
        extensions it was decoded with."""
        wire = {
            name: _wire(getattr(self, attribute))
            for attribute, name, _, _ in self.__fields__
            if attribute in self._set
        }
        if self._extra:
            wire.update(self._extra)
        return wire

    def model_dump(self) -> dict[str, Any]:
        """Every field by attribute name, defaults included, nested models as dicts."""
        return {attribute: _dump(getattr(self, attribute)) for attribute, _, _, _ in self.__fields__}

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with the fields in `update` (by attribute name) replaced, unchecked, as pydantic's."""
        from copy import deepcopy  # here: the module's import is a tenth of its own

        copy = type(self).__new__(type(self))
        for attribute, _, _, _ in self.__fields__:
            value = getattr(self, attribute)
            setattr(copy, attribute, deepcopy(value) if deep else value)
        copy._extra = deepcopy(self._extra) if deep else self._extra
        copy._set = self._set
        if update:
            unknown = set(update) - {attribute for attribute, _, _, _ in self.__fields__}
            if unknown:
                raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
            for attribute, value in update.items():
                setattr(copy, attribute, value)
            copy._set = self._set | set(update)
        return copy

    @property
    def model_fields_set(self) -> frozenset[str]:
        """The attributes that were set, by a decoded message or the constructor."""
        return self._set

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.model_dump() == other.model_dump() and self._extra == other._extra

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{attribute}={getattr(self, attribute)!r}" for attribute, _, _, _ in self.__fields__
        )
        return f"{type(self).__name__}({shown})"


def _wire(value: Any) -> Any:
    if isinstance(value, PlainModel):
        return value.to_wire()
    if type(value) is list:
        return [_wire(item) for item in value]
    if type(value) is dict:
        return {key: _wire(item) for key, item in value.items()}
    if isinstance(value, StrEnum):
        return value.value
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, PlainModel):
        return value.model_dump()
    if type(value) is list:
        return [_dump(item) for item in value]
    if type(value) is dict:
        return {key: _dump(item) for key, item in value.items()}
    return value


class _Pattern:
    """A pattern compiled on its first use: a process checks few of the spec's patterns, and compiling them
    all would cost every worker's start-up."""

    __slots__ = ("search", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.search = self._compile_and_search

    def _compile_and_search(self, text: str) -> re.Match[str] | None:
        compiled = re.compile(self.source)
        self.search = lambda text: compiled.search(text)
        return compiled.search(text)


def spec_data(name: str) -> str:
    """The text of `schema/data/<name>` (the spec's data files packaged beside this module), read without
    `importlib.resources`, whose import costs more than the read."""
    return Path(__file__).with_name("schema").joinpath("data", name).read_text("utf-8")


def _anything(value: Any, at: str) -> Any:
    return value


def _at(at: str, key: str | int) -> str:
    return f"{at}.{key}" if at else str(key)


def _repeats(items: list[Any]) -> bool:
    """Whether two items are equal as JSON (`uniqueItems`): 1 and true differ, nested values compare deeply."""
    import orjson

    seen = set()
    for item in items:
        key = orjson.dumps(_wire(item), option=orjson.OPT_SORT_KEYS)
        if key in seen:
            return True
        seen.add(key)
    return False
