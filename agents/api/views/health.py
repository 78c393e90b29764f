"""Liveness and readiness: the database and the shared cache answer."""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from reactsite.serving import cache as cache_backends


class HealthView(APIView):
    """Liveness and readiness: the database and the shared cache answer."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict, 503: dict})
    def get(self, request):
        parts = {"database": _check_database(), "cache": _check_cache()}
        healthy = all(v == "ok" for v in parts.values())
        body = {"status": "ok" if healthy else "error", **parts}
        body |= {"default_provider": settings.AGENT_DEFAULT_PROVIDER}
        body |= {"version": settings.VERSION, "api_version": settings.API_VERSION}  # the package's, the contract's
        return Response(body, status=200 if healthy else 503)


HEALTH_DB_TIMEOUT_S = 3.0  # the pool's own wait (DB_POOL_TIMEOUT_S, 10 s) would keep a probe hanging


def _check_database() -> str:
    """Whether the database answers now. With the psycopg pool: a checked connection from the pool within
    HEALTH_DB_TIMEOUT_S (the database unreachable, or every connection busy, is an error, not a hang). Without it:
    Django's connection, checked before use and reopened if its session is gone (connect_timeout bounds a connect)."""
    try:
        pool = getattr(connection, "pool", None)
        if pool is not None and connection.connection is None:
            pool.open()  # as Django does before its first getconn
            conn = pool.getconn(timeout=HEALTH_DB_TIMEOUT_S)
            try:
                conn.execute("SELECT 1")
            finally:
                pool.putconn(conn)  # a broken one is dropped by the pool, not kept
        else:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"error: {type(exc).__name__}"


def _check_cache() -> str:
    """Whether the shared cache stores and reads back; a missing cache table is named, with the step that makes it."""
    try:
        cache.set("health:ping", "pong", 10)
        return "ok" if cache.get("health:ping") == "pong" else "error: read back failed"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        table = cache_backends.missing_table(exc)
        return f"error: {cache_backends.missing_table_detail(table)}" if table else f"error: {type(exc).__name__}"
