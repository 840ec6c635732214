"""The mutation check of the user-host suite: it must fail every mutant, with a case aimed at its rule.

Each mutant (tests/conformance/userhost/mutants) is the reference user host with exactly one rule broken.
For each, the suite runs in-process against `python -m tests.conformance.userhost.mutants NAME serve ...`,
restricted to the cases that check the broken requirements, and must fail at least one case that names one
of them. The same selections pass against the mutants' machinery with nothing broken (`harness`, the
control: a failure is the mutant's doing, not the relay's); that the reference host passes them is
test_suite.py's run of every case against it, with the same command. A host that
leaves out an optional method (`without-history-read`) fails no case either: the cases that need the method
skip, saying so.

The selections run in the background, a few at once, each with up to two hosts, and each test waits for its
own. A selection is claimed through a file in a directory that every xdist worker of the session shares, so
each runs once, whichever worker its test lands on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wuu.conformance.registry import Case
from wuu.conformance.runner import select
from wuu.conformance.userhost.suite import USERHOST

from ..selections import Job, Selections, summary
from .mutants import Mutant, load
from .mutants.controls import CONTROLS

ROOT = Path(__file__).resolve().parents[3]
SERVE = ["serve", "--home", "{home}", "--user-space", "{user_space}", "--product-domain", "{product_domain}"]
SERVE += ["--composition-profile", "personal", "--isolation", "{isolation}"]
SERVE += ["--stdio", "--listen", "unix:{socket}"]
HARNESS = "harness"
"""The mutants' command name that serves the relay with nothing broken."""
WITHOUT_HISTORY_READ = "without-history-read"
"""The control that serves no agents.history.read (an optional method)."""
HISTORY_AREAS = ("admission", "approvals", "attachments", "history", "questions", "reactions", "restart")
HISTORY_AREAS += ("search", "memory", "tasks")
"""The areas whose cases call agents.history.read, to need it or to observe with it (and the cases below)."""
HISTORY_CASES = ["limits.text-bytes", "limits.reactions-messages"]
HISTORY_CASES += ["plugin.user-input-rejected", "plugin.invalid-params-field"]
RECEIPTS_OFF = "admission.receipts-off"
"""Left out of the history selection: it reads history only on a host that admits no input, and this one
admits (test_suite.py runs it against a host without the receipts observer)."""
MUTANTS = load()
# A mutant's case often waits for a response that never comes: the reply timeout bounds that wait.
TIMEOUT = 5.0
# The controls run unbroken hosts: nothing there should wait for a timeout, and a short one only makes them
# fail under load (a 32 MiB line or 20 MiB of attachments takes a while on a busy machine).
CONTROL_TIMEOUT = 30.0
# No selection may take longer than this and 5 s per case (selections.py): a runner that hangs fails its test
# instead of the whole run.
DEADLINE = 120.0

UNCAUGHT: dict[str, str] = {}
"""Mutants no case catches yet, with the reason; each stays a strict expected failure until one does."""


def mutant_command(name: str) -> list[str]:
    """The command that serves the mutant `name` (the test suite's own package must be importable)."""
    return [
        "env",
        f"PYTHONPATH={ROOT}",
        sys.executable,
        "-m",
        "tests.conformance.userhost.mutants",
        name,
        *SERVE,
    ]


def _selection(mutant: Mutant) -> list[Case]:
    """The cases that check one of the mutant's broken requirements."""
    return select(USERHOST.cases().values(), list(mutant.requirements), [])


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
    """Every selection to run, by key, the longest first: the uncaught mutants (their cases wait for the
    timeout), the controls by area, then the other mutants."""

    def mutant(name: str) -> Job:
        return _selection(MUTANTS[name]), mutant_command(name), TIMEOUT

    jobs = {f"mutant-{name}": mutant(name) for name in MUTANTS if name in UNCAUGHT}
    for area, cases in sorted(_control_areas().items(), key=lambda item: -len(item[1])):
        jobs[f"harness-{area}"] = (cases, mutant_command(HARNESS), CONTROL_TIMEOUT)
    jobs.update({f"mutant-{name}": mutant(name) for name in MUTANTS if name not in UNCAUGHT})
    jobs[WITHOUT_HISTORY_READ] = (_history_cases(), mutant_command(WITHOUT_HISTORY_READ), CONTROL_TIMEOUT)
    return jobs


def _history_cases() -> list[Case]:
    """The cases that call agents.history.read."""
    globs = [f"{area}.*" for area in HISTORY_AREAS] + HISTORY_CASES
    return select(USERHOST.cases().values(), globs, [RECEIPTS_OFF])


