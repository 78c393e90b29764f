"""Errors under the API's addresses are JSON, whatever raised them and with DEBUG on or off.

DRF answers its own errors in JSON, but what happens outside a DRF view is Django's to answer, in HTML: a `Host`
header that ALLOWED_HOSTS refuses (a 400 raised by the middleware, before any view), an exception no handler caught
(the "Server Error (500)" page, or the debug page with DEBUG on), a CSRF refusal. Under the API's prefixes a client
reads JSON, so this middleware, around all but the request id's, turns such an HTML answer into `{"detail": …}`
with the same status. An uncaught exception that is the database cache's missing table becomes a 503 naming the
set-up step.
"""

from __future__ import annotations

import sys

from django.core.exceptions import DisallowedHost
from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse, JsonResponse

from reactsite.serving import cache

API_PREFIXES = ("/api/", "/v1/", "/mcp")

_DETAILS = {
    400: "Bad request.",
    403: "Forbidden.",
    404: "Not found.",
    405: "Method not allowed.",
    413: "The request body is too large.",
    500: "Server error.",
}
DISALLOWED_HOST = "This server does not answer to the Host header sent (it is not in ALLOWED_HOSTS)."
_EXCEPTION = "_reactsite_uncaught"


def remember_exception(sender=None, request: HttpRequest | None = None, **kwargs) -> None:
    """got_request_exception: keep the uncaught exception on its request, for the middleware's answer."""
    if request is not None:
        setattr(request, _EXCEPTION, sys.exception())


got_request_exception.connect(remember_exception, dispatch_uid="reactsite.serving.errors")


class JsonApiErrorsMiddleware:
    """Around every middleware but the request id's: an HTML (or plain-text) error answered under the API's prefixes
    becomes a JSON one."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or not request.path.startswith(API_PREFIXES):
            return response
        kind = response.get("Content-Type", "")
        if not kind.startswith(("text/html", "text/plain")):
            return response
        return _json_error(request, response.status_code)


def _json_error(request: HttpRequest, status: int) -> JsonResponse:
    exc = getattr(request, _EXCEPTION, None)
    table = cache.missing_table(exc) if exc is not None else None
    if table is not None:
        return JsonResponse({"detail": cache.missing_table_detail(table)}, status=503)
    if status == 400 and _host_refused(request):
        return JsonResponse({"detail": DISALLOWED_HOST}, status=400)
    return JsonResponse({"detail": _DETAILS.get(status, "Request failed.")}, status=status)


def _host_refused(request: HttpRequest) -> bool:
    try:
        request.get_host()
    except DisallowedHost:
        return True
    return False
