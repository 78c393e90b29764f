"""Inputs that were answered 500 (issue 39, items 6 and 7) answer the 4xx that names the problem, on both databases,
and nothing is recorded: a null decision, a NUL in a path's lookup value, a decision for a run that is running."""

from __future__ import annotations

import pytest

from agents.models import Run, Step
from tests.api.conftest import create_run, run_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def paused(api, no_search_network):
    run = create_run(api, input="search python").json()
    assert run["status"] == "awaiting_approval"
    return run


@pytest.mark.parametrize("decisions", [[None], [None, None], [1], ["x"], [[]]])
def test_a_decision_that_is_not_an_object_is_400(api, paused, decisions):
    steps = Step.objects.count()
    response = api.post(run_url(paused["id"], "advance"), {"decisions": decisions}, format="json")
    assert response.status_code == 400, response.content
    assert "decisions" in response.json()
    assert Step.objects.count() == steps and Run.objects.get().status == "awaiting_approval"


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/agents/%00",
        "/api/v1/agents/a%00b",
        "/api/v1/runs/%00",
        "/api/v1/runs/%00/events",
        "/api/v1/threads/%00",
        "/api/v1/evals/runs/%00",
        "DELETE /api/v1/webhooks/%00",
        "DELETE /api/v1/memory/facts/%00",
        "POST /api/v1/tools/%00/invoke",
    ],
)
def test_a_nul_in_a_lookup_value_is_404_json(api, path):
    api.raise_request_exception = False
    method, _, path = path.rpartition(" ")
    response = getattr(api, (method or "GET").lower())(path, {}, format="json") if method else api.get(path)
    assert response.status_code in (403, 404), (response.status_code, response.content[:200])
    assert response["Content-Type"].startswith("application/json")


def test_a_decision_sent_to_a_running_run_is_409_and_records_nothing(api, alice, settings):
    from agents.runs import submit

    settings.AGENT_SELF_APPROVAL = True
    options = submit.RunOptions(input="What is 12*7, plus 1?", mode="step")
    run = submit.start_run(owner=alice, options=options)  # running, waiting for its client's next step
    for body in ({"approval": True}, {"approval": False}, {"decisions": [{"call_id": "x", "approval": True}]}):
        response = api.post(run_url(run.pk, "advance"), body, format="json")
        assert response.status_code == 409, (body, response.content)
        assert "not awaiting approval" in response.json()["detail"]
    assert Step.objects.filter(run_id=run.pk).count() == 0  # not advanced as a plain step
    plain = api.post(run_url(run.pk, "advance"), {}, format="json")
    assert plain.status_code == 200 and Step.objects.filter(run_id=run.pk).count() > 0
