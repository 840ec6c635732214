"""The one base class of every generated wire model (the shapes of the method catalogs are in `methods`).

Wire models validate by alias only (a Go-cased field is accepted only under its Go name), forbid
unknown fields (a model of an open def, `additionalProperties: true`, keeps them as extensions), and
serialize by alias. `to_wire()` dumps exactly the fields that were set, so a
decoded message re-encodes to the same JSON and optional fields never appear as `null`.

The spec's own keywords that JSON Schema cannot express (`keywords.SPEC_KEYWORDS`) are enforced here,
once, for every model that carries them; so are `uniqueItems` and "optional but never null", which the
generator passes on as `keywords.GENERATOR_KEYWORDS`. A model whose def uses a keyword that pydantic
cannot express (listed in SCHEMA_CHECKED_MODELS at the end of this module) is also checked by its plain twin
(`plain`): its generated `_residual` check holds just those keywords (the def's own, and those of the fields
that use one), on the wire form of what the model accepted. This module depends on `plain`, never the other
way round.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Self, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.fields import FieldInfo
from typing_extensions import TypeAliasType

from . import plain
from .keywords import MODEL_KEYWORDS, NOT_NULL, UNIQUE_ITEMS, limit_violation


class WireModel(BaseModel):
    """Base class of every message generated from the spec."""

    model_config = ConfigDict(
        extra="forbid",
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        # The jsonschema validators use Python `re`; the models must agree with them on every pattern.
        regex_engine="python-re",
        # Most processes use a few of the spec's models: build each one's validator when first used.
        defer_build=True,
    )

    # (attribute, wire name, keyword, argument) for each limit keyword on this model's fields.
    __wire_limits__: ClassVar[tuple[tuple[str, str, str, Any], ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.__wire_limits__ = tuple(
            (name, field.alias or name, keyword, extra[keyword])
            for name, field in cls.model_fields.items()
            for extra in _schema_extras(field)
            for keyword in MODEL_KEYWORDS
            if keyword in extra
        )

    @model_validator(mode="after")
    def _check_wire_limits(self) -> Self:
        for name, wire_name, keyword, argument in self.__wire_limits__:
            value = getattr(self, name)
            if keyword == NOT_NULL:
                if value is None and name in self.model_fields_set:
                    raise ValueError(f"{wire_name}: is never null; omit the field instead")
                continue
            if value is None:
                continue
            if keyword == UNIQUE_ITEMS:
                problem = _duplicates(value) if argument else None  # `uniqueItems: false` asks nothing
            else:
                problem = limit_violation(keyword, argument, value)
            if problem:
                raise ValueError(f"{wire_name}: {problem}")
        if type(self).__name__ in SCHEMA_CHECKED_MODELS:
            try:
                getattr(plain, type(self).__name__)._residual(self.to_wire(), "")
            except plain.Invalid as error:
                raise ValueError(f"{error.location}: {error.message}") from None
        return self

    def to_wire(self) -> dict[str, Any]:
        """The message as a JSON-ready dict: wire names, and only the fields that were set."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


SCHEMA_CHECKED_MODELS: frozenset[str] = frozenset()
"""Models whose def uses a keyword pydantic cannot express; they also run their plain twin's residual check."""


def _schema_extras(field: FieldInfo) -> Iterator[Mapping[str, Any]]:
    """The schema extras of a field and of the named types (aliases) its annotation is made of."""
    if isinstance(field.json_schema_extra, Mapping):
        yield field.json_schema_extra
    pending: list[Any] = [field.annotation]
    while pending:
        annotation = pending.pop()
        if isinstance(annotation, TypeAliasType):
            pending.append(annotation.__value__)
        elif get_origin(annotation) is Annotated:
            pending.append(get_args(annotation)[0])
            for meta in annotation.__metadata__:
                if isinstance(meta, FieldInfo) and isinstance(meta.json_schema_extra, Mapping):
                    yield meta.json_schema_extra
        elif get_origin(annotation) is not None and get_origin(annotation) is not list:
            pending.extend(get_args(annotation))


def _duplicates(value: object) -> str | None:
    """Check `x-unique-items` (JSON Schema's `uniqueItems: true`): items compare by their wire JSON."""
    if isinstance(value, list):
        seen = [item.to_wire() if isinstance(item, WireModel) else item for item in value]
        if any(item in seen[:index] for index, item in enumerate(seen)):
            return "has duplicate items"
    return None
