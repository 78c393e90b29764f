"""Request ids, JSON logs, Prometheus metrics and OpenTelemetry traces (docs/observability.md)."""

import hashlib
import os
import tempfile

from reactsite.settings.base import MIDDLEWARE as _MIDDLEWARE
from reactsite.settings.base import env
from reactsite.settings.database import DATABASES
from reactsite.settings.security import SECURE_REDIRECT_EXEMPT as _REDIRECT_EXEMPT

# Request ids: echoed from X-Request-ID or generated, returned on every response, added to every log line.
LOG_REQUEST_ID_HEADER = "HTTP_X_REQUEST_ID"
GENERATE_REQUEST_ID_IF_NOT_IN_HEADER = True
REQUEST_ID_RESPONSE_HEADER = "X-Request-ID"
NO_REQUEST_ID = "none"
# One JSON line per request (django-log-request-id: method, path, status and the user's id), with its request id,
# in place of gunicorn's plain-text access line (off by default: gunicorn.conf.py).
LOG_REQUESTS = env.bool("LOG_REQUESTS", default=True)

LOG_LEVEL = env("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "log_request_id.filters.RequestIDFilter"},
        "task_start_at_debug": {"()": "reactsite.logfilters.TaskStartAtDebug"},
    },
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
        }
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's own defaults give these a plain-text handler ("Bad Request: /api/v1/runs" under DEBUG; runserver's
        # lines): without one they reach the root's JSON handler like every other line.
        "django": {"handlers": [], "propagate": True},
        "django.server": {"handlers": [], "propagate": True},
        "django.db.backends": {"level": "WARNING"},
        "django.tasks": {"filters": ["task_start_at_debug"]},  # one INFO line per task (its end), as per request
        "httpx2": {"level": "WARNING"},
        "openai": {"level": "WARNING"},
        "anthropic": {"level": "WARNING"},
    },
}

# Prometheus metrics at /metrics (docs/observability.md#metrics). Off by default: /metrics is then a 404 like any
# unknown address and no observer is registered. AGENT_METRICS_TOKEN set: a scrape must send it as
# `Authorization: Bearer <token>` (401 otherwise).
AGENT_METRICS = env.bool("AGENT_METRICS", default=False)
AGENT_METRICS_TOKEN = env.str("AGENT_METRICS_TOKEN", default="")
# Every process of a machine (gunicorn's workers, each run_worker) writes its metrics to files in this directory and
# /metrics adds them up (prometheus_client's multiprocess mode): PROMETHEUS_MULTIPROC_DIR, else a directory of the
# temporary directory named after the database (so a test database and the development one never mix). One per machine:
# never a directory shared between machines or containers (a file is named after its process id). prometheus_client
# reads the variable once, when it is first imported, so with metrics on it is exported here, before anything imports
# it (reactsite/observability/metrics.py `install` makes sure of it again, whatever was imported first).
_DB_DIGEST = hashlib.sha256(str(DATABASES["default"]["NAME"]).encode()).hexdigest()[:12]
_METRICS_DEFAULT_DIR = os.path.join(tempfile.gettempdir(), f"reactsite-metrics-{_DB_DIGEST}")
AGENT_METRICS_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="") or _METRICS_DEFAULT_DIR
if AGENT_METRICS:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = AGENT_METRICS_DIR
# Scraped over plain HTTP on the private network like the health probe, not redirected to HTTPS.
SECURE_REDIRECT_EXEMPT = [*_REDIRECT_EXEMPT, r"^metrics/?$"] if AGENT_METRICS else _REDIRECT_EXEMPT

# Traces (docs/observability.md): OpenTelemetry spans of each request, run, unit, model and tool call, sent over
# OTLP/HTTP to the endpoint of the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT or ..._TRACES_ENDPOINT; the SDK
# reads OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER and the others itself). On when one is set; AGENT_OTEL_TRACES=1 forces
# them on (the SDK's default endpoint, localhost:4318), 0 off. Off, OpenTelemetry's SDK is never imported.
_OTEL_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", default="") or env.str(
    "OTEL_EXPORTER_OTLP_ENDPOINT", default=""
)
AGENT_OTEL_TRACES = env.bool(
    "AGENT_OTEL_TRACES", default=bool(_OTEL_ENDPOINT) and not env.bool("OTEL_SDK_DISABLED", default=False)
)
# Prompts, replies and tool results on the spans (the GenAI conventions' opt-in attributes): users' text, off.
AGENT_OTEL_CAPTURE_CONTENT = env.bool("AGENT_OTEL_CAPTURE_CONTENT", default=False)
# First: a request's span covers every other middleware.
_TRACING = ["reactsite.observability.tracing.TracingMiddleware"] if AGENT_OTEL_TRACES else []
MIDDLEWARE = [*_TRACING, *_MIDDLEWARE]
