"""jsonschema validators compiled from the bundled spec (`schema/bundle.json`).

`validator(name)` returns a Draft 2020-12 validator for one def of the spec, with the spec's limit
keywords (`keywords.SPEC_KEYWORDS`) enforced. Timestamps are checked by their RFC 3339 `pattern`, so
the result does not depend on which optional format checkers are installed. jsonschema is imported when
the first validator is built, not with this module: a process that reads only `bundle()` never loads it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from importlib import resources
from typing import TYPE_CHECKING, Any

from .keywords import SPEC_KEYWORDS, limit_violation, python_pattern

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

BUNDLE_ID = "https://schemas.wuu.dev/bundle.json"


def _limit_keyword(keyword: str) -> Any:
    def check(validator: Any, argument: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        problem = limit_violation(keyword, argument, instance)
        if problem:
            from jsonschema import ValidationError

            yield ValidationError(problem)

    return check


def _is_integer(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 4.0 as an integer; the wire does not (spec/README.md), and neither do the models.
    return isinstance(instance, int) and not isinstance(instance, bool)


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(python_pattern(pattern))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # The spec's patterns are ECMAScript's: `$` is the end of the text, not also the place before a final
    # newline as in Python (`"read_file\n"` is no tool name).
    if isinstance(instance, str) and not _compiled(pattern).search(instance):
        from jsonschema import ValidationError

        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _wire_validator() -> Any:
    """Draft 2020-12 with the spec's pattern dialect and limit keywords, and its integers."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    return extend(
        Draft202012Validator,
        {"pattern": _pattern, **{keyword: _limit_keyword(keyword) for keyword in SPEC_KEYWORDS}},
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
    )


@functools.cache
def bundle() -> dict[str, Any]:
    """The whole spec as one JSON Schema document: every def under `$defs`, references local."""
    text = resources.files(__package__).joinpath("schema", "bundle.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def compile_validator(spec_bundle: dict[str, Any], name: str) -> Validator:
    """A validator for the def `name` of a spec bundle."""
    if name not in spec_bundle["$defs"]:
        raise KeyError(f"the spec has no def named {name!r}")
    from referencing import Registry, Resource

    registry: Registry = Registry().with_resource(BUNDLE_ID, Resource.from_contents(spec_bundle))
    result: Validator = _wire_validator()({"$ref": f"{BUNDLE_ID}#/$defs/{name}"}, registry=registry)
    return result


def def_names() -> list[str]:
    """The names of every def in the spec, sorted."""
    return sorted(bundle()["$defs"])


@functools.cache
def validator(name: str) -> Validator:
    """A validator for the def `name` (for example `ProcessReadParams`)."""
    return compile_validator(bundle(), name)


def errors(name: str, instance: Any) -> list[ValidationError]:
    """Every violation of def `name` by `instance`, most specific first."""
    found = list(validator(name).iter_errors(instance))
    return sorted(found, key=lambda error: (-len(error.absolute_path), str(error.absolute_path)))


def error_locations(found: list[ValidationError]) -> set[str]:
    """Every dotted path the errors point at, failed `oneOf`/`anyOf` branches included.

    Besides the location of the object, an error about a missing field (`required`,
    `dependentRequired`), an unknown one (`additionalProperties`) or a bad key (`propertyNames`) also
    points at that field, so that an error names the field that is wrong.
    """
    paths: set[str] = set()
    pending = list(found)
    while pending:
        error = pending.pop()
        where = [str(part) for part in error.absolute_path]
        paths.add(".".join(where))
        paths.update(".".join([*where, name]) for name in _named_fields(error))
        pending.extend(error.context or [])
    return paths


def _named_fields(error: ValidationError) -> list[str]:
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        return [name for name in error.validator_value if name not in instance]
    if error.validator == "dependentRequired" and isinstance(instance, dict):
        return [
            name
            for trigger, needed in error.validator_value.items()
            if trigger in instance
            for name in needed
            if name not in instance
        ]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        return [name for name in instance if name not in error.schema.get("properties", {})]
    if "propertyNames" in error.relative_schema_path:
        return [str(instance)]
    return []


def validate(name: str, instance: Any) -> None:
    """Raise the first `jsonschema.ValidationError` of `instance` against def `name`, if any."""
    found = errors(name, instance)
    if found:
        raise found[0]
