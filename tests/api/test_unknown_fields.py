"""An unknown field on any create or update body is a 400 naming it, and nothing is stored (issue 47); the schema
says `additionalProperties: false` for those bodies, and free-form objects keep taking any key."""

from __future__ import annotations

import pytest

from agents.models import ApiKey, Run, Schedule, Thread, Webhook
from memory.models import Fact
from tests.api.conftest import ARITHMETIC, RUNS, SCHEMA, create_run, run_url
from tests.conftest import client_for, make_user

pytestmark = pytest.mark.django_db

BOGUS = {"bogus_field": 1}


@pytest.fixture
def staff(db):
    return client_for(make_user("stella", staff=True, reviewer=True, superuser=True))


def _counts() -> tuple:
    return tuple(m.objects.count() for m in (Run, Thread, Schedule, Webhook, ApiKey, Fact))


def _routes(api) -> list[tuple[str, str, dict]]:
    paused = create_run(api, input="search python").json()["id"]
    done = create_run(api).json()["id"]
    schedule = api.post("/api/v1/schedules", {"cron": "0 * * * *", "input": "hi"}, format="json").json()["id"]
    fact = api.post("/api/v1/memory/facts", {"text": "a fact"}, format="json").json()["id"]
    return [
        ("post", RUNS, {"input": ARITHMETIC}),
        ("post", "/v1/agent/runs", {"input": ARITHMETIC}),
        ("post", "/api/v1/threads", {"title": "t"}),
        ("post", run_url(paused, "advance"), {"approval": True}),
        ("post", run_url(done, "fork"), {"from_step": 0}),
        ("post", "/api/v1/tools/calculator/invoke", {"arguments": {"expression": "1+1"}}),
        ("post", "/api/v1/schedules", {"cron": "0 * * * *", "input": "hi"}),
        ("patch", f"/api/v1/schedules/{schedule}", {"name": "n"}),
        ("post", "/api/v1/webhooks", {"url": "https://example.com/hook", "events": ["run.done"]}),
        ("post", "/api/v1/keys", {"name": "k", "scopes": ["runs:read"]}),
        ("post", "/api/v1/memory/facts", {"text": "another"}),
        ("patch", f"/api/v1/memory/facts/{fact}", {"text": "changed"}),
    ]


def test_every_create_and_update_body_refuses_an_unknown_field(api, no_search_network):
    routes = _routes(api)
    before = _counts()
    for method, path, body in routes:
        response = getattr(api, method)(path, {**body, **BOGUS}, format="json")
        assert response.status_code == 400, (method, path, response.content[:300])
        assert list(response.json()) == ["bogus_field"], (path, response.json())
        assert response.json()["bogus_field"][0].startswith("Unknown field."), path
    assert _counts() == before
    assert Run.objects.get(pk=routes[3][1].split("/")[4]).status == "awaiting_approval"


def test_staff_bodies_refuse_an_unknown_field(staff):
    for path, body in (
        ("/api/v1/prices", {"provider": "openai", "model": "m", "input": "1", "output": "2"}),
        ("/api/v1/evals/runs", {}),
    ):
        response = staff.post(path, {**body, **BOGUS}, format="json")
        assert response.status_code == 400, (path, response.content[:300])
        assert list(response.json()) == ["bogus_field"]


def test_an_unknown_field_inside_a_described_object_is_named_too(api, no_search_network):
    paused = create_run(api, input="search python").json()
    call_id = paused["pending_action"]["call_id"]
    response = api.post(
        run_url(paused["id"], "advance"), {"decisions": [{"call_id": call_id, "aproval": True}]}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"decisions": {"0": {"aproval": ["Unknown field. Did you mean 'approval'?"]}}}
    response = api.post("/api/v1/schedules", {"cron": "0 * * * *", "input": "hi", "options": BOGUS}, format="json")
    assert response.status_code == 400 and "bogus_field" in response.json()["options"]
    assert not Schedule.objects.exists()


def test_free_form_objects_take_any_key(api):
    response = create_run(api, metadata={"anything": 1, "else": "x"})
    assert response.status_code == 201 and response.json()["metadata"] == {"anything": 1, "else": "x"}


def test_the_schema_closes_the_bodies_it_describes(api):
    schema = api.get(SCHEMA, {"format": "json"}).json()
    components = schema["components"]["schemas"]
    for name in ("RunCreateRequest", "ThreadCreateRequest", "DecisionRequest", "ScheduleCreateRequest"):
        found = next((components[n] for n in (name, name.removesuffix("Request")) if n in components), None)
        assert found is not None, (name, sorted(components))
        assert found.get("additionalProperties") is False, name
    assert components["Run"].get("additionalProperties") is not False  # answers are not closed by this
