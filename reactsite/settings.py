"""Settings for reactsite, read from the environment (django-environ)."""

import hashlib
import os
import tempfile
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# `make run` / `make test` write a git-ignored .env once (DEBUG=1 and a generated development key), so every command
# of the README works from a plain shell. The environment always wins over the file; REACTSITE_ENV_FILE names another
# file, or none when empty.
ENV_FILE = os.environ.get("REACTSITE_ENV_FILE", str(BASE_DIR / ".env"))
if ENV_FILE and Path(ENV_FILE).is_file():
    environ.Env.read_env(ENV_FILE, overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
# Development keys (the .env file's, or the built-in one) start with "dev-": production refuses them.
DEV_KEY_PREFIX = "dev-"
SECRET_KEY = env("SECRET_KEY", default=DEV_KEY_PREFIX + "insecure-key-only-for-debug" if DEBUG else "")
if not DEBUG and (not SECRET_KEY or SECRET_KEY.startswith(DEV_KEY_PREFIX)):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a real secret when DEBUG is off (a development key starting with 'dev-' is "
        "refused); or set DEBUG=1 for development."
    )
ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"] + (["testserver"] if DEBUG else [])
)
VERSION = "0.1.0"  # the package's (pyproject.toml)
API_VERSION = "1.2"  # the HTTP contract this server implements (docs/api.md); GET /api/v1/health reports both

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_ratelimit",
    "django_tasks_db",
    "agents",
    "memory",
]

MIDDLEWARE = [
    "log_request_id.middleware.RequestIDMiddleware",
    "reactsite.serving.errors.JsonApiErrorsMiddleware",  # around every other: an error under /api/ is JSON, never HTML
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "reactsite.urls"
WSGI_APPLICATION = "reactsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database: a SQLite file in WAL mode by default; DATABASE_URL for PostgreSQL.
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
    DATABASES["default"].setdefault("TEST", {})["NAME"] = str(BASE_DIR / "test_db.sqlite3")
    # Django's backend, but under gevent a wait for the write lock yields to other greenlets (reactsite/serving/sqlite).
    DATABASES["default"]["ENGINE"] = "reactsite.serving.sqlite"
# Connections are reused across requests (opening one per request cost a connect and, on SQLite, the pragmas each
# time). PostgreSQL: a psycopg pool per process (DB_POOL_MAX_SIZE), and a run hands its connection back to the pool
# before every model call, so runs waiting on models hold none of PostgreSQL's connections. SQLite: a persistent
# connection per thread, checked before reuse (a file handle, not a server slot: kept during model calls).
_POSTGRES = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
if _POSTGRES and env.bool("DB_POOL", default=True):
    from reactsite.serving import pgpool

    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DB_POOL_MIN_SIZE", default=2),
        "max_size": env.int("DB_POOL_MAX_SIZE", default=20),
        "timeout": env.float("DB_POOL_TIMEOUT_S", default=10.0),
        "check": pgpool.check,  # one broken connection has the whole pool checked (reactsite/serving/pgpool.py)
    }
else:
    # Under gevent a connection belongs to a client connection's greenlet and closes with it
    # (reactsite/serving/green.py).
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=300)
# A connection whose session is gone (PostgreSQL restarted, failed over, or ended it) is found out and replaced before
# it serves anything: a persistent one is checked (SELECT 1) before a request's first query; with the pool, Django
# hands psycopg_pool `check=ConnectionPool.check_connection`, which checks each connection as it leaves the pool (an
# empty query, ~0.1 ms on loopback). Without it, after pg_terminate_backend 24 of the next 80 requests failed.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if _POSTGRES:  # a server that does not answer (a lost host, a full backlog) fails a connect in seconds, not minutes
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", env.int("DB_CONNECT_TIMEOUT_S", 5))
# PostgreSQL: parameters bound by the server and statements prepared on the connection after two runs, so the
# hot path's few statements are parsed and planned once per pooled connection instead of on every request (W3 at 8
# clients: PostgreSQL's CPU per run 3.0 -> 1.9 ms, ours 8.3-9.7 -> 8.1 ms). Behind a transaction-mode pgbouncer,
# which cannot keep prepared statements, set DB_SERVER_SIDE_BINDING=0.
if _POSTGRES and env.bool("DB_SERVER_SIDE_BINDING", default=True):
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"server_side_binding": True, "prepare_threshold": env.int("DB_PREPARE_THRESHOLD", default=2)}
    )
