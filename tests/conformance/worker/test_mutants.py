"""The mutation check of the conformance suite: it must fail every mutant, with a case aimed at its rule.

Each mutant (tests/conformance/worker/mutants) is the native reference worker with exactly one rule broken. For
each, the suite runs in-process against `python -m tests.conformance.worker.mutants NAME`, restricted to the cases
that check the broken requirements, and must fail at least one case that names one of them. The same
selections pass against the unmutated worker (the control), so a failure is the mutant's doing.

The runs are mostly waiting (for adapters, for the reply timeout a mutant provokes), so they do not run
one test at a time: every pytest process (each xdist worker) runs pending selections in a background
thread, a few at once, and each test waits for the result of its own. A selection is claimed through a
file in a directory that all workers of the session share, so each runs exactly once, whichever worker
its test lands on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wuu.conformance.registry import Case
from wuu.conformance.runner import select
from wuu.conformance.worker.suite import WORKER

from ..selections import Job, Selections, summary
from .mutants import Mutant, load

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = [sys.executable, "-m", "wuu.worker"]
MUTANTS = load()
TIMEOUT = 10.0
# The controls run the unmutated worker: nothing there should wait for a timeout, and a short one only makes
# them fail under load (an orderly EOF cleanup on a busy machine can take longer than TIMEOUT).
CONTROL_TIMEOUT = 30.0
# No selection may take longer than this and 5 s per case (selections.py): a runner that hangs fails its test
# instead of the whole run.
DEADLINE = 60.0

# Mutants that the suite does not catch yet, and why. strict: once a case catches one, its entry must go.
UNCAUGHT: dict[str, str] = {}
"""Mutants no case catches yet, with the reason; each stays a strict expected failure until one does."""


def mutant_command(name: str) -> list[str]:
    """The command that serves the mutant `name` (the test suite's own package must be importable)."""
    return ["env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "tests.conformance.worker.mutants", name]


def _selection(mutant: Mutant) -> list[Case]:
    """The cases that check one of the mutant's broken requirements."""
    return select(WORKER.cases().values(), list(mutant.requirements), [])


def _control_areas() -> dict[str, list[Case]]:
    """Every case some mutant's selection runs, by area."""
    chosen: dict[str, Case] = {}
    for mutant in MUTANTS.values():
        for case in _selection(mutant):
            chosen[case.id] = case
    areas: dict[str, list[Case]] = {}
    for case in chosen.values():
        areas.setdefault(case.area, []).append(case)
    return areas


def _jobs() -> dict[str, Job]:
    """Every selection to run, by key, the longest first: the uncaught mutants (a hang lasts until the
    deadline), the control areas, then the other mutants."""

    def mutant(name: str) -> Job:
        return _selection(MUTANTS[name]), mutant_command(name), TIMEOUT

    jobs = {f"mutant-{name}": mutant(name) for name in MUTANTS if name in UNCAUGHT}
    for area, cases in sorted(_control_areas().items(), key=lambda item: -len(item[1])):
        jobs[f"control-{area}"] = (cases, REFERENCE, CONTROL_TIMEOUT)
    jobs.update({f"mutant-{name}": mutant(name) for name in MUTANTS if name not in UNCAUGHT})
    return jobs


@pytest.fixture(scope="module")
def selections(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Selections]:
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "mutants"
    shared.mkdir(exist_ok=True)
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "function", None) is test_reference_worker_passes:
            wanted.add(f"control-{params['area']}")
        elif getattr(item, "function", None) is test_suite_catches_mutant:
            wanted.add(f"mutant-{params['name']}")
    runs = Selections(shared, _jobs(), wanted, DEADLINE)
    yield runs
    runs.close()


def test_mutant_registry() -> None:
    """At least 20 mutants, each named in kebab-case, documented, and breaking requirements that exist."""
    assert len(MUTANTS) >= 20
    known = WORKER.requirements()
    for name, mutant in MUTANTS.items():
        assert mutant.name == name
        assert name == name.lower() and " " not in name and "_" not in name, name
        assert mutant.description and mutant.doc, f"{name} is not documented"
        assert mutant.requirements, f"{name} names no requirement"
        unknown = [rid for rid in mutant.requirements if rid not in known]
        assert not unknown, f"{name} names unknown requirements {unknown}"
    assert not set(UNCAUGHT) - set(MUTANTS), "UNCAUGHT names mutants that do not exist"


def test_each_mutant_is_built_from_one_extension_point() -> None:
    """A relay in front of the SDK or a handler override of the native worker, never both, never neither."""
    for name, mutant in MUTANTS.items():
        assert (mutant.relay is None) != (mutant.override is None), name


def test_a_mutant_serves() -> None:
    """A mutant's command starts and answers (a broken harness would fail every case for the wrong reason)."""
    frame = b'{"id":"1","method":"initialize","token":"t","data":{"version":3,"root":"/r","session":"s"}}\n'
    served = subprocess.run(mutant_command("multi-line-frames"), input=frame, capture_output=True, timeout=60)
    assert served.returncode == 0, served.stderr
    assert b'"error": "protocol_mismatch' in served.stdout


def test_every_mutant_has_cases() -> None:
    """Every broken requirement is checked by at least one case, or no mutant of it could be caught."""
    missing = [name for name, mutant in MUTANTS.items() if not _selection(mutant)]
    assert not missing, f"mutants whose requirements no case checks: {missing}"


@pytest.mark.parametrize("area", sorted(_control_areas()))
def test_reference_worker_passes(selections: Selections, area: str) -> None:
    """The control: the unmutated native worker passes every case that the mutants' selections run."""
    outcomes = selections.outcomes(f"control-{area}")
    failed = [outcome for outcome in outcomes if outcome.status not in ("passed", "skipped")]
    assert not failed, f"the reference worker fails:\n{summary(failed)}\n\n{failed[0].message}"


def _mutant_params() -> list[Any]:
    params = []
    for name in MUTANTS:
        marks = [pytest.mark.xfail(strict=True, reason=UNCAUGHT[name])] if name in UNCAUGHT else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", _mutant_params())
def test_suite_catches_mutant(selections: Selections, name: str) -> None:
    """The suite fails the mutant, and at least one failing case is aimed at the rule it breaks."""
    mutant = MUTANTS[name]
    assert _selection(mutant), f"no case checks {mutant.requirements}"
    outcomes = selections.outcomes(f"mutant-{name}")
    failed = [outcome for outcome in outcomes if outcome.failed]
    assert failed, f"the suite passes the mutant {name} ({mutant.description}):\n{summary(outcomes)}"
    aimed = [outcome for outcome in failed if set(outcome.requirements) & set(mutant.requirements)]
    assert aimed, (
        f"the mutant {name} fails only cases aimed at other rules than {mutant.requirements}:\n"
        f"{summary(outcomes)}"
    )
