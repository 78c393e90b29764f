"""The HTTP API: Django REST framework, API keys, and the OpenAPI document drf-spectacular serves (docs/api.md)."""

from reactsite.settings.base import VERSION, env

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
        "InputFilePartTypeEnum": ["file"],  # documents (agents/api/inputs.py DOCUMENT_TYPES)
        "DocumentMediaTypeEnum": ["application/pdf", "text/plain", "text/markdown", "text/csv"],
    },
}