AGENT_RELEASE_DB_DURING_MODEL_CALLS = env.bool("AGENT_RELEASE_DB_DURING_MODEL_CALLS", default=_POSTGRES)
# PostgreSQL: a unit's commit that only a model call follows (no tool with side effects, no pause, not the run's
# end) does not wait for its WAL flush (synchronous_commit off for that one transaction). A killed worker loses
# nothing by it (the server has the commit); only a crash of the database server itself can lose such a step (its
# run then repeats up to ~0.6 s of model calls). Every other commit, and the run's last, waits as before, which also
# makes all earlier ones durable. The insert of a sync or step run does not wait either (its model call comes next,
# and the request's last commit waits before any response names the run). AGENT_RELAXED_COMMITS=0: all of them wait.
AGENT_RELAXED_COMMITS = env.bool("AGENT_RELAXED_COMMITS", default=True)
# gunicorn's workers collect once and freeze what survives after their first requests, so a full garbage collection
# no longer scans Django's and the SDKs' long-lived objects: ~150 -> ~18 ms per full collection, the collector 4.2 ->
# 1.3 % of a worker's CPU (reactsite/serving/heap.py). GC_TUNING=0 leaves Python's defaults.
GC_TUNING = env.bool("GC_TUNING", default=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Shared cache: Redis when REDIS_URL is set, else Django's database cache (shared by every process).
REDIS_URL = env("REDIS_URL", default="")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "reactsite.serving.cache.AtomicDatabaseCache", "LOCATION": "reactsite_cache"}}

# Background runs: Django's tasks framework, queued in the database; `manage.py db_worker` runs them
# (`make run` starts one beside gunicorn). Any process on any machine can pick up any run.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# One date format on every page (reactsite/formats: 2026-12-03 11:17:05), not the locale's "Dec. 3, 2026, 11:17 a.m.".
FORMAT_MODULE_PATH = ["reactsite.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# gunicorn serves the admin's static files through WhiteNoise (no separate web server needed).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# Security: on by default when DEBUG is off; each can be switched off (e.g. behind a TLS-terminating proxy).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health/?$"]
X_FRAME_OPTIONS = "DENY"
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=256 * 1024)

CORS_ALLOWED_ORIGINS = env.list("CORS_ALLOWED_ORIGINS", default=[])

# Rate limits: django-ratelimit's counters in the shared default cache (agents/limits/ratelimit.py). Its check E003
# refuses Django's DatabaseCache, whose incr is not atomic; the embedded default is
# reactsite.serving.cache.AtomicDatabaseCache, whose incr is (tests/integration/test_rate_counters.py), so E003 does
# not fire and stays live for a plain DatabaseCache. W001 ("not officially supported") fires for every backend but
# memcached and django-redis: Django's own RedisCache increments with Redis's atomic INCR and our database cache
# atomically too, so W001 alone is silenced. A per-process cache (locmem, dummy) is refused by E003 and by our own
# reactsite.E001 (agents/checks.py).
RATELIMIT_USE_CACHE = "default"
SILENCED_SYSTEM_CHECKS = ["django_ratelimit.W001"]

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

