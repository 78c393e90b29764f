"""The environment, the secret key and hosts, and Django's own wiring: apps, middleware, templates, static files."""

import os
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent

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

# With traces on, observability.py puts its tracing middleware before all of these.
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

# gunicorn's workers collect once and freeze what survives after their first requests, so a full garbage collection
# no longer scans Django's and the SDKs' long-lived objects (reactsite/serving/heap.py; docs/performance.md, "Why the
# defaults are what they are"). GC_TUNING=0 leaves Python's defaults.
GC_TUNING = env.bool("GC_TUNING", default=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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
