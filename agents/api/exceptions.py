"""Service errors to HTTP: DRF shapes ({"detail": …} or field errors), never a stack trace."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from agents import quotas, services

_STATUS = {
    services.InvalidRequest: status.HTTP_400_BAD_REQUEST,
    services.NotAllowed: status.HTTP_403_FORBIDDEN,
    services.RunBusy: status.HTTP_409_CONFLICT,
    services.RunFinished: status.HTTP_409_CONFLICT,
    services.UnknownTool: status.HTTP_404_NOT_FOUND,
    services.ThreadBusy: status.HTTP_409_CONFLICT,
}


def exception_handler(exc, context):
    if isinstance(exc, ObjectDoesNotExist):
        exc = NotFound()
    if isinstance(exc, RequestDataTooBig):  # else Django's HTML 400 page, with no message
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response({"detail": f"The request body is larger than {limit} bytes."}, status=413)
    if isinstance(exc, RecursionError):  # JSON nested too deeply for the parser: bad input, not a 500
        exc = ParseError("JSON parse error - the body is nested too deeply.")
    if isinstance(exc, quotas.QuotaExceeded):
        return Response({"detail": str(exc)}, status=429, headers={"Retry-After": str(exc.retry_after)})
    for cls, code in _STATUS.items():
        if isinstance(exc, cls):
            detail = exc.detail if isinstance(exc.detail, dict) else {"detail": str(exc.detail)}
            return Response(detail, status=code)
    return drf_exception_handler(exc, context)
