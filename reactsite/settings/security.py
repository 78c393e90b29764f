"""HTTPS, cookies, framing, the request body's bound and CORS: strict by default when DEBUG is off."""

from reactsite.settings.base import DEBUG, env

# Each can be switched off (e.g. behind a TLS-terminating proxy).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The health probe stays on plain HTTP; with metrics on, observability.py adds /metrics.
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health/?$"]
X_FRAME_OPTIONS = "DENY"
# A request body's bound (larger: 413): DATA_UPLOAD_MAX_MEMORY_SIZE on every route but a run's creation
# (POST /api/v1/runs, POST /v1/agent/runs), whose body may carry documents and images: AGENT_MAX_RUN_BODY_BYTES.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=256 * 1024)
AGENT_MAX_RUN_BODY_BYTES = env.int("AGENT_MAX_RUN_BODY_BYTES", default=32 * 1024 * 1024)

CORS_ALLOWED_ORIGINS = env.list("CORS_ALLOWED_ORIGINS", default=[])
