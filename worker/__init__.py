"""The worker SDK of the v4 execution-worker protocol, and the native reference worker (`wuu.worker.native`).

A worker is an `ExecutionBackendV4` (initialize, a methods map, close) served by
`run_execution_backend_v4`; the SDK owns framing, the token and binding rules, validation,
cancellation, callbacks and the end of the connection.
"""

from .backend import ExecutionBackendV4, Handler, RequestContext
from .delegate import AttachedTransport, delegate_execution_backend_v4
from .errors import CleanupFailed, WorkerError
from .run import run_execution_backend_v4, serve

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
