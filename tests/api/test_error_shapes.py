"""Errors under the API's addresses are JSON whatever raised them (issue 47): a Host header ALLOWED_HOSTS refuses,
an uncaught exception, with DEBUG off and on. Pages outside the API keep Django's HTML."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import path

from reactsite import urls as root_urls
from reactsite.serving.errors import DISALLOWED_HOST

pytestmark = pytest.mark.django_db


def boom(request):
    raise RuntimeError("a fault no handler catches")


urlpatterns = [path("api/v1/boom", boom), path("page/boom", boom), *root_urls.urlpatterns]


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("route", ["/api/v1/health", "/api/v1/runs", "/v1/agent/runs", "/mcp"])
def test_a_refused_host_header_is_a_json_400(settings, debug, route):
    settings.DEBUG = debug
    response = Client(HTTP_HOST="evil.example").get(route)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": DISALLOWED_HOST}


def test_a_refused_host_header_on_a_page_stays_html(settings):
    response = Client(HTTP_HOST="evil.example").get("/admin/login/")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("debug", [False, True])
def test_an_uncaught_exception_under_the_api_is_a_json_500(settings, debug):
    settings.DEBUG = debug
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)
    response = client.get("/api/v1/boom", HTTP_ACCEPT="text/html,*/*")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Server error."}
    assert "a fault no handler catches" not in response.content.decode()


def test_an_uncaught_exception_on_a_page_stays_djangos(settings):
    settings.ROOT_URLCONF = __name__
    response = Client(raise_request_exception=False).get("/page/boom")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
