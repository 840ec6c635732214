"""The plain-Python twins of the worker protocol's models (`generated/plain.py`), generated from the bundle.

A worker must answer `initialize` soon after it is spawned, and importing pydantic alone takes longer than a
whole echo worker. So the defs a worker decodes (every worker method's params and result, every tool's
arguments and metadata, and the configuration files a worker or `wuu-host adapter` reads) also get a plain
class each: its `_decode` checks a value against the def with straight-line code written here from the
schema, and builds the instance. The pydantic models stay the typed API of hosts, and import their enums
from the twins (`plain_enums`); `tests/spec/test_plain.py` holds the two to the schemas. The defs whose
schema says more than a pydantic model can (`SCHEMA_CHECKED_MODELS`) get a twin too, wherever they are used,
with a `_residual` check of just what the model cannot express: their model checks itself through it.

The attribute names and enum member names are the models' own (read from the models' source), so code written
against a model reads the same against its plain twin. A schema keyword this generator does not know stops
`make generate`: a def must never be decoded more loosely than its schema says.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from typing import Any

from tools.spec import method_row, tool_row
from tools.templates.keywords import MAX_DECODED_BYTES, MAX_SUM, MAX_UTF8_BYTES, python_pattern

CONFIG_ROOTS = ("ExecutionEnvironments", "SensitivePathRules", "RedactionRules", "SandboxProcessProbe")
"""The config files a worker or `wuu-host adapter` reads, beside the worker protocol's messages."""
EXTRA_ROOTS = ("ErrorCode", "ProcessEvent", "ToolResult")
"""What a worker sends that no catalog entry names: error codes, process events, tool results."""

RESIDUAL_KEYWORDS = ("prefixItems", "dependentRequired", "dependentSchemas", "not", "if", "contains")
"""JSON Schema keywords that have no pydantic equivalent: a def whose schema uses one is schema-checked."""


def uses_residual(defs: dict[str, Any], node: Any) -> bool:
    """Whether `node` uses a keyword of RESIDUAL_KEYWORDS: in itself, anywhere beneath it, or in a non-object
    def it references (an object def it references is a model of its own, which checks itself)."""
    if isinstance(node, list):
        return any(uses_residual(defs, item) for item in node)
    if not isinstance(node, dict):
        return False
    if any(keyword in node for keyword in RESIDUAL_KEYWORDS):
        return True
    referenced = defs.get(str(node.get("$ref", "")).rsplit("/", 1)[-1])
    if referenced is not None and referenced.get("type") != "object" and uses_residual(defs, referenced):
        return True
    return any(uses_residual(defs, value) for value in node.values())


# Keywords that say nothing about which values a def accepts.
ANNOTATIONS = {
    "description",
    "title",
    "examples",
    "x-enum-descriptions",
    "contentEncoding",
    "format",
    "$comment",
    "x-backend-defaults",
}
KNOWN = ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "propertyNames",
    "items",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "prefixItems",
    "dependentRequired",
    "not",
    "if",
    "then",
    "else",
    "enum",
    "const",
    "default",
    "$ref",
    "oneOf",
    "discriminator",
    MAX_UTF8_BYTES,
    MAX_DECODED_BYTES,
    MAX_SUM,
}


def worker_roots(methods: dict[str, Any]) -> list[str]:
    """The defs a worker decodes or encodes: its catalog's params, results, tool arguments and metadata."""
    roots = set(CONFIG_ROOTS) | set(EXTRA_ROOTS)
    for method in methods["methods"]:
        roots |= {method[key] for key in ("params", "result") if method.get(key)}
    for tool in methods["tools"]:
        roots |= {tool["arguments"], tool["metadata"]}
    return sorted(roots)


def ref_name(schema: dict[str, Any]) -> str:
    ref: str = schema["$ref"]
    assert ref.startswith("#/$defs/"), ref
    return ref.removeprefix("#/$defs/")


