"""The worker SDK of the v4 execution-worker protocol, and the native reference worker (`wuu.worker.native`).

A worker is an `ExecutionBackendV4` (initialize, a methods map, close) served by
`run_execution_backend_v4`; the SDK owns framing, the token and binding rules, validation,
cancellation, callbacks and the end of the connection.

The names below load on first use (PEP 562): `python -m wuu.worker` and a relay import this package
first, and must not pay for the parts of the SDK they do not run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_names import loader

if TYPE_CHECKING:
    from .backend import ExecutionBackendV4, Handler, RequestContext
    from .delegate import AttachedTransport, delegate_execution_backend_v4
    from .errors import CleanupFailed, WorkerError
    from .run import run_execution_backend_v4, serve

_MODULE_OF = {
    "AttachedTransport": "delegate",
    "CleanupFailed": "errors",
    "ExecutionBackendV4": "backend",
    "Handler": "backend",
    "RequestContext": "backend",
    "WorkerError": "errors",
    "delegate_execution_backend_v4": "delegate",
    "run_execution_backend_v4": "run",
    "serve": "run",
}

__all__ = [
    "AttachedTransport",
    "CleanupFailed",
    "ExecutionBackendV4",
    "Handler",
    "RequestContext",
    "WorkerError",
    "delegate_execution_backend_v4",
    "run_execution_backend_v4",
    "serve",
]


__getattr__ = loader(__name__, _MODULE_OF)
