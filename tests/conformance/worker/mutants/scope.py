"""Mutants of the file scope: file roots ignored, the temporary root writable by commands, the binding's
Wuu home left out of the credential guard, a second Wuu home accepted, a missing file root created."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from wuu.generated.models import FileRootKind, InitializeParams
from wuu.worker import ExecutionBackendV4, RequestContext
from wuu.worker.native.worker import NativeWorker

from . import mutant
from .harness import rewrite_initialize


@mutant(
    "ignores-file-roots",
    "binds the root alone, whatever file roots the binding names",
    "scope.file-roots",
)
def ignores_file_roots(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """The worker is bound as if the binding named no file roots (the SDK still pins them as asked)."""
    return rewrite_initialize(lambda params: {"file_roots": None})(worker, backend)


@mutant(
    "temporary-root-writable",
    "lets standard commands write beneath the temporary file root",
    "scope.command-roots",
)
def temporary_root_writable(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """Every file root, the shared temporary directory included, is a writable root of standard commands."""

    def every_root() -> list[Path]:
        return [Path(each.path) for each in worker._file_roots]

    worker._command_roots = every_root  # type: ignore[method-assign]
    return backend


@mutant(
    "binding-wuu-home-not-guarded",
    "guards only its own Wuu home's credential files, not the binding's wuu_home",
    "scope.wuu-home",
)
def binding_wuu_home_not_guarded(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """The sensitive-path guard keeps the worker's own Wuu home only."""
    own = worker._sensitive

    async def initialize(params: InitializeParams, context: RequestContext) -> None:
        await backend.initialize(params, context)
        worker._sensitive = own

    return dataclasses.replace(backend, initialize=initialize)


def _first_wuu_home(params: InitializeParams) -> dict[str, object]:
    roots = list(params.file_roots or ())
    homes = [each for each in roots if each.kind is FileRootKind.WUU_HOME]
    return {
        "file_roots": [each for each in roots if each.kind is not FileRootKind.WUU_HOME or each is homes[0]]
    }


@mutant(
    "accepts-two-wuu-homes",
    "binds the first of two wuu_home file roots instead of refusing the binding",
    "scope.one-wuu-home",
)
def accepts_two_wuu_homes(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """A binding with two wuu_home roots is bound with the first alone."""
    return rewrite_initialize(_first_wuu_home)(worker, backend)


@mutant(
    "creates-missing-file-roots",
    "creates a missing file root although the binding requires existing directories",
    "scope.binding",
)
def creates_missing_file_roots(worker: NativeWorker, backend: ExecutionBackendV4) -> ExecutionBackendV4:
    """Under require_existing_workspace, the file roots (not the root) that are missing are made first."""

    async def initialize(params: InitializeParams, context: RequestContext) -> None:
        if params.require_existing_workspace and Path(params.root).is_dir():
            for each in params.file_roots or ():
                Path(each.path).mkdir(parents=True, exist_ok=True)
        await backend.initialize(params, context)

    return dataclasses.replace(backend, initialize=initialize)