@pytest.fixture(scope="module")
def selections(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Selections]:
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "userhost-mutants"
    shared.mkdir(exist_ok=True)
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        function = getattr(item, "function", None)
        if function is test_the_unbroken_relay_passes:
            wanted.add(f"{HARNESS}-{params['area']}")
        elif function is test_suite_catches_mutant:
            wanted.add(f"mutant-{params['name']}")
        elif function is test_a_host_without_history_read_fails_no_case:
            wanted.add(WITHOUT_HISTORY_READ)
    runs = Selections(shared, _jobs(), wanted, DEADLINE)
    yield runs
    runs.close()


def test_mutant_registry() -> None:
    """At least 20 mutants, each named in kebab-case, documented, and breaking requirements that exist."""
    assert len(MUTANTS) >= 20
    known = USERHOST.requirements()
    for name, mutant in MUTANTS.items():
        assert mutant.name == name
        assert name == name.lower() and " " not in name and "_" not in name, name
        assert name not in CONTROLS, f"{name} is the name of a control (nothing broken)"
        assert mutant.description and mutant.doc, f"{name} is not documented"
        assert mutant.requirements, f"{name} names no requirement"
        unknown = [rid for rid in mutant.requirements if rid not in known]
        assert not unknown, f"{name} names unknown requirements {unknown}"
    assert not set(UNCAUGHT) - set(MUTANTS), "UNCAUGHT names mutants that do not exist"


def test_each_mutant_is_built_from_one_extension_point() -> None:
    """A relay in front of the host, a composition override or a startup override: exactly one of them (the
    harness control has none: it is the plain relay)."""
    for name, mutant in {**MUTANTS, **CONTROLS}.items():
        built = [mutant.relay, mutant.compose, mutant.startup]
        assert built.count(None) == (3 if name == HARNESS else 2), name


def test_the_mutants_spread_over_the_areas() -> None:
    """Every area of the user-host registry that has cases has a mutant (but the ones listed here)."""
    covered = {rid.split(".", 1)[0] for mutant in MUTANTS.values() for rid in mutant.requirements}
    areas = {case.area for case in USERHOST.cases().values()}
    assert areas <= covered, f"areas without a mutant: {sorted(areas - covered)}"


def test_a_mutant_serves(tmp_path: Path) -> None:
    """A mutant's command starts and answers on its stdio (a broken harness would fail every case for the
    wrong reason), and ends once its only client has gone."""
    request = {"protocol_version": 1, "client_info": {"name": "test", "version": "1"}}
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": request}).encode() + b"\n"
    command = [*mutant_command("reports-another-user-space")[: -len(SERVE)], "serve", "--stdio"]
    command += ["--home", str(tmp_path), "--user-space", "local", "--product-domain", "personal"]
    served = subprocess.run(command, input=line, capture_output=True, timeout=60)
    assert served.returncode == 0, served.stderr
    answer = json.loads(served.stdout)
    assert answer["id"] == 1 and answer["result"]["user_space_id"] == "local-elsewhere", answer


def test_every_mutant_has_cases() -> None:
    """Every mutant's broken requirements are checked by at least one case (or it is known uncaught)."""
    missing = [name for name, mutant in MUTANTS.items() if not _selection(mutant) and name not in UNCAUGHT]
    assert not missing, f"mutants whose requirements no case checks: {missing}"


@pytest.mark.parametrize("area", sorted(_control_areas()))
def test_the_unbroken_relay_passes(selections: Selections, area: str) -> None:
    """The control: the mutants' relay with nothing broken passes every case that the mutants' selections
    run."""
    outcomes = selections.outcomes(f"{HARNESS}-{area}")
    failed = [outcome for outcome in outcomes if outcome.status not in ("passed", "skipped")]
    assert not failed, f"the unbroken relay fails:\n{summary(failed)}\n\n{failed[0].message}"


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


def test_a_host_without_history_read_fails_no_case(selections: Selections) -> None:
    """A host whose wuu.personal serves no agents.history.read (optional in the catalog) fails no case: the
    cases that need it skip, naming it, and the ones that only observe with it pass another way."""
    outcomes = selections.outcomes(WITHOUT_HISTORY_READ)
    failed = [outcome for outcome in outcomes if outcome.status not in ("passed", "skipped")]
    assert not failed, f"a host without agents.history.read fails:\n{summary(failed)}\n\n{failed[0].message}"
    skipped = [outcome for outcome in outcomes if outcome.status == "skipped"]
    assert skipped and all("agents.history.read" in outcome.message for outcome in skipped), summary(skipped)
    needing = {outcome.case.split(".", 1)[0] for outcome in skipped}
    expected = {"approvals", "history", "memory", "questions", "reactions", "search", "tasks"}
    assert needing == expected, summary(outcomes)
    observing = [o for o in outcomes if o.case.split(".", 1)[0] in ("admission", "attachments", "restart")]
    observing += [outcome for outcome in outcomes if outcome.case in HISTORY_CASES]
    assert observing and all(outcome.status == "passed" for outcome in observing), summary(observing)
