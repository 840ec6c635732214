"""The worker suite's session: the environment each adapter starts with."""

from __future__ import annotations

import importlib
import os

import pytest

from wuu.conformance.worker.session import PRIVATE_VARIABLE, adapter_environment


def test_loading_the_cases_leaves_this_process_environment_alone() -> None:
    importlib.import_module("wuu.conformance.worker.cases")
    assert PRIVATE_VARIABLE not in os.environ


def test_an_adapter_gets_this_environment_the_private_variable_and_the_case_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WUU_TEST_INHERITED", "yes")
    environment = adapter_environment({"WUU_TEST_GIVEN": "1"})
    assert environment["WUU_TEST_INHERITED"] == "yes"
    assert environment["WUU_TEST_GIVEN"] == "1"
    assert environment[PRIVATE_VARIABLE] == "leak"
    assert PRIVATE_VARIABLE not in os.environ
