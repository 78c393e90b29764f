"""Every 404 of the API is `{"detail": "Not found."}` in JSON (issue 34; docs/api.md, "Not found"): an address no route
matches under /api/ or /v1/ (with DEBUG on too, as `make run` serves), and every object that is not there or is
another user's, whatever its kind."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agents.models import Run
from memory.models import Fact
from tests.api.conftest import RUNS, create_run, run_url

pytestmark = pytest.mark.django_db

NOT_FOUND = {"detail": "Not found."}
UNKNOWN_ADDRESSES = [
    "/api/v1/nope",
    "/api/v1/runs/x/y/z",
    "/api/v1/memory/nothing",
    "/api/v2/runs",
    "/api/nope",
    "/api/",
    "/v1/nope",
    "/v1/agent/elsewhere",
]


def assert_json_404(response) -> None:
    assert response.status_code == 404, response.content[:300]
    assert response["Content-Type"] == "application/json", response.content[:300]
    assert response.json() == NOT_FOUND


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "no-debug"])
@pytest.mark.parametrize("method", ["get", "post", "delete"])
@pytest.mark.parametrize("path", UNKNOWN_ADDRESSES)
def test_an_unknown_api_address_is_a_json_404(api, settings, debug, method, path):
    settings.DEBUG = debug  # `make run` serves with DEBUG=1 (.env), where Django would answer its HTML page

    assert_json_404(getattr(api, method)(path, format="json"))
    assert_json_404(getattr(APIClient(), method)(path, format="json"))  # without credentials too


def test_a_post_to_an_unknown_address_from_a_session_is_a_404_not_the_csrf_page(alice, settings):
    settings.DEBUG = True
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)

    assert_json_404(browser.post("/api/v1/nope", {"x": 1}, content_type="application/json"))


def test_pages_keep_djangos_html_404_with_debug_on(client, settings):
    settings.DEBUG = True
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def missing_objects(fact_id: int, others_run: str) -> list[tuple[str, str, dict | None]]:
    gone = uuid.uuid4()
    return [
        ("get", run_url(gone), None),
        ("delete", run_url(gone), None),
        ("post", run_url(gone, "advance"), {}),
        ("post", run_url(gone, "cancel"), None),
        ("get", run_url(gone, "events"), None),
        ("get", run_url(others_run), None),
        ("post", run_url(others_run, "advance"), {}),
        ("get", f"/api/v1/threads/{gone}", None),
        ("delete", f"/api/v1/threads/{gone}", None),
        ("get", "/api/v1/agents/nobody", None),
        ("delete", f"/api/v1/memory/facts/{fact_id}", None),
        ("delete", f"/api/v1/webhooks/{gone}", None),
        ("post", "/api/v1/tools/teleport/invoke", {"arguments": {}}),
    ]


def test_every_missing_or_foreign_object_says_the_same(api, bob_api):
    others_run = create_run(bob_api, mode="step").json()["id"]
    fact = Fact.objects.create(owner=Run.objects.get().owner, text="bob's")  # bob's fact: alice cannot delete it

    answers = {}
    for method, path, body in missing_objects(fact.pk, others_run):
        response = getattr(api, method)(path, body, format="json")
        answers[f"{method.upper()} {path}"] = (response.status_code, response["Content-Type"], response.json())

    wrong = {route: answer for route, answer in answers.items() if answer != (404, "application/json", NOT_FOUND)}
    assert not wrong, wrong
    assert Fact.objects.filter(pk=fact.pk).exists() and Run.objects.filter(pk=others_run).exists()


def test_a_missing_eval_run_says_the_same(reviewer_api):
    assert_json_404(reviewer_api.get("/api/v1/evals/runs/999999"))


def test_a_missing_runs_event_stream_says_the_same_to_a_stream_client(api):
    assert_json_404(api.get(run_url(uuid.uuid4(), "events"), HTTP_ACCEPT="text/event-stream"))


def test_the_run_list_is_still_found(api):
    assert api.get(RUNS).status_code == 200  # the catch-all under /api/ comes after every real route
