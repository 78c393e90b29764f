"""gunicorn's own log lines (starting, booting a worker, a worker's error) as JSON lines, like every line the app
writes (settings.LOGGING): the server's log is JSON only. The access log, off unless GUNICORN_ACCESSLOG asks for it,
keeps gunicorn's format."""

from __future__ import annotations

from typing import Any

from gunicorn.glogging import Logger
from pythonjsonlogger.json import JsonFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"  # the app's fields, but the request id it has not


class JsonLogger(Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter(FORMAT))
