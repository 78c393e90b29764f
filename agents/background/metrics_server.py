"""/metrics of a machine that runs only workers (`run_worker`, or a Celery worker): its own port, the web's rules.

A machine running gunicorn has /metrics at the site's address. One running only workers has no HTTP server, so with
AGENT_METRICS on and AGENT_WORKER_METRICS_PORT set, the worker serves the same exposition on that port (bound to
AGENT_WORKER_METRICS_HOST, 127.0.0.1 unless set): every process of this machine added up from AGENT_METRICS_DIR (each
worker process writes its own files), the database's gauges (approvals waiting, the queue's depth), and the token
rule of AGENT_METRICS_TOKEN (a scrape without `Authorization: Bearer <token>` is a 401). Anything but GET or HEAD
/metrics is a 404 or a 405. The server is a thread of the worker's process (a greenlet under gevent); a second worker
process on the same machine finding the port taken logs it and serves nothing (one server reads every process's
files anyway).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections

from agents.runs import selectors

log = logging.getLogger(__name__)
_server: list[WSGIServer] = []


def port_problem(port: int) -> str | None:
    """What is wrong with serving on `port` (0: not serving), or None."""
    if not 0 <= port <= 65535:
        return "The worker's metrics port (AGENT_WORKER_METRICS_PORT, --metrics-port) must be between 0 and 65535."
    if port and not settings.AGENT_METRICS:
        return "The worker's metrics port (AGENT_WORKER_METRICS_PORT, --metrics-port) needs AGENT_METRICS=1."
    return None


def start_from_settings() -> WSGIServer | None:
    """Start the server when AGENT_WORKER_METRICS_PORT is set (it needs AGENT_METRICS): None when it is not, or the
    port is taken by another process of this machine."""
    port = int(settings.AGENT_WORKER_METRICS_PORT)
    problem = port_problem(port)
    if problem is not None:
        raise ImproperlyConfigured(problem)
    return start(settings.AGENT_WORKER_METRICS_HOST, port) if port else None


def start(host: str, port: int) -> WSGIServer | None:
    try:
        server = make_server(host, port, app, handler_class=_QuietHandler)
    except OSError as exc:
        log.warning("worker metrics: %s:%d not served (%s)", host, port, exc.strerror or exc)
        return None
    thread = threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True)
    thread.start()
    _server.append(server)
    log.info("worker metrics at http://%s:%d/metrics", host, server.server_port)
    return server


def stop() -> None:
    while _server:
        server = _server.pop()
        server.shutdown()
        server.server_close()


def app(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
    """The WSGI app: GET or HEAD /metrics, the token rule, the exposition."""
    from reactsite.observability import metrics  # served only with metrics on (start_from_settings)

    path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
    if path.rstrip("/") != "/metrics":
        return _answer(start_response, "404 Not Found", b"Not found.\n")
    if method not in ("GET", "HEAD"):
        return _answer(start_response, "405 Method Not Allowed", b"GET or HEAD.\n", [("Allow", "GET, HEAD")])
    if not metrics.authorised(environ.get("HTTP_AUTHORIZATION", ""), settings.AGENT_METRICS_TOKEN):
        challenge = [("WWW-Authenticate", metrics.CHALLENGE)]
        return _answer(start_response, "401 Unauthorized", metrics.UNAUTHORISED.encode(), challenge)
    try:
        body, content_type = metrics.exposition(
            settings.AGENT_METRICS_DIR, selectors.waiting_counts, environ.get("HTTP_ACCEPT", "")
        )
    finally:
        close_old_connections()  # the queue gauges' connection is this thread's: never left open
    headers = [("Content-Type", content_type), ("Cache-Control", "no-store")]
    return _answer(start_response, "200 OK", b"" if method == "HEAD" else body, headers, length=len(body))


def _answer(start_response: Callable, status: str, body: bytes, headers=None, length: int | None = None):
    headers = list(headers or [("Content-Type", "text/plain; charset=utf-8")])
    headers.append(("Content-Length", str(len(body) if length is None else length)))
    start_response(status, headers)
    return [body]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
        pass  # one line per scrape would drown the worker's log
