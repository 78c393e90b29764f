"""Logging filters of the settings' LOGGING."""

from __future__ import annotations

import logging


class TaskStartAtDebug(logging.Filter):
    """One INFO line per task, as one per request: django.tasks logs a task's start and its end at INFO; the end (with
    its outcome) stays, the start becomes a DEBUG line (kept only when the logger is enabled for DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.levelno != logging.INFO or not args or str(args[-1]) != "RUNNING":
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True
