"""Approvals v1.1: every waiting call of a reply at once (`pending_actions`), batch `decisions` (all or nothing), and
expiry through the worker's sweep (API.md v1.1, "Approvals: several calls, expiry")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Run, RunMode, Step
from agents.runs import drive, review
from tests.api.conftest import DDG_ANSWER, create_run, run_url
from tests.conftest import client_for
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

pytestmark = pytest.mark.django_db

THREE_CALLS = llm.openai_tool_calls(
    [
        ("c1", "search", {"query": "django"}),
        ("c2", "calculator", {"expression": "2+2"}),
        ("c3", "search", {"query": "flask"}),
    ]
)


@pytest.fixture
def model(settings, stub):
    """The openai provider and DuckDuckGo both answered by the local stub; rate limits out of the way."""
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    settings.AGENT_RATE_LIMIT = "100000/m"
    stub.add("GET", "/", json=DDG_ANSWER, repeat=True)
    return stub


def paused_three(api, model, **fields) -> dict:
    """A run whose first reply asks for three sensitive calls (calculator made sensitive for this run)."""
    model.add("POST", OPENAI_PATH, json=THREE_CALLS)
    model.add("POST", OPENAI_PATH, json=llm.openai_text("done"))
    body = create_run(api, provider="openai", input="look both up", sensitive_tools=["calculator"], **fields).json()
    assert body["status"] == "awaiting_approval", body
    return body


def advance(client, run_id, body):
    return client.post(run_url(run_id, "advance"), body, format="json")


def steps(run_id) -> list[dict]:
    return [s.as_event() for s in Step.objects.filter(run_id=run_id).order_by("index")]


def test_pending_actions_lists_every_waiting_call_in_order(api, model):
    body = paused_three(api, model)
    actions = body["pending_actions"]
    assert [(a["call_id"], a["tool"]) for a in actions] == [("c1", "search"), ("c2", "calculator"), ("c3", "search")]
    assert body["pending_action"] == actions[0]
    run = Run.objects.get(pk=body["id"])
    assert run.approval_expires_at is not None
    expected = run.updated_at + timedelta(seconds=86400)
    assert abs((run.approval_expires_at - expected).total_seconds()) < 1
    assert all(a["expires_at"] == actions[0]["expires_at"] is not None for a in actions)
    assert api.get(run_url(body["id"])).json()["pending_actions"] == actions
    assert api.get("/api/v1/runs").json()["results"][0]["pending_actions"] == actions


def test_a_three_call_reply_decided_in_one_batch(api, model, reviewer):
    body = paused_three(api, model)
    decisions = [
        {"call_id": "c1", "approval": True, "arguments": {"query": "django tasks"}},
        {"call_id": "c2", "approval": True},
        {"call_id": "c3", "approval": False, "reason": "not needed"},
    ]
    response = advance(client_for(reviewer), body["id"], {"decisions": decisions})
    assert response.status_code == 200, response.content
    run = response.json()
    assert (run["status"], run["output"], run["pending_actions"]) == ("done", "done", [])

    trace = steps(body["id"])
    approvals = [s for s in trace if s["kind"] == "approval"]
    assert [(a["call_id"], a["approved"], a["reviewer"], a["reason"]) for a in approvals] == [
        ("c1", True, "rita", None),
        ("c2", True, "rita", None),
        ("c3", False, "rita", "not needed"),
    ]
    assert approvals[0]["original_arguments"] == {"query": "django"}
    assert approvals[0]["arguments"] == {"query": "django tasks"}
    tools = [s for s in trace if s["kind"] == "tool"]
    assert [(t["call_id"], t["arguments"]) for t in tools] == [
        ("c1", {"query": "django tasks"}),
        ("c2", {"expression": "2+2"}),
    ]
    assert tools[1]["output"] == "4"
    searched = [r.path for r in model.requests if r.method == "GET"]
    assert len(searched) == 1 and "tasks" in searched[0] and "flask" not in searched[0]  # c3 never ran
    # The model saw both results and the denial, in call order.
    sent = [r.json() for r in model.requests if r.path == OPENAI_PATH][1]["messages"]
    results = [m for m in sent if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["c1", "c2", "c3"]
    assert "denied" in results[2]["content"]


def test_part_of_a_batch_leaves_the_rest_waiting(api, model, reviewer):
    body = paused_three(api, model, mode="step")
    response = advance(client_for(reviewer), body["id"], {"decisions": [{"call_id": "c3", "approval": False}]})
    run = response.json()
    assert run["status"] == "awaiting_approval"
    assert [a["call_id"] for a in run["pending_actions"]] == ["c1", "c2"]
    # The single-decision body decides the first waiting call.
    run = advance(client_for(reviewer), body["id"], {"approval": True}).json()
    assert [a["call_id"] for a in run["pending_actions"]] == ["c2"]


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        ([{"call_id": "c9", "approval": True}], "not waiting"),
        ([{"call_id": "c1", "approval": True}, {"call_id": "c1", "approval": False}], "twice"),
        (
            [{"call_id": "c1", "approval": True}, {"call_id": "c2", "approval": True, "arguments": {"expression": 5}}],
            "schema",
        ),
        ([{"call_id": "c1", "approval": True, "arguments": {"nope": 1}}], "schema"),
    ],
    ids=["unknown", "repeated", "second-breaks-schema", "extra-property"],
)
def test_a_bad_batch_is_400_and_records_nothing(api, model, reviewer, decisions, message):
    body = paused_three(api, model)
    before = steps(body["id"])
    response = advance(client_for(reviewer), body["id"], {"decisions": decisions})
    assert response.status_code == 400, response.content
    assert message in " ".join(response.json()["decisions"])
    assert steps(body["id"]) == before
    run = Run.objects.get(pk=body["id"])
    assert (run.status, run.lease_owner) == ("awaiting_approval", "")


@pytest.mark.parametrize(
    "body",
    [
        {"decisions": []},
        {"decisions": [{"call_id": "c1", "approval": True}], "approval": True},
        {"decisions": [{"call_id": "c1", "approval": True}], "reason": None},  # named at all, as the schema says
        {"decisions": [{"call_id": "c1"}]},
        {"decisions": [{"call_id": 1, "approval": True}]},
        {"decisions": {"c1": True}},
    ],
    ids=["empty", "mixed", "mixed-null", "no-approval", "numeric-id", "not-a-list"],
)
def test_a_malformed_decisions_body_is_400(api, model, reviewer, body):
    run = paused_three(api, model)
    response = advance(client_for(reviewer), run["id"], body)
    assert response.status_code == 400
    assert "decisions" in response.json()
    assert Run.objects.get(pk=run["id"]).status == "awaiting_approval"


def test_the_owner_without_the_right_gets_403_for_a_batch(api, model):
    body = paused_three(api, model)
    response = advance(api, body["id"], {"decisions": [{"call_id": "c1", "approval": True}]})
    assert response.status_code == 403


# --- expiry -----------------------------------------------------------------------------------------------------


def expire_now(run_id) -> None:
    Run.objects.filter(pk=run_id).update(approval_expires_at=timezone.now() - timedelta(seconds=1))


def test_the_sweep_denies_expired_calls_and_the_run_goes_on(api, model, django_capture_on_commit_callbacks):
    body = paused_three(api, model, approval_ttl_s=60)
    run = Run.objects.get(pk=body["id"])
    assert abs((run.approval_expires_at - run.updated_at).total_seconds() - 60) < 1
    assert review.sweep_expired_approvals() == 0  # not due yet
    expire_now(body["id"])

    assert review.sweep_expired_approvals() == 1

    approvals = [s for s in steps(body["id"]) if s["kind"] == "approval"]
    assert [(a["call_id"], a["approved"], a["reviewer"], a["reason"]) for a in approvals] == [
        ("c1", False, None, "expired"),
        ("c2", False, None, "expired"),
        ("c3", False, None, "expired"),
    ]
    run.refresh_from_db()
    # The caller of this sync run is long gone: it carries on as a background run, on the queue.
    assert (run.status, run.mode, run.lease_owner, run.approval_expires_at) == ("running", RunMode.BACKGROUND, "", None)
    assert review.sweep_expired_approvals() == 0  # nothing twice
    drive.run_background(run_id=body["id"])
    run.refresh_from_db()
    assert (run.status, run.output) == ("done", "done")
    assert model.count("GET", "/") == 0  # no search ran


def test_a_step_run_expires_and_waits_for_its_client(api, model):
    body = paused_three(api, model, mode="step")
    expire_now(body["id"])
    assert review.sweep_expired_approvals() == 1
    run = Run.objects.get(pk=body["id"])
    assert (run.status, run.mode) == ("running", RunMode.STEP)
    assert advance(api, body["id"], {}).json()["status"] == "done"


def test_a_decision_after_the_expiry_time_is_409_and_the_sweep_records_the_expiry(api, model, reviewer):
    body = paused_three(api, model)
    expire_now(body["id"])
    response = advance(client_for(reviewer), body["id"], {"approval": True})
    assert response.status_code == 409
    assert "expired" in response.json()["detail"]
    assert [s for s in steps(body["id"]) if s["kind"] == "approval"] == []
    assert Run.objects.get(pk=body["id"]).lease_owner == ""
    assert review.sweep_expired_approvals() == 1
    assert {s["reason"] for s in steps(body["id"]) if s["kind"] == "approval"} == {"expired"}


def test_a_decision_first_leaves_nothing_to_expire(api, model, reviewer):
    body = paused_three(api, model, mode="step")
    advance(
        client_for(reviewer), body["id"], {"decisions": [{"call_id": c, "approval": False} for c in ("c1", "c2", "c3")]}
    )
    expire_now(body["id"])  # a stale expiry on a run no longer waiting is ignored
    assert review.sweep_expired_approvals() == 0
    assert all(s["reviewer"] == "rita" for s in steps(body["id"]) if s["kind"] == "approval")


@pytest.mark.parametrize("ttl", [59, 604801, "60", 60.5])
def test_approval_ttl_bounds(api, ttl):
    response = create_run(api, approval_ttl_s=ttl)
    assert response.status_code == 400
    assert "approval_ttl_s" in response.json()


def test_the_default_ttl_is_a_setting(api, model, settings):
    settings.AGENT_APPROVAL_TTL_S = 120
    body = paused_three(api, model)
    run = Run.objects.get(pk=body["id"])
    assert run.approval_ttl_s == 120
    assert abs((run.approval_expires_at - run.updated_at).total_seconds() - 120) < 1
