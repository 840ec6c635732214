"""Reports of a conformance run: a terminal report grouped by area, JSON, and JUnit XML."""

from __future__ import annotations

import json
import shlex
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from xml.etree import ElementTree

from .registry import Suite
from .runner import CaseResult, Status


@dataclass(frozen=True)
class Summary:
    passed: int
    failed: int
    skipped: int

    @property
    def line(self) -> str:
        """The run's last line: `N passed, N failed` and, when any, `, N skipped`."""
        text = f"{self.passed} passed, {self.failed} failed"
        return text + (f", {self.skipped} skipped" if self.skipped else "")


def summarize(results: Sequence[CaseResult], stale: Sequence[str]) -> Summary:
    failed = sum(result.counts_as_failure for result in results) + len(stale)
    skipped = sum(result.status is Status.SKIPPED and not result.counts_as_failure for result in results)
    passed = len(results) - skipped - (failed - len(stale))
    return Summary(passed, failed, skipped)


def _requirement_lines(result: CaseResult) -> list[str]:
    lines = []
    registry = result.case.suite.requirements()
    for requirement_id in result.case.requirements:
        requirement = registry[requirement_id]
        lines.append(f"requirement {requirement.id} ({requirement.tier.value}): {requirement.description}")
        lines.append(f"  spec {requirement.spec}:")
        lines.extend("    " + line for line in textwrap.wrap(requirement.spec_text, 100))
    return lines


def terminal(
    results: Sequence[CaseResult], stale: Sequence[str], command: Sequence[str], suite: Suite
) -> str:
    """The human report: each area's cases, failures with requirement, spec text and frames; the totals."""
    out = [f"wuu-conformance: {suite.title}, {len(results)} cases against {shlex.join(command)}", ""]
    for area, group in groupby(sorted(results, key=lambda r: r.case.id), key=lambda r: r.case.area):
        out.append(area)
        for result in group:
            label = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.SKIPPED: "SKIP"}[result.status]
            if result.known_failing:
                label = "XPASS" if result.status is Status.PASSED else "XFAIL"
            out.append(f"  {label:5} {result.case.id:<60} {result.duration:6.2f} s")
            if result.status is Status.SKIPPED:
                out.append(f"        {result.message}")
            if (result.status is Status.FAILED and not result.known_failing) or label == "XPASS":
                detail = result.message if label != "XPASS" else "listed as known-failing, but it passed"
                out.extend("        " + line for line in detail.splitlines())
                out.extend("        " + line for line in _requirement_lines(result))
                out.append("        frames (> sent, < received):")
                out.extend("          " + line for line in (result.transcript or "(none)").splitlines())
        out.append("")
    for glob in stale:
        out.append(f"stale known-failing entry {glob!r}: it names no case of the suite")
    expected = sum(r.known_failing and r.status is Status.FAILED for r in results)
    if expected:
        out.append(f"{expected} known-failing case(s) failed as expected")
    out.append(summarize(results, stale).line)
    return "\n".join(out)


def as_json(results: Sequence[CaseResult], stale: Sequence[str], command: Sequence[str], suite: Suite) -> str:
    summary = summarize(results, stale)
    document = {
        "suite": suite.name,
        "command": list(command),
        "summary": {"passed": summary.passed, "failed": summary.failed, "skipped": summary.skipped},
        "stale_known_failing": list(stale),
        "cases": [
            {
                "id": result.case.id,
                "area": result.case.area,
                "requirements": list(result.case.requirements),
                "status": result.status.value,
                "known_failing": result.known_failing,
                "message": result.message,
                "duration_s": round(result.duration, 4),
                "transcript": result.transcript if result.status is Status.FAILED else "",
            }
            for result in results
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def as_junit(results: Sequence[CaseResult], stale: Sequence[str], suite: Suite) -> str:
    suites = ElementTree.Element("testsuites", name=f"wuu-conformance {suite.name}")
    for area, group in groupby(sorted(results, key=lambda r: r.case.id), key=lambda r: r.case.area):
        cases = list(group)
        area_suite = ElementTree.SubElement(
            suites,
            "testsuite",
            name=area,
            tests=str(len(cases)),
            failures=str(sum(r.counts_as_failure for r in cases)),
            skipped=str(sum(r.status is Status.SKIPPED for r in cases)),
            time=f"{sum(r.duration for r in cases):.3f}",
        )
        for result in cases:
            element = ElementTree.SubElement(
                area_suite,
                "testcase",
                classname=f"wuu.conformance.{suite.name}.{area}",
                name=result.case.id,
                time=f"{result.duration:.3f}",
            )
            if result.counts_as_failure:
                failure = ElementTree.SubElement(
                    element,
                    "failure",
                    message=result.message.splitlines()[0] if result.message else "known-failing case passed",
                )
                failure.text = "\n".join([result.message, *_requirement_lines(result), result.transcript])
            elif result.status is Status.SKIPPED:
                ElementTree.SubElement(element, "skipped", message=result.message)
    for glob in stale:
        stale_suite = ElementTree.SubElement(
            suites, "testsuite", name="known-failing", tests="1", failures="1"
        )
        element = ElementTree.SubElement(
            stale_suite, "testcase", classname="wuu.conformance", name=f"stale {glob}"
        )
        ElementTree.SubElement(element, "failure", message=f"{glob} names no case of the suite")
    return ElementTree.tostring(suites, encoding="unicode") + "\n"


def write(path: str | None, text: str) -> None:
    if path:
        Path(path).write_text(text, encoding="utf-8")
