"""The errors a client can cause, raised by the services and answered by the HTTP layer (agents/api/exceptions.py
maps each to its status) and the CLI; they import nothing but the standard library, so any layer may raise them."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """Base of the errors a client can cause; `detail` is safe to show."""

    def __init__(self, detail: Any) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(ServiceError):
    """400: the request names something that cannot be used."""


class NotAllowed(ServiceError):
    """403."""


class RunBusy(ServiceError):
    """409: another worker is advancing this run right now (or it is not in a status the caller can work on)."""

    def __init__(self, detail: Any, status: str | None = None) -> None:
        super().__init__(detail)
        self.status = status


class RunFinished(ServiceError):
    """409: the run is done."""


class UnknownTool(ServiceError):
    """404: no tool of that name."""


class ThreadBusy(ServiceError):
    """409: the thread's latest run is not done (a thread runs one run at a time)."""
