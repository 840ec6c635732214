"""The host side: the typed worker client over the command transport (and, later, profiles and backends)."""

from .client import CloseOutcome, ConnectionLost, ProtocolViolation, ReplyError, WorkerClient

__all__ = ["CloseOutcome", "ConnectionLost", "ProtocolViolation", "ReplyError", "WorkerClient"]
