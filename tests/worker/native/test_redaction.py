"""Output redaction against the spec's test vectors (spec/data/redaction_vectors.json): every secret shape
listed is replaced, every look-alike is left as it is."""

from __future__ import annotations

import importlib.resources

import pytest

from wuu.generated.models import RedactionVector, RedactionVectors
from wuu.worker.native.redaction import default_redactor

VECTORS = RedactionVectors.model_validate_json(
    importlib.resources.files("wuu.generated")
    .joinpath("schema", "data", "redaction_vectors.json")
    .read_text("utf-8")
).vectors


@pytest.mark.parametrize("vector", VECTORS, ids=[vector.note for vector in VECTORS])
def test_redaction_follows_the_spec_vectors(vector: RedactionVector) -> None:
    assert default_redactor().redact(vector.text) == vector.redacted


def test_the_vectors_hold_both_secrets_and_look_alikes() -> None:
    redacted = [vector for vector in VECTORS if vector.redacted != vector.text]
    assert len(redacted) >= 15 and len(VECTORS) - len(redacted) >= 10
    assert all("[REDACTED:" in vector.redacted for vector in redacted)