# Prometheus metrics at /metrics (docs/observability.md, "Metrics"). Off by default: /metrics is then a 404 like any
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
    SECURE_REDIRECT_EXEMPT = [*SECURE_REDIRECT_EXEMPT, r"^metrics/?$"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # The user's token, and the API keys they make (each held to its scopes: agents/api/permissions.py).
        "agents.api.authentication.FastTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "agents.api.schema.AutoSchema",  # bodies refuse unknown fields
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "agents.api.pagination.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_THROTTLE_CLASSES": [],
    "EXCEPTION_HANDLER": "agents.api.exceptions.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# API keys users make (docs/api-keys.md): a key's `last_used_at` is written at most once per this many seconds (per
# key, across processes through the shared cache), never on every request; 0 writes it on every request.
API_KEY_LAST_USED_EVERY_S = env.int("API_KEY_LAST_USED_EVERY_S", default=60)
# How many usable (not revoked, not expired) API keys one user may hold; making one more is a 400.
API_KEYS_PER_USER = env.int("API_KEYS_PER_USER", default=50)

SPECTACULAR_SETTINGS = {
    "TITLE": "reactsite API",
    "VERSION": VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # served locally: the docs page works with no internet
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Limits, tool arguments, the event stream and error statuses drf-spectacular cannot introspect.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agents.api.schema.postprocess",
        "memory.api.views.schema_postprocess",
    ],
    "ENUM_NAME_OVERRIDES": {
        "WebhookEventEnum": "agents.models.WebhookEvent",
        # A run's input parts (agents/api/schema.py PART_SCHEMAS): their `type` fields hold different choices.
        "InputTextPartTypeEnum": ["text"],
        "InputImagePartTypeEnum": ["image"],
        "ImageMediaTypeEnum": ["image/png", "image/jpeg", "image/gif", "image/webp"],
    },
}

# The agent runtime (docs/configuration.md says what each setting means).
AGENT_DEFAULT_PROVIDER = env("AGENT_DEFAULT_PROVIDER", default="demo")
AGENT_ALLOWED_PROVIDERS = env.list(
    "AGENT_ALLOWED_PROVIDERS", default=["demo", "openai", "anthropic", "xai", "huggingface", "openrouter"]
)
AGENT_DEFAULT_PROTOCOL = env("AGENT_DEFAULT_PROTOCOL", default="tools")
AGENT_SENSITIVE_TOOLS = env.list("AGENT_SENSITIVE_TOOLS", default=["search"])
AGENT_SELF_APPROVAL = env.bool("AGENT_SELF_APPROVAL", default=False)
AGENT_RATE_LIMIT = env("AGENT_RATE_LIMIT", default="30/m")
AGENT_MAX_INPUT_CHARS = env.int("AGENT_MAX_INPUT_CHARS", default=8000)
AGENT_MAX_TOOL_OUTPUT_CHARS = env.int("AGENT_MAX_TOOL_OUTPUT_CHARS", default=4000)
AGENT_LLM_TIMEOUT_S = env.float("AGENT_LLM_TIMEOUT_S", default=30.0)
AGENT_LLM_MAX_RETRIES = env.int("AGENT_LLM_MAX_RETRIES", default=2)
# Idle keep-alive connections kept per provider client and process (the SDKs keep 100). httpcore probes every idle
# connection for readability on each request; agents/providers/transport.py makes each probe one poll(2) instead of
# a gevent hub round trip, and this bounds how many there are (docs/performance.md).
AGENT_HTTP_MAX_KEEPALIVE = env.int("AGENT_HTTP_MAX_KEEPALIVE", default=32)
# A run's lease: short, renewed by the process working on it; a dead worker's runs are taken over this fast.
AGENT_LEASE_S = env.float("AGENT_LEASE_S", default=15.0)
# How event streams learn of new steps: auto (Redis pub/sub with REDIS_URL, else PostgreSQL LISTEN/NOTIFY on
# PostgreSQL, else polling), or redis, postgres, poll.
AGENT_DOORBELL = env.str("AGENT_DOORBELL", default="auto")
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
if AGENT_OTEL_TRACES:  # first: a request's span covers every other middleware
    MIDDLEWARE.insert(0, "reactsite.observability.tracing.TracingMiddleware")
