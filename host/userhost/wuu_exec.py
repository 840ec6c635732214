"""`wuu exec`: one non-interactive run of the built-in Wuu engine in a chosen permission mode
(spec/schema/permissions/exec_run.schema.json, ExecRun, which also states the exit statuses).

    wuu exec --permission-mode read_only "Explain the repository without changing files"
    wuu exec --permission-mode standard --json "/write notes.txt
    hello"

The run itself is builtin_engine.py's, on the configured model (the deterministic stand-in by default): the
worker's own checks allow or refuse each call, nobody is asked, and `wuu exec` has no "Approve for me". The
mode comes from the flag alone; no file of the project is read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from wuu.generated.models import ExecCall, ExecCallOutcome, ExecRunStatus, PermissionMode

from .builtin_engine import run_once
from .configuration import ConfigurationError, home_of, load_configuration
from .personal.model import ModelAdapter, ModelConfig, ModelConfigError

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3


class UsageError(Exception):
    """A flag or the configuration cannot be used: nothing runs (exit status 2)."""


def add_parser(areas: Any) -> None:
    """`wuu exec` beside the other areas of the `wuu` command."""
    command = areas.add_parser(
        "exec",
        help="run the built-in engine once on a project, non-interactively",
        description="Put PROMPT before the built-in engine's model and run each tool call it asks for in a "
        "native worker bound to the project, in the permission mode of --permission-mode. Exit status: 0 "
        "completed, 3 completed with a refused call, 1 failed, 2 a usage or configuration error.",
    )
    command.add_argument("prompt", metavar="PROMPT", help="what to do")
    command.add_argument(
        "--permission-mode",
        choices=[mode.value for mode in PermissionMode],
        default=PermissionMode.STANDARD.value,
        help="the mode the calls run in (default: standard); nothing else selects it",
    )
    command.add_argument("--cd", metavar="DIR", help="the project directory (default: the working directory)")
    command.add_argument("--json", action="store_true", help="print the ExecRun JSON result on stdout")
    command.add_argument("--config", metavar="FILE", help="the absolute path of the user configuration file")
    command.add_argument("--home", metavar="DIR", help="Wuu home (default: $WUU_HOME, else ~/.wuu)")


def main(args: argparse.Namespace) -> int:
    """Run `wuu exec` with parsed `args`; its exit status."""
    try:
        root = _project(args.cd)
        model = _model(args.config, args.home)
    except UsageError as error:
        print(f"wuu exec: {error}", file=sys.stderr)
        return EXIT_USAGE
    mode = PermissionMode(args.permission_mode)
    run = asyncio.run(run_once(args.prompt, mode, root, model))
    if args.json:
        print(json.dumps(run.to_wire(), indent=2, ensure_ascii=False))
    else:
        for call in run.calls:
            print(f"wuu exec: {call.tool}: {_summary(call)}", file=sys.stderr)
        if run.failure is not None:
            print(f"wuu exec: the run failed: {run.failure}", file=sys.stderr)
        if run.text:
            print(run.text)
    if run.status is ExecRunStatus.FAILED:
        return EXIT_FAILED
    return (
        EXIT_REFUSED if any(call.outcome is ExecCallOutcome.REFUSED for call in run.calls) else EXIT_COMPLETED
    )


def _summary(call: ExecCall) -> str:
    if call.outcome is ExecCallOutcome.RAN:
        return "ran, and failed" if call.is_error else "ran"
    return f"{call.outcome.value}: {call.error}"


def _project(given: str | None) -> Path:
    root = Path(given).resolve() if given is not None else Path.cwd()
    if not root.is_dir():
        raise UsageError(f"--cd: {given!r} is not a directory")
    return root


def _model(config: str | None, given_home: str | None) -> ModelAdapter:
    try:
        configured = load_configuration(config, home_of(given_home)).content.model
        return ModelConfig.parse(configured.to_wire() if configured is not None else {}).adapter()
    except (ConfigurationError, ModelConfigError) as error:
        raise UsageError(str(error)) from None
