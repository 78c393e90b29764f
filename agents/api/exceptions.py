"""Service errors to HTTP: DRF shapes ({"detail": …} or field errors), never a stack trace.

Every 404 says the same, NOT_FOUND, whatever was not there: an address, a run, a thread, an agent, a tool (so a
client reads the status, and another user's object reads exactly like a missing one).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.db.utils import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from agents import errors
from agents.usage import quotas
from reactsite.serving import cache

_STATUS = {
    errors.InvalidRequest: status.HTTP_400_BAD_REQUEST,
    errors.NotAllowed: status.HTTP_403_FORBIDDEN,
    errors.RunBusy: status.HTTP_409_CONFLICT,
    errors.RunFinished: status.HTTP_409_CONFLICT,
    errors.ThreadBusy: status.HTTP_409_CONFLICT,
}
# The database lost, refusing, or out of pooled connections (psycopg_pool's PoolTimeout reaches us as Django's
# OperationalError): a 503 the client may retry, in JSON, where Django would answer its HTML 500 page.
DATABASE_UNAVAILABLE = "The database is unavailable; try again shortly."
DATABASE_RETRY_AFTER_S = 2
NOT_FOUND = "Not found."  # DRF's own text; also the answer of an address no route matches (reactsite/urls.py)

log = logging.getLogger(__name__)


def exception_handler(exc, context):
    if isinstance(exc, Http404 | ObjectDoesNotExist | errors.UnknownTool | NotFound):
        # Not DRF's "No Run matches the given query." nor a view's own text: one answer for every 404.
        return Response({"detail": NOT_FOUND}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, RequestDataTooBig):  # else Django's HTML 400 page, with no message
        limit = getattr(exc, "limit", settings.DATA_UPLOAD_MAX_MEMORY_SIZE)  # its route's (agents/api/parsers.py)
        return Response({"detail": f"The request body is larger than {limit} bytes."}, status=413)
    if isinstance(exc, RecursionError):  # JSON nested too deeply for the parser: bad input, not a 500
        exc = ParseError("JSON parse error - the body is nested too deeply.")
    if isinstance(exc, DatabaseError) and (response := cache_table_missing(exc)) is not None:
        return response
    if isinstance(exc, OperationalError | InterfaceError):
        set_rollback()
        log.warning("database unavailable: %s: %s", type(exc).__name__, str(exc).strip().split("\n")[0])
        headers = {"Retry-After": str(DATABASE_RETRY_AFTER_S)}
        return Response({"detail": DATABASE_UNAVAILABLE}, status=503, headers=headers)
    if isinstance(exc, quotas.QuotaExceeded):
        return Response({"detail": str(exc)}, status=429, headers={"Retry-After": str(exc.retry_after)})
    for cls, code in _STATUS.items():
        if isinstance(exc, cls):
            detail = exc.detail if isinstance(exc.detail, dict) else {"detail": str(exc.detail)}
            return Response(detail, status=code)
    return drf_exception_handler(exc, context)


def cache_table_missing(exc: BaseException) -> Response | None:
    """A 503 naming the forgotten set-up step when the database cache's table is missing (PostgreSQL reports it as a
    ProgrammingError, SQLite as an OperationalError); None for any other error."""
    table = cache.missing_table(exc)
    if table is None:
        return None
    set_rollback()
    log.error("cache table %r missing: %s", table, cache.CREATE_HINT)
    return Response({"detail": cache.missing_table_detail(table)}, status=503)