# Live runs: models stream their replies and the text as it is written, and tool calls as they start and end, go to
# the run's event streams (over the doorbell's channel; on the embedded default, Unix sockets in AGENT_LIVE_DIR, by
# default a directory of the temporary directory named after the database). Off: plain model calls, steps only.
AGENT_LIVE = env.bool("AGENT_LIVE", default=True)
AGENT_LIVE_DIR = env.str("AGENT_LIVE_DIR", default="")
# The offline demo model writes a streamed reply word by word with this pause between words (0: all at once).
AGENT_DEMO_WORD_PAUSE_S = env.float("AGENT_DEMO_WORD_PAUSE_S", default=0.03)
AGENT_DEFAULT_MAX_TURNS = 8
# Approvals: how long a paused call waits for a human before the system denies it (reason "expired").
AGENT_APPROVAL_TTL_S = env.int("AGENT_APPROVAL_TTL_S", default=86400)
# Quotas: tokens per user per UTC day (0: none); a user's own override is set in the admin (TokenQuota).
AGENT_DAILY_TOKEN_QUOTA = env.int("AGENT_DAILY_TOKEN_QUOTA", default=0)
# The output a model call without max_output_tokens is reserved for under a quota (the Anthropic provider's own cap).
AGENT_QUOTA_OUTPUT_ESTIMATE = env.int("AGENT_QUOTA_OUTPUT_ESTIMATE", default=2048)
# Safety and cost (docs/limits.md, docs/guardrails.md, docs/fallback-models.md, docs/cost.md). Per-run limits: a
# default for runs that give none (0: none) and a ceiling no agent or run may exceed (0: none; with a ceiling and no
# default, the ceiling is the default). Per-tool limits by tool name as JSON, e.g. {"search": 5}.
AGENT_DEFAULT_MAX_TOTAL_TOKENS = env.int("AGENT_DEFAULT_MAX_TOTAL_TOKENS", default=0)
AGENT_MAX_TOTAL_TOKENS_CEILING = env.int("AGENT_MAX_TOTAL_TOKENS_CEILING", default=0)
AGENT_DEFAULT_MAX_TOOL_CALLS = env.int("AGENT_DEFAULT_MAX_TOOL_CALLS", default=0)
AGENT_MAX_TOOL_CALLS_CEILING = env.int("AGENT_MAX_TOOL_CALLS_CEILING", default=0)
AGENT_DEFAULT_TOOL_LIMITS = env.json("AGENT_DEFAULT_TOOL_LIMITS", default={})
# Guardrails: a team's own checks, by the name an agent's guardrail {"type": "hook", "name": ...} gives, as dotted
# paths, e.g. {"no_competitors": "myteam.checks.no_competitors"}; the moderation endpoint's model (OpenAI's).
AGENT_GUARDRAIL_HOOKS = env.json("AGENT_GUARDRAIL_HOOKS", default={})
AGENT_MODERATION_MODEL = env.str("AGENT_MODERATION_MODEL", default="omni-moderation-latest")
# Spend: the currency costs are shown in; prices per million tokens over the repository's table (agents/limits/
# prices.json, in USD: used only when the currency is USD), as JSON, e.g.
# {"openai/gpt-4o-mini": {"input": "0.15", "output": "0.60", "cached_input": "0.075"}}; staff add more in the admin.
AGENT_CURRENCY = env.str("AGENT_CURRENCY", default="USD")
AGENT_PRICES = env.json("AGENT_PRICES", default={})
# A daily spend quota per user in AGENT_CURRENCY (a decimal, 0: none); a user's own override in the admin.
AGENT_DAILY_COST_QUOTA = env.str("AGENT_DAILY_COST_QUOTA", default="0")
# Retention: finished runs older than this many days are pruned hourly by the worker (0: keep forever).
AGENT_RETENTION_DAYS = env.int("AGENT_RETENTION_DAYS", default=0)
# Threads: how much of a conversation's past a new run's model sees (the oldest runs are left out first).
AGENT_THREAD_HISTORY_RUNS = env.int("AGENT_THREAD_HISTORY_RUNS", default=20)
AGENT_THREAD_HISTORY_CHARS = env.int("AGENT_THREAD_HISTORY_CHARS", default=24000)
AGENT_DEFAULT_TIMEOUT_S = 60.0
# Sub-agents (an agent's `agents`): how deep a tree of child runs may go (a run a client starts is depth 0).
AGENT_MAX_DEPTH = env.int("AGENT_MAX_DEPTH", default=3)
# Model allowlists per provider (empty: any model). E.g. AGENT_MODELS_OPENAI=gpt-4.1-mini,gpt-4.1
AGENT_MODELS = {
    name: env.list(f"AGENT_MODELS_{name.upper()}", default=[])
    for name in ("demo", "openai", "anthropic", "xai", "huggingface", "openrouter")
}
# Images in a run's input (docs/api.md, "Images on a run"): at most this many per input (0: `input` is a string
# only), each at most this many bytes decoded. The request body's own bound (DATA_UPLOAD_MAX_MEMORY_SIZE) comes first.
AGENT_MAX_IMAGES = env.int("AGENT_MAX_IMAGES", default=8)
AGENT_MAX_IMAGE_BYTES = env.int("AGENT_MAX_IMAGE_BYTES", default=5 * 1024 * 1024)
# The models of a provider that take images (empty: the provider's own rule; see docs/configuration.md).
# E.g. AGENT_VISION_MODELS_HUGGINGFACE=Qwen/Qwen2.5-VL-7B-Instruct
AGENT_VISION_MODELS = {
    name: env.list(f"AGENT_VISION_MODELS_{name.upper()}", default=[])
    for name in ("demo", "openai", "anthropic", "xai", "huggingface", "openrouter")
}
# Provider credentials and endpoints (never logged).
OPENAI_API_KEY = env("OPENAI_API_KEY", default="")
OPENAI_BASE_URL = env("OPENAI_BASE_URL", default="")
ANTHROPIC_API_KEY = env("ANTHROPIC_API_KEY", default="")
ANTHROPIC_BASE_URL = env("ANTHROPIC_BASE_URL", default="")
XAI_API_KEY = env("XAI_API_KEY", default="")
XAI_BASE_URL = env("XAI_BASE_URL", default="https://api.x.ai/v1")
HF_TOKEN = env("HF_TOKEN", default="")
HF_BASE_URL = env("HF_BASE_URL", default="https://router.huggingface.co/v1")
OPENROUTER_API_KEY = env("OPENROUTER_API_KEY", default="")
OPENROUTER_BASE_URL = env("OPENROUTER_BASE_URL", default="https://openrouter.ai/api/v1")
TAVILY_API_KEY = env("TAVILY_API_KEY", default="")
TAVILY_URL = env("TAVILY_URL", default="https://api.tavily.com/search")
DUCKDUCKGO_URL = env("DUCKDUCKGO_URL", default="https://api.duckduckgo.com/")
SEARCH_TIMEOUT_S = env.float("SEARCH_TIMEOUT_S", default=10.0)

