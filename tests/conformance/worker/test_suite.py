"""The conformance suite itself: its registry, its runner rules and reports, and its verdict on real adapters."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.helpers import passes_every_case, tool_cases_here
from wuu.conformance import cli
from wuu.conformance.registry import spec_text
from wuu.conformance.runner import Status, known_failing, mark_known_failing, run_all, select
from wuu.conformance.worker.suite import WORKER
from wuu.generated.models import RequirementTier

ROOT = Path(__file__).resolve().parents[3]
NATIVE = [sys.executable, "-m", "wuu.worker"]
DELEGATED = [sys.executable, str(ROOT / "tests" / "worker" / "fixtures" / "delegating_worker.py")]
# No worker: it answers its first line with an empty object (so it starts), and breaks every rule after.
NO_WORKER = ["sh", "-c", "read line; echo '{}'"]
NODE = ["node", str(ROOT / "conformance" / "examples" / "node" / "worker.mjs")]
# The native worker with extension keys in its tools' result metadata, which the spec allows.
EXTENDED = [
    sys.executable,
    str(ROOT / "tests" / "conformance" / "worker" / "fixtures" / "extension_worker.py"),
]


# --- the registry -------------------------------------------------------------------------------------


def test_every_requirement_points_at_spec_text() -> None:
    for requirement in WORKER.requirements().values():
        assert len(spec_text(requirement.spec)) > 20, requirement.id


def test_capability_requirements_name_what_they_depend_on() -> None:
    for requirement in WORKER.requirements().values():
        assert (requirement.tier is RequirementTier.CAPABILITY) == (requirement.applies_to is not None), (
            requirement.id
        )


def test_every_mandatory_requirement_has_a_case() -> None:
    covered = {requirement for case in WORKER.cases().values() for requirement in case.requirements}
    missing = [
        r.id
        for r in WORKER.requirements().values()
        if r.tier is RequirementTier.MANDATORY and r.id not in covered
    ]
    assert missing == []


def test_every_case_names_known_requirements() -> None:
    for case in WORKER.cases().values():
        assert case.requirements, f"{case.id} names no requirement"
        unknown = set(case.requirements) - set(WORKER.requirements())
        assert not unknown, f"{case.id} names unknown requirements {unknown}"
        assert case.doc, f"{case.id} has no docstring saying what it checks"


# --- runner rules ---------------------------------------------------------------------------------------


def test_known_failing_file_syntax() -> None:
    assert known_failing(["# comment", "", "init.*  # why", " framing.duplicate-id "]) == [
        "init.*",
        "framing.duplicate-id",
    ]


async def test_a_known_failing_case_must_fail_and_an_entry_naming_no_case_is_stale() -> None:
    cases = select(WORKER.cases().values(), ["init.token-pinned", "init.reply-shape"], [])
    results = await run_all(cases, NO_WORKER, jobs=2, timeout=5)
    assert {r.status for r in results} == {Status.FAILED}
    marked, stale = mark_known_failing(results, ["init.token-pinned", "nosuch.*"], WORKER.cases().values())
    assert stale == ["nosuch.*"]
    by_id = {r.case.id: r for r in marked}
    assert by_id["init.token-pinned"].known_failing and not by_id["init.token-pinned"].counts_as_failure
    assert by_id["init.reply-shape"].counts_as_failure


async def test_a_known_failing_case_that_passes_fails_the_run() -> None:
    cases = select(WORKER.cases().values(), ["init.reply-shape"], [])
    results = await run_all(cases, NATIVE, jobs=1, timeout=10)
    marked, stale = mark_known_failing(results, ["init.reply-shape"], WORKER.cases().values())
    assert marked[0].status is Status.PASSED and marked[0].counts_as_failure and stale == []


def test_cli_reports_in_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    known = tmp_path / "known-failing.txt"
    known.write_text("init.token-pinned  # the adapter below is no worker\n")
    code = cli.main(
        [
            "run",
            "--only",
            "init.token-pinned",
            "--only",
            "init.reply-shape",
            "--known-failing",
            str(known),
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "r.xml"),
            "--timeout",
            "5",
            "--",
            *NO_WORKER,
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert out.rstrip().splitlines()[-1] == "1 passed, 1 failed"
    assert "XFAIL init.token-pinned" in out and "FAIL  init.reply-shape" in out
    assert "requirement init.reply (mandatory)" in out and "frames (> sent, < received):" in out
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["summary"] == {"passed": 1, "failed": 1, "skipped": 0}
    suites = ElementTree.parse(tmp_path / "r.xml").getroot()
    assert [suite.get("failures") for suite in suites] == ["1"]


def test_cli_without_a_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run"]) == 2
    assert "give the command under test after --" in capsys.readouterr().err


def test_list_names_every_requirement(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(requirement in out for requirement in WORKER.requirements())


# --- the verdict on real adapters -----------------------------------------------------------------------


BWRAP_SANDBOX = str(Path(sys.executable).with_name("wuu-bwrap-sandbox"))
SANDBOX_CASES = ("paths.*", "scope.*", "tools.*", "process.*", "run_code.*", "cancel.*")
"""The cases whose commands (or programs) the OS sandbox confines."""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (bwrap)")
async def test_the_sandbox_cases_pass_under_the_bwrap_extension() -> None:
    """Commands confined by the sandbox.process@1 extension on bubblewrap pass what Landlock passes."""
    extension = ["WUU_SANDBOX_BACKEND=extension", f"WUU_SANDBOX_PROCESS={BWRAP_SANDBOX}"]
    command = ["env", *extension, *NATIVE]
    # scope.command-roots is skipped where commands cannot run confined: it must run here.
    confined = ("scope.command-roots", *tool_cases_here())
    await passes_every_case(
        command, "under wuu-bwrap-sandbox", timeout=20, only=SANDBOX_CASES, must_run=confined
    )


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(NATIVE, id="native"),
        pytest.param(DELEGATED, id="delegated"),
        pytest.param(EXTENDED, id="extension-keys-in-metadata"),
        pytest.param(
            NODE,
            id="node",
            marks=pytest.mark.skipif(
                shutil.which("node") is None or not Path(NODE[1]).exists(),
                reason="needs node and the Node adapter",
            ),
        ),
    ],
)
async def test_the_adapter_passes_every_case(command: list[str]) -> None:
    # The Node example has search but neither Git nor run_code; the others are the native worker.
    must_run = ("search.*",) if command == NODE else tool_cases_here()
    await passes_every_case(command, f"against {command[-1]}", timeout=20, must_run=must_run)


async def test_a_known_metadata_key_of_the_wrong_type_fails_beside_extension_keys() -> None:
    # The same adapter as above, but read_file's `size` (an integer in the spec) is a string.
    command = ["env", "WUU_TEST_METADATA=wrong-type", *EXTENDED]
    cases = select(WORKER.cases().values(), ["tools.read-file", "framing.replies-follow-schema"], [])
    results = await run_all(cases, command, jobs=2, timeout=20)
    assert {result.case.id: result.status for result in results} == {
        "tools.read-file": Status.FAILED,
        "framing.replies-follow-schema": Status.FAILED,
    }
    for result in results:
        assert (
            "the metadata of read_file" in result.message
            and "does not follow ReadFileMetadata" in result.message
        )
        assert "is not of type 'integer'" in result.message, result.message