def closure(defs: dict[str, Any], roots: Iterable[str]) -> list[str]:
    """The roots and every def they reference, sorted by name."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(references(defs[name]))
    return sorted(seen)


def references(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {ref_name(node)} if "$ref" in node else set()
        for key, value in node.items():
            if key == "properties":
                found |= references(list(value.values()))
            elif key not in ANNOTATIONS and key not in ("enum", "const", "default"):
                found |= references(value)
        return found
    if isinstance(node, list):
        return set().union(*(references(item) for item in node)) if node else set()
    return set()


def model_names(models_source: str) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """From the models' source: each model's wire name -> attribute name, and each enum's value -> member."""
    fields: dict[str, dict[str, str]] = {}
    members: dict[str, dict[str, str]] = {}
    for node in ast.parse(models_source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {base.id for base in node.bases if isinstance(base, ast.Name)}
        if "StrEnum" in bases:
            members[node.name] = {
                statement.value.value: statement.targets[0].id
                for statement in node.body
                if isinstance(statement, ast.Assign)
                and isinstance(statement.targets[0], ast.Name)
                and isinstance(statement.value, ast.Constant)
            }
        elif "WireModel" in bases:
            table = fields.setdefault(node.name, {})
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    aliases = [
                        keyword.value.value
                        for call in ast.walk(statement)
                        if isinstance(call, ast.Call)
                        for keyword in call.keywords
                        if keyword.arg == "alias" and isinstance(keyword.value, ast.Constant)
                    ]
                    table[aliases[0] if aliases else statement.target.id] = statement.target.id
    return fields, members


def first_paragraph(text: str | None) -> str:
    paragraph = (text or "").strip().split("\n\n")[0].replace("\\", "\\\\").replace('"""', "'''")
    return paragraph or "(no description)"


class Writer:
    """Emits the module: one checker function per distinct field schema, one class per def."""

    def __init__(
        self, defs: dict[str, Any], names: list[str], models_source: str, checked: Iterable[str] = ()
    ) -> None:
        self.defs = defs
        self.names = names
        self.checked = set(checked)
        self.fields, self.members = model_names(models_source)
        self.functions: dict[str, str] = {}
        self.patterns: dict[str, str] = {}

    # --- kinds of def -------------------------------------------------------------------------

    def kind(self, name: str) -> str:
        schema = self.defs[name]
        if schema.get("type") == "object" and "properties" in schema:
            return "model"
        if "enum" in schema and name in self.members:
            return "enum"
        return "scalar"

    def pattern(self, pattern: str) -> str:
        """The module-level name of a compiled pattern (ECMAScript's, read as `keywords.python_pattern`)."""
        if pattern not in self.patterns:
            self.patterns[pattern] = f"_PATTERN_{len(self.patterns)}"
        return self.patterns[pattern]

    # --- checkers -----------------------------------------------------------------------------

    def checker(self, name: str, schema: dict[str, Any]) -> str:
        """The name of a function `(value, at) -> decoded` that checks `schema` (emitted once)."""
        unknown = set(schema) - KNOWN
        if unknown:
            raise SystemExit(f"plain: {name} uses {sorted(unknown)}, which tools/plain.py does not generate")
        if "$ref" in schema:
            target = ref_name(schema)
            check = (
                f"{target}._decode"
                if self.kind(target) == "model"
                else self.checker(f"_check_{target}", self.defs[target])
            )
            beside = {
                key: value for key, value in schema.items() if key not in ANNOTATIONS | {"$ref", "default"}
            }
            if not beside:
                return check
            if name not in self.functions:  # the reference's checks, then the keywords beside it
                rest = self.checker(f"{name}_beside", beside)
                self.functions[name] = (
                    f"def {name}(value: Any, at: str) -> Any:\n    return {rest}({check}(value, at), at)"
                )
            return name
        if name in self.functions:
            return name
        if "oneOf" in schema:
            self.functions[name] = self.tagged_union(name, schema)
            return name
        self.functions[name] = ""  # claimed: a recursive def refers to its own checker
        self.functions[name] = self.check_body(name, schema)
        return name

    def tagged_union(self, name: str, schema: dict[str, Any]) -> str:
        """A `oneOf` of object defs told apart by a `const` property (its `discriminator`): the branches cannot
        overlap, so the value is the branch its tag names."""
        tag = schema.get("discriminator", {}).get("propertyName")
        if set(schema) - ANNOTATIONS != {"oneOf", "discriminator"} or not tag:
            raise SystemExit(
                f"plain: {name} is a oneOf without a discriminator; only tagged unions are generated"
            )
        lines = [
            'if type(value) is not dict:\n    raise Invalid(at, "is not an object")',
            f"tag = value.get({tag!r})",
        ]
        tags = []
        for branch in schema["oneOf"]:
            target = ref_name(branch)
            value = self.defs[target]["properties"][tag]["const"]
            tags.append(value)
            lines.append(f"if tag == {value!r}:\n    return {target}._decode(value, at)")
        lines.append(f"raise Invalid(_at(at, {tag!r}), {'is not one of ' + ', '.join(tags)!r})")
        return f"def {name}(value: Any, at: str) -> Any:\n" + indent("\n".join(lines))

    def check_body(self, name: str, schema: dict[str, Any]) -> str:
        lines: list[str] = []
        types = schema.get("type", [])
        types = [types] if isinstance(types, str) else list(types)
        if "null" in types:
            lines.append("if value is None:\n    return None")
            types.remove("null")
        if len(types) > 1:
            raise SystemExit(f"plain: {name} has several types {types}")
        kind = types[0] if types else None
        result = "value"
        if kind == "string":
            lines.append('if not isinstance(value, str):\n    raise Invalid(at, "is not a string")')
            lines += bounds(schema, ("minLength", "maxLength"))
            if "pattern" in schema:
                lines.append(
                    f"if not {self.pattern(schema['pattern'])}.search(value):\n"
                    f"    raise Invalid(at, {'does not match ' + repr(schema['pattern'])!r})"
                )
        elif kind == "integer":
            lines.append('if type(value) is not int:\n    raise Invalid(at, "is not an integer")')
        elif kind == "number":
            lines.append(
                "if type(value) is not int and type(value) is not float:\n"
                '    raise Invalid(at, "is not a number")'
            )
        elif kind == "boolean":
            lines.append('if type(value) is not bool:\n    raise Invalid(at, "is not a boolean")')
        elif kind == "array":
            lines.append('if type(value) is not list:\n    raise Invalid(at, "is not an array")')
            lines += bounds(schema, ("minItems", "maxItems"))
            item = self.checker(f"{name}_item", schema["items"]) if "items" in schema else "_anything"
            if "prefixItems" in schema:
                firsts = [
                    self.checker(f"{name}_{index}", each) for index, each in enumerate(schema["prefixItems"])
                ]
                lines.append(
                    f"value = [\n    ({', '.join(firsts)},)[index](item, _at(at, index)) if index < {len(firsts)}\n"
                    f"    else {item}(item, _at(at, index))\n    for index, item in enumerate(value)\n]"
                )
            elif "items" in schema:
                lines.append(f"value = [{item}(item, _at(at, index)) for index, item in enumerate(value)]")
            if schema.get("uniqueItems"):
                lines.append('if _repeats(value):\n    raise Invalid(at, "has repeated items")')
        elif kind == "object":
            if "properties" in schema:
                raise SystemExit(f"plain: {name} is an object with properties that is not a def")
            lines.append('if type(value) is not dict:\n    raise Invalid(at, "is not an object")')
            names = schema.get("propertyNames", {})
            extra = schema.get("additionalProperties", True)
            if set(names) - {"pattern"}:
                key = self.checker(f"{name}_key", names)
                lines.append(f"for key in value:\n    {key}(key, _at(at, key))")
            elif "pattern" in names:
                lines.append(
                    f"for key in value:\n    if not {self.pattern(names['pattern'])}.search(key):\n"
                    f"        raise Invalid(_at(at, key), {'is not a name that matches ' + repr(names['pattern'])!r})"
                )
            if extra is False:
                lines.append(
                    'if value:\n    raise Invalid(_at(at, next(iter(value))), "is not allowed here")'
                )
            elif isinstance(extra, dict) and extra:
                each = self.checker(f"{name}_value", extra)
                lines.append(f"value = {{key: {each}(item, _at(at, key)) for key, item in value.items()}}")
        elif kind is not None:
            raise SystemExit(f"plain: {name} has type {kind!r}")
        if kind is None:
            lines += self.typeless(name, schema)
        else:
            lines += bounds(schema, NUMERIC_BOUNDS)
        if "not" in schema:
            negated = self.checker(f"{name}_not", schema["not"])
            lines.append(
                f"try:\n    {negated}(value, at)\nexcept Invalid:\n    pass\n"
                f"else:\n    raise Invalid(at, {'must not be ' + json.dumps(schema['not'])!r})"
            )
        lines += self.conditional(name, schema)
        if "const" in schema:
            lines.append(
                f"if value != {schema['const']!r} or type(value) is not {type(schema['const']).__name__}:\n"
                f"    raise Invalid(at, {'is not ' + json.dumps(schema['const'])!r})"
            )
        if "enum" in schema:
            values = schema["enum"]
            if not all(isinstance(value, str) for value in values):
                raise SystemExit(f"plain: {name} has an enum of other values than strings")
            refusal = f"raise Invalid(at, {'is not one of ' + ', '.join(values)!r})"
            target = name.removeprefix("_check_")
            if target in self.members:
                lines.append(f"if value not in {target}._value2member_map_:\n    {refusal}")
                result = f"{target}(value)"
            else:
                lines.append(f"if value not in {tuple(values)!r}:\n    {refusal}")
        for keyword in (MAX_UTF8_BYTES, MAX_DECODED_BYTES, MAX_SUM):
            if keyword in schema:
                lines.append(
                    f"problem = limit_violation({keyword!r}, {schema[keyword]!r}, value)\n"
                    "if problem:\n    raise Invalid(at, problem)"
                )
        body = "\n".join([*lines, f"return {result}"])
        return f"def {name}(value: Any, at: str) -> Any:\n" + indent(body)

    def typeless(self, name: str, schema: dict[str, Any]) -> list[str]:
        """The checks of a schema without `type`: each keyword applies only to values of its own JSON type
        (`required` and `properties` to objects, the item bounds to arrays, the length bounds to strings, the
        numeric bounds to numbers). Any other keyword that says which values of one type it accepts stops
        the generator."""
        unknown = set(schema) - TYPELESS
        if unknown:
            raise SystemExit(
                f"plain: {name} has no type and uses {sorted(unknown)}, which are not generated so"
            )
        lines = []
        if "required" in schema or "properties" in schema:
            checks = [
                f'if {key!r} not in value:\n    raise Invalid(_at(at, {key!r}), "is required")'
                for key in schema.get("required", ())
            ]
            for index, (key, sub) in enumerate(schema.get("properties", {}).items()):
                check = self.checker(f"{name}__{index}", sub)
                checks.append(f"if {key!r} in value:\n    {check}(value[{key!r}], _at(at, {key!r}))")
            lines.append("if type(value) is dict:\n" + indent("\n".join(checks)))
        for test, keywords in (("type(value) is list", ("minItems", "maxItems")),
                               ("isinstance(value, str)", ("minLength", "maxLength")),
                               ("type(value) is int or type(value) is float", NUMERIC_BOUNDS)):  # fmt: skip
            checks = bounds(schema, keywords)
            if checks:
                lines.append(f"if {test}:\n" + indent("\n".join(checks)))
        return lines

    def conditional(self, name: str, schema: dict[str, Any]) -> list[str]:
        """The check of `if`/`then`/`else`: `then` applies to a value that passes `if`, `else` to one that
        does not."""
        if "if" not in schema:
            return []
        # `__`: no field's checker (`_check_<def>_<attribute>`) can take these names.
        test = self.checker(f"{name}__if", schema["if"])
        then, otherwise = (
            f"{self.checker(f'{name}__{key}', schema[key])}(value, at)" if key in schema else "pass"
            for key in ("then", "else")
        )
        passed = "" if then == "pass" else f"\nelse:\n    {then}"
        return [f"try:\n    {test}(value, at)\nexcept Invalid:\n    {otherwise}{passed}"]

    def py_type(self, schema: dict[str, Any]) -> str:
        """The Python type of what `schema`'s checker returns."""
        if "$ref" in schema:
            target = ref_name(schema)
            return target if self.kind(target) != "scalar" else self.py_type(self.defs[target])
        if "oneOf" in schema:
            return " | ".join(ref_name(branch) for branch in schema["oneOf"])
        types = schema.get("type", [])
        types = [types] if isinstance(types, str) else list(types)
        simple = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}
        found = []
        for kind in types:
            if kind == "array":
                found.append(f"list[{self.py_type(schema['items']) if 'items' in schema else 'Any'}]")
            elif kind == "object":
                extra = schema.get("additionalProperties", True)
                found.append(
                    f"dict[str, {self.py_type(extra) if isinstance(extra, dict) and extra else 'Any'}]"
                )
            elif kind == "null":
                continue
            else:
                found.append(simple[kind])
        if "null" in types:
            found.append("None")
        return " | ".join(found) or "Any"

    # --- defs ---------------------------------------------------------------------------------

    def enum(self, name: str) -> str:
        schema = self.defs[name]
        members = self.members[name]
        body = [f'"""{first_paragraph(schema.get("description"))}"""', ""]
        described = schema.get("x-enum-descriptions") or [None] * len(schema["enum"])
        for value, description in zip(schema["enum"], described, strict=True):
            body.append(f"{members[value]} = {value!r}")
            if description:
                body.append(f'"""{first_paragraph(description)}"""')
        return f"class {name}(StrEnum):\n" + indent("\n".join(body))

    def model(self, name: str) -> str:
        schema = self.defs[name]
        extensions = schema.get("additionalProperties", True)
        if extensions not in (True, False):
            raise SystemExit(
                f"plain: {name}'s additionalProperties is a schema; only true or false are generated"
            )
        attributes = self.fields[name]
        required = set(schema.get("required", ()))
        fields = []
        annotations = []
        decode = [
            # An instance is itself (as pydantic takes a model where its model belongs).
            "if type(value) is not dict:\n    if isinstance(value, cls):\n        return value\n"
            '    raise Invalid(at, "is not an object")',
            "self = cls.__new__(cls)",
        ]
        if extensions:  # open: the keys of no field are extensions, kept as they came
            decode += [
                f"self._extra = {{key: item for key, item in value.items() if key not in _{name}_WIRE}} or None",
                f"self._set = frozenset(_{name}_WIRE[key] for key in value if key in _{name}_WIRE)",
            ]
        else:
            decode += [
                f"for key in value:\n    if key not in _{name}_WIRE:\n"
                f"        raise Invalid(_at(at, key), {'is not a field of ' + name!r})",
                "self._extra = None",
                f"self._set = frozenset(_{name}_WIRE[key] for key in value)",
            ]
        for wire, prop in schema["properties"].items():
            attribute = attributes[wire]
            check = self.checker(f"_check_{name}_{attribute}", prop)
            nullable = "null" in (prop.get("type") or []) if isinstance(prop.get("type"), list) else False
            default = prop.get("default")
            annotation = self.py_type(prop)
            if wire not in required and default is None and "None" not in annotation:
                annotation += " | None"
            annotations.append(f"{attribute}: {annotation}")
            if default is not None and "$ref" in prop and self.kind(ref_name(prop)) == "enum":
                target = ref_name(prop)
                default_code = f"{target}.{self.members[target][default]}"
            else:
                default_code = repr(default)
            fields.append(f"({attribute!r}, {wire!r}, {wire in required!r}, {default_code})")
            if wire in required:
                decode.append(
                    f'if {wire!r} not in value:\n    raise Invalid(_at(at, {wire!r}), "is required")\n'
                    f"self.{attribute} = {check}(value[{wire!r}], _at(at, {wire!r}))"
                )
            else:
                null_check = (
                    ""
                    if nullable
                    else f'    if found is None:\n        raise Invalid(_at(at, {wire!r}), "is null")\n'
                )
                decode.append(
                    f"found = value.get({wire!r}, _ABSENT)\n"
                    f"if found is _ABSENT:\n    self.{attribute} = {default_code}\nelse:\n"
                    + null_check
                    + f"    self.{attribute} = {check}(found, _at(at, {wire!r}))"
                )
        # What a pydantic model cannot check: the fields that use such a keyword, and the def's own.
        residual = [
            f"if {wire!r} in value:\n    "
            f"{self.checker(f'_check_{name}_{attributes[wire]}', prop)}(value[{wire!r}], _at(at, {wire!r}))"
            for wire, prop in schema["properties"].items()
            if uses_residual(self.defs, prop)
        ]
        for given, needed in schema.get("dependentRequired", {}).items():
            for wire in needed:
                check = (
                    f"if {given!r} in value and {wire!r} not in value:\n"
                    f"    raise Invalid(_at(at, {wire!r}), {'is required when ' + given + ' is given'!r})"
                )
                decode.append(check)
                residual.append(check)
        conditional = self.conditional(f"_check_{name}", schema)
        decode += conditional
        residual += conditional
        decode.append("return self")
        slots = ", ".join(repr(attributes[wire]) for wire in schema["properties"])
        body = [
            f'"""{first_paragraph(schema.get("description"))}"""',
            "",
            f"__slots__ = ({slots}{',' if len(schema['properties']) == 1 else ''})",
            f"__fields__ = ({', '.join(fields)}{',' if len(fields) == 1 else ''})",
            *annotations,
            "",
            "@classmethod\ndef _decode(cls, value: Any, at: str) -> Self:\n" + indent("\n".join(decode)),
        ]
        if name in self.checked:
            body.append(
                "@classmethod\ndef _residual(cls, value: dict[str, Any], at: str) -> None:\n"
                + indent(
                    '"""Check the wire form of a value the model accepted against what the model cannot '
                    'express."""\n' + "\n".join(residual or ["return None"])
                )
            )
        wire_map = ", ".join(f"{wire!r}: {attributes[wire]!r}" for wire in schema["properties"])
        return (
            f"class {name}(PlainModel):\n"
            + indent("\n".join(body))
            + f"\n\n\n_{name}_WIRE: dict[str, str] = {{{wire_map}}}"
        )

    def module(self, header: str, template: str, methods: dict[str, Any]) -> str:
        # The enums first: a model's defaults name their members.
        classes = [self.enum(name) for name in self.names if self.kind(name) == "enum"]
        for name in self.names:
            kind = self.kind(name)
            if kind == "model":
                classes.append(self.model(name))
            elif kind == "scalar":
                self.checker(f"_check_{name}", self.defs[name])
        unions = [
            f"{name} = {self.py_type(self.defs[name])}\n"
            f'"""{first_paragraph(self.defs[name].get("description"))}"""'
            for name in self.names
            if "oneOf" in self.defs[name]
        ]
        method_rows = "\n".join(f"    {method_row(entry)}" for entry in methods["methods"])
        tool_rows = "\n".join(f"    {tool_row(tool)}" for tool in methods["tools"])
        tables = (
            f"WORKER_METHODS: Mapping[str, MethodSpec[PlainModel]] = {{\n{method_rows}\n}}\n"
            '"""Every method of the worker protocol, by wire name, in catalog order, with the plain classes."""\n\n'
            f"WORKER_TOOLS: Mapping[str, ToolSpec[PlainModel]] = {{\n{tool_rows}\n}}\n"
            '"""The core workspace tools of `execute`, by name, with the plain classes."""\n'
        )
        patterns = "\n".join(
            f"{variable} = _Pattern({python_pattern(pattern)!r})"
            for pattern, variable in self.patterns.items()
        )
        functions = "\n\n\n".join(self.functions[name] for name in sorted(self.functions))
        names = ", ".join(f'"{name}"' for name in self.names if self.kind(name) != "scalar")
        return (
            header
            + template
            + f"\n\nPLAIN_DEFS: frozenset[str] = frozenset({{{names}}})\n"
            + '"""The defs with a plain class here (the rest of its defs are checked inline)."""\n\n'
            + patterns
            + "\n\n\n"
            + "\n\n\n".join(classes)
            + "\n\n\n"
            + "\n\n".join(unions)
            + "\n\n\n"
            + functions
            + "\n\n\n"
            + tables
        )


NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
TYPELESS = ANNOTATIONS | {
    "properties",
    "required",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    *NUMERIC_BOUNDS,
    "not",
    "if",
    "then",
    "else",
    "const",
    "enum",
    "default",
}
"""The keywords a schema without `type` may use here: those `typeless` guards by type, and those that
apply to any value."""

BOUNDS = {
    "minLength": ("len(value) < {n}", "is shorter than {n} characters"),
    "maxLength": ("len(value) > {n}", "is longer than {n} characters"),
    "minItems": ("len(value) < {n}", "has fewer than {n} items"),
    "maxItems": ("len(value) > {n}", "has more than {n} items"),
    "minimum": ("value < {n}", "is less than the minimum {n}"),
    "maximum": ("value > {n}", "is more than the maximum {n}"),
    "exclusiveMinimum": ("value <= {n}", "is not more than {n}"),
    "exclusiveMaximum": ("value >= {n}", "is not less than {n}"),
}
"""Each bound keyword: the test that breaks it, and what the refusal says (`n` is the keyword's argument)."""


def bounds(schema: dict[str, Any], keywords: tuple[str, ...]) -> list[str]:
    """The checks of those of `keywords` that `schema` has, in that order."""
    lines = []
    for keyword in keywords:
        if keyword in schema:
            test, says = (text.format(n=schema[keyword]) for text in BOUNDS[keyword])
            lines.append(f'if {test}:\n    raise Invalid(at, "{says}")')
    return lines


def indent(text: str) -> str:
    return "\n".join(("    " + line) if line else line for line in text.split("\n"))


def plain_roots(methods: dict[str, Any], checked: Iterable[str]) -> list[str]:
    """The defs with a twin of their own: the worker's, and the schema-checked ones."""
    return sorted(set(worker_roots(methods)) | set(checked))


def plain_enums(spec_bundle: dict[str, Any], methods: dict[str, Any], checked: Iterable[str]) -> list[str]:
    """The enum defs `plain` defines, which the models import from it rather than define again."""
    defs = spec_bundle["$defs"]
    return [
        name
        for name in closure(defs, plain_roots(methods, checked))
        if "enum" in defs[name] and "type" in defs[name]
    ]


def generate_plain(
    spec_bundle: dict[str, Any],
    methods: dict[str, Any],
    checked: Iterable[str],
    models_source: str,
    header: str,
    template: str,
) -> str:
    """The source of `generated/plain.py`: the template (the base class) and the plain twin of every def a
    worker uses or whose model is schema-checked (`checked`)."""
    defs = spec_bundle["$defs"]
    names = closure(defs, plain_roots(methods, checked))
    return Writer(defs, names, models_source, checked).module(header, template, methods)
