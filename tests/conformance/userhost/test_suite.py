"""The user-host suite itself: its registry, and its verdict on the reference host (every case passes), on a
coding host (the core cases pass, the Personal ones skip) and on a host without the receipts observer."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import pytest

from wuu.conformance import cli
from wuu.conformance.registry import spec_text
from wuu.conformance.runner import Status, run_all, select
from wuu.conformance.userhost.session import HostSession
from wuu.conformance.userhost.suite import USERHOST
from wuu.generated.models import RequirementTier

SERVE = [
    sys.executable,
    "-m",
    "wuu.host.userhost",
    "serve",
    "--home",
    "{home}",
    "--user-space",
    "{user_space}",
]
SERVE += ["--product-domain", "{product_domain}"]
REFERENCE = [*SERVE, "--composition-profile", "personal", "--isolation", "{isolation}"]
REFERENCE += ["--stdio", "--listen", "unix:{socket}"]
"""The reference host, as `make conformance` runs it."""


def test_every_requirement_points_at_spec_text() -> None:
    for requirement in USERHOST.requirements().values():
        assert len(spec_text(requirement.spec)) > 20, requirement.id


def test_capability_requirements_name_what_they_depend_on() -> None:
    for requirement in USERHOST.requirements().values():
        capability = requirement.tier is RequirementTier.CAPABILITY
        assert capability == (requirement.applies_to is not None), requirement.id


def test_every_mandatory_requirement_has_a_case() -> None:
    covered = {requirement for case in USERHOST.cases().values() for requirement in case.requirements}
    mandatory = [r.id for r in USERHOST.requirements().values() if r.tier is RequirementTier.MANDATORY]
    assert [rid for rid in mandatory if rid not in covered] == []


def test_every_case_names_known_requirements_of_its_own_area_or_others() -> None:
    known = USERHOST.requirements()
    for case in USERHOST.cases().values():
        assert case.requirements, f"{case.id} names no requirement"
        assert set(case.requirements) <= set(known), f"{case.id}: {set(case.requirements) - set(known)}"
        assert case.doc, f"{case.id} has no docstring saying what it checks"


def test_list_names_every_requirement(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list", "--suite", "userhost"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("userhost: the user-host RPC\n")
    assert all(requirement in out for requirement in USERHOST.requirements())


async def test_the_reference_host_passes_every_case() -> None:
    results = await run_all(list(USERHOST.cases().values()), REFERENCE, jobs=2, timeout=20)
    failures = [result for result in results if result.counts_as_failure]
    report = "\n\n".join(f"{r.case.id}: {r.message}\n{r.transcript[-3000:]}" for r in failures)
    assert not failures, f"{len(failures)} of {len(results)} cases failed:\n{report}"
    skipped = [r.case.id for r in results if r.status is Status.SKIPPED]
    # The one case for a host without the receipts observer: the test below runs it against one.
    assert skipped == ["admission.receipts-off"], skipped


async def test_a_host_without_a_socket_skips_the_cases_that_need_several_clients() -> None:
    stdio_only = [*SERVE, "--composition-profile", "personal", "--stdio"]
    cases = select(USERHOST.cases().values(), ["initialize.*", "clients.*"], [])
    results = {r.case.id: r for r in await run_all(cases, stdio_only, jobs=2, timeout=20)}
    assert not [r for r in results.values() if r.status is Status.FAILED], results
    skipped = [r for r in results.values() if r.status is Status.SKIPPED]
    assert skipped and all("takes no {socket}" in r.message for r in skipped), skipped
    assert results["initialize.binding-reported"].status is Status.PASSED


async def test_a_host_without_personal_skips_the_personal_cases() -> None:
    bare = [*SERVE, "--stdio", "--listen", "unix:{socket}"]
    cases = select(USERHOST.cases().values(), ["admission.*", "initialize.binding-reported"], [])
    results = {r.case.id: r for r in await run_all(cases, bare, jobs=2, timeout=20)}
    assert results["initialize.binding-reported"].status is Status.PASSED
    personal = [r for case_id, r in results.items() if case_id.startswith("admission.")]
    assert personal and all(r.status is Status.SKIPPED and "wuu.personal" in r.message for r in personal)


async def test_a_host_that_takes_no_isolation_skips_the_isolation_case() -> None:
    cases = select(USERHOST.cases().values(), ["startup.*"], [])
    results = await run_all(cases, [*SERVE, "--stdio"], jobs=1, timeout=20)
    assert results and all(r.status is Status.SKIPPED for r in results), results
    assert all("takes no {isolation}" in r.message for r in results), results


async def test_a_coding_host_passes_the_core_cases_and_skips_the_personal_ones() -> None:
    coding = [*SERVE, "--isolation", "{isolation}", "--stdio", "--listen", "unix:{socket}"]
    core = ["initialize.*", "envelope.*", "methods.*", "clients.*", "push.*", "startup.*", "cancel.*"]
    cases = select(USERHOST.cases().values(), [*core, "admission.*"], [])
    factory = partial(HostSession, product_domain="coding")
    results = {r.case.id: r for r in await run_all(cases, coding, jobs=2, timeout=20, factory=factory)}
    assert not [r for r in results.values() if r.counts_as_failure], results
    assert results["initialize.binding-reported"].status is Status.PASSED
    assert results["methods.coding-refused"].status is Status.PASSED
    for case_id in ("admission.receipt", "admission.receipts-off", "envelope.duplicate-in-flight-id"):
        assert results[case_id].status is Status.SKIPPED
        assert "no wuu.personal: the Personal cases do not apply" in results[case_id].message


async def test_a_host_without_the_receipts_observer_admits_nothing(tmp_path: Path) -> None:
    configuration = tmp_path / "wuu.json"
    quiet = {"base": "personal", "remove_modules": ["wuu.client-input-receipts"]}
    configuration.write_text(json.dumps({"composition_profiles": {"quiet": quiet}}), encoding="utf-8")
    command = [*SERVE, "--config", str(configuration), "--composition-profile", "quiet"]
    command += ["--isolation", "{isolation}", "--stdio", "--listen", "unix:{socket}"]
    cases = select(USERHOST.cases().values(), ["admission.*", "cancel.*"], [])
    results = {r.case.id: r for r in await run_all(cases, command, jobs=2, timeout=20)}
    assert not [r for r in results.values() if r.counts_as_failure], results
    assert results["admission.receipts-off"].status is Status.PASSED
    for case_id in ("admission.receipt", "admission.replay", "cancel.connection-local"):
        assert results[case_id].status is Status.SKIPPED
        assert "does not select wuu.client-input-receipts" in results[case_id].message


def test_product_domain_is_refused_for_the_worker_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--product-domain", "coding", "--", "true"]) == 2
    assert "--product-domain: only the userhost suite binds one" in capsys.readouterr().err
