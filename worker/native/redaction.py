"""Output redaction: common secret shapes in tool output replaced by `[REDACTED:<rule id>]` (the rules of the
spec's data/redaction_rules.json; worker/redaction.schema.json says where they apply and what they cannot do)."""

from __future__ import annotations

import functools
import re

from wuu.generated.plain import RedactionRules, spec_data


class Redactor:
    """The redaction rules, compiled, applied one after another in their order."""

    def __init__(self, rules: RedactionRules) -> None:
        # re.ASCII: `\b` and `\s` in their ASCII sense, and IGNORECASE folding ASCII letters only.
        self._rules = tuple(
            (rule.id, re.compile(rule.pattern, re.ASCII | (re.IGNORECASE if rule.case_insensitive else 0)))
            for rule in rules.rules
        )

    def redact(self, text: str) -> str:
        """`text` with every recognized secret replaced: a rule's first group that took part in the match when
        there is one, else the whole match."""
        for rule_id, pattern in self._rules:
            text = pattern.sub(functools.partial(_replace, f"[REDACTED:{rule_id}]"), text)
        return text


def _replace(replacement: str, match: re.Match[str]) -> str:
    group = next((index for index in range(1, match.re.groups + 1) if match.group(index) is not None), None)
    if group is None:
        return replacement
    start, end = match.start(group) - match.start(), match.end(group) - match.start()
    whole = match.group(0)
    return whole[:start] + replacement + whole[end:]


@functools.cache
def default_redactor() -> Redactor:
    """The redactor of the rules packaged with wuu (the spec's data/redaction_rules.json)."""
    return Redactor(RedactionRules.model_validate_json(spec_data("redaction_rules.json")))
