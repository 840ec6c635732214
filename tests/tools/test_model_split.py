"""The generated models by spec area: the lazy index, and what a process loads (tools/generate.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools.generate import split_models
from wuu.generated import models


def loaded_areas(statement: str) -> set[str]:
    """The wuu.generated model areas a fresh interpreter has loaded after `statement`."""
    areas = sorted(set(models.AREA_OF.values()))
    probe = f"{statement}\nimport sys\nprint(' '.join(a for a in {areas!r} if 'wuu.generated.' + a in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_every_name_of_the_index_is_its_areas_model() -> None:
    for name, area in models.AREA_OF.items():
        module = sys.modules.get(f"wuu.generated.{area}") or __import__(
            f"wuu.generated.{area}", fromlist=["_"]
        )
        assert getattr(models, name) is getattr(module, name)
    assert sorted(models.__all__) == sorted(models.AREA_OF)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchModel"):
        _ = models.NoSuchModel  # type: ignore[attr-defined]


def test_the_worker_loads_no_model_area_and_its_catalog_only_its_own() -> None:
    # The native worker runs on the plain twins (wuu.generated.plain), not on the pydantic models.
    assert loaded_areas("import wuu.worker.native.worker") == set()
    assert loaded_areas("from wuu.generated.catalog import WORKER_METHODS") == {"worker"}


def test_the_user_host_catalog_loads_its_areas() -> None:
    assert {"userhost", "receipts"} <= loaded_areas("from wuu.generated.catalog import USERHOST_METHODS")


SOURCE = '''from enum import StrEnum

from wuu.generated.wire import WireModel


class Kind(StrEnum):
    A = "a"


class Helper(WireModel):
    kind: Kind


class Outer(WireModel):
    helper: Helper
"""Outer's own docstring."""


class Inner(WireModel):
    outer: Outer
'''


def test_a_helper_goes_with_its_first_user_and_each_area_imports_what_it_uses() -> None:
    modules = split_models(SOURCE, {"a": ["Kind", "Outer"], "b": ["Inner"]})
    assert "class Helper" in modules["a"] and "class Helper" not in modules["b"]
    assert '"""Outer\'s own docstring."""' in modules["a"]
    assert "from .a import Outer" in modules["b"]
    assert "StrEnum" not in modules["b"]  # unused imports are left out


def test_areas_that_import_each_other_stop_the_generator() -> None:
    source = SOURCE + "\n\nclass Back(WireModel):\n    inner: Inner\n"
    with pytest.raises(SystemExit, match="cycle"):
        split_models(source, {"a": ["Kind", "Outer", "Back"], "b": ["Inner"]})