# Notifications (docs/api.md, "Webhooks"). Webhook targets must resolve to public addresses unless
# AGENT_WEBHOOK_ALLOW_PRIVATE=1 (a receiver on this machine or a private network); cloud metadata addresses never.
AGENT_WEBHOOK_ALLOW_PRIVATE = env.bool("AGENT_WEBHOOK_ALLOW_PRIVATE", default=False)
AGENT_WEBHOOK_TIMEOUT_S = env.float("AGENT_WEBHOOK_TIMEOUT_S", default=5.0)
# A failed attempt is retried after base * 2**(n-1) seconds: 7 attempts over ~63 minutes by default.
AGENT_WEBHOOK_MAX_ATTEMPTS = env.int("AGENT_WEBHOOK_MAX_ATTEMPTS", default=7)
AGENT_WEBHOOK_RETRY_BASE_S = env.float("AGENT_WEBHOOK_RETRY_BASE_S", default=60.0)
# Where this site is reached from outside: links in e-mails (a run's admin page) are built on it. By default where
# `make run` serves: its PORT.
AGENT_PUBLIC_URL = env.str("AGENT_PUBLIC_URL", default=f"http://127.0.0.1:{env.str('PORT', default='') or 8000}")
# E-mail (Django 6.1's MAILERS): printed to the console (with DEBUG on) unless EMAIL_URL names an SMTP server
# (smtp://user:password@host:25, smtp+tls://…:587, smtps://…:465), or the variables named like Django's classic
# settings are set: EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, EMAIL_USE_SSL.
# EMAIL_BACKEND picks any other backend (with no options); EMAIL_TIMEOUT bounds an SMTP conversation.
_SMTP = "django.core.mail.backends.smtp.EmailBackend"
if env.str("EMAIL_URL", default=""):
    _email = env.email_url("EMAIL_URL")
    _email_backend = _email["EMAIL_BACKEND"]
    _smtp_options = {
        "host": _email["EMAIL_HOST"] or "localhost",
        "port": _email["EMAIL_PORT"] or 25,
        "username": _email["EMAIL_HOST_USER"] or "",
        "password": _email["EMAIL_HOST_PASSWORD"] or "",
        "use_tls": bool(_email.get("EMAIL_USE_TLS")),
        "use_ssl": bool(_email.get("EMAIL_USE_SSL")),
    }
else:
    # Nothing configured: the console in development; with DEBUG off, SMTP on localhost:25 (Django's own default,
    # and what `check --deploy` asks for) — a machine's local MTA, or a logged delivery failure.
    _console = DEBUG and not env.str("EMAIL_HOST", default="")
    _email_backend = env.str(
        "EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend" if _console else _SMTP
    )
    _smtp_options = {
        "host": env.str("EMAIL_HOST", default="localhost"),
        "port": env.int("EMAIL_PORT", default=25),
        "username": env.str("EMAIL_HOST_USER", default=""),
        "password": env.str("EMAIL_HOST_PASSWORD", default=""),
        "use_tls": env.bool("EMAIL_USE_TLS", default=False),
        "use_ssl": env.bool("EMAIL_USE_SSL", default=False),
    }
_smtp_options["timeout"] = env.float("EMAIL_TIMEOUT", default=10.0)
MAILERS = {"default": {"BACKEND": _email_backend, **({"OPTIONS": _smtp_options} if _email_backend == _SMTP else {})}}
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="reactsite@localhost")

# MCP servers lending their tools (docs/configuration.md, "MCP servers"): a JSON list of {"name", "command", "args",
# "env"} (stdio) or {"name", "url", "headers"} (streamable HTTP), each with "sensitive" (default true). Text that is
# not JSON is kept as it is, so the system check (reactsite.E002) reports it instead of the settings failing to load.


def _json_or_text(text: str):
    import json

    try:
        return json.loads(text) if text.strip() else []
    except ValueError:
        return text


AGENT_MCP_SERVERS = _json_or_text(env.str("AGENT_MCP_SERVERS", default=""))
AGENT_MCP_TIMEOUT_S = env.float("AGENT_MCP_TIMEOUT_S", default=30.0)  # one call of an MCP tool
AGENT_MCP_CONNECT_TIMEOUT_S = env.float("AGENT_MCP_CONNECT_TIMEOUT_S", default=10.0)  # a connection and its listing
AGENT_MCP_REFRESH_S = env.float("AGENT_MCP_REFRESH_S", default=300.0)  # between two listings of a server's tools

# Memory recall by meaning (memory/embeddings.py, memory/vectors.py, docs/memory.md). MEMORY_VECTORS off: facts get
# no vectors and recall is full-text only. MEMORY_MIN_SIMILARITY: semantic and hybrid recall leave out facts whose
# cosine similarity to the query is below it. MEMORY_TEXT_WEIGHT: the full-text ranking's weight in hybrid recall's
# reciprocal rank fusion (the vector ranking's is 1).
MEMORY_VECTORS = env.bool("MEMORY_VECTORS", default=True)
MEMORY_MIN_SIMILARITY = env.float("MEMORY_MIN_SIMILARITY", default=0.05)
MEMORY_TEXT_WEIGHT = env.float("MEMORY_TEXT_WEIGHT", default=0.1)
