"""POST /runs/{id}/advance (units and approvals) and POST /runs/{id}/cancel."""

from __future__ import annotations

import pytest

from agents.models import Run, Step
from tests.api.conftest import RUNS, create_run, run_url
from tests.conftest import client_for, make_user

pytestmark = pytest.mark.django_db


def _advance(client, run_id, **body):
    return client.post(run_url(run_id, "advance"), body, format="json")


def _steps(client, run_id) -> list[dict]:
    return client.get(run_url(run_id)).json()["steps"]


def _paused_search(api, **fields) -> dict:
    response = create_run(api, input="search python", **fields)
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "awaiting_approval"
    return body


# --- running runs ---------------------------------------------------------------------------------------------


def test_advance_a_step_run_one_unit_at_a_time(api):
    run = create_run(api, mode="step").json()
    assert (run["status"], run["turns"]) == ("running", 1)
    second = _advance(api, run["id"])
    assert second.status_code == 200
    assert set(second.json()) >= {"id", "status", "turns"}
    assert "steps" not in second.json()
    assert (second.json()["status"], second.json()["turns"]) == ("running", 2)
    third = _advance(api, run["id"]).json()
    assert (third["status"], third["stop_reason"], third["ok"], third["output"], third["turns"]) == (
        "done",
        "final_answer",
        True,
        "85",
        3,
    )
    assert [s["index"] for s in _steps(api, run["id"])] == list(range(5))


def test_advance_trailing_slash_optional(api):
    run_id = create_run(api, mode="step").json()["id"]
    response = api.post(run_url(run_id, "advance") + "/", {}, format="json")
    assert response.status_code == 200
    assert response.json()["turns"] == 2


def test_advance_with_no_body(api):
    run_id = create_run(api, mode="step").json()["id"]
    response = api.post(run_url(run_id, "advance"))
    assert response.status_code == 200
    assert response.json()["turns"] == 2


def test_advance_a_done_run_is_409(api):
    run_id = create_run(api).json()["id"]
    before = Step.objects.filter(run_id=run_id).count()
    response = _advance(api, run_id)
    assert response.status_code == 409
    assert "detail" in response.json()
    assert Step.objects.filter(run_id=run_id).count() == before


def test_advance_while_another_request_holds_the_lease_is_409(api):
    from datetime import timedelta

    from django.utils import timezone

    run_id = create_run(api, mode="step").json()["id"]
    held_until = timezone.now() + timedelta(seconds=60)
    Run.objects.filter(pk=run_id).update(lease_owner="someone-else", lease_expires=held_until)
    response = _advance(api, run_id)
    assert response.status_code == 409
    assert Run.objects.get(pk=run_id).turns == 1


def test_advance_of_another_users_run_is_404(api, bob):
    bob_run = create_run(client_for(bob), mode="step").json()["id"]
    assert _advance(api, bob_run).status_code == 404
    assert Run.objects.get(pk=bob_run).turns == 1


def test_advance_of_an_unknown_run_is_404(api):
    assert _advance(api, "00000000-0000-0000-0000-000000000000").status_code == 404
    assert _advance(api, "nope").status_code == 404


# --- approvals ------------------------------------------------------------------------------------------------


def test_paused_run_needs_an_approval_field(api, reviewer_api, no_search_network):
    run = _paused_search(api)
    response = _advance(reviewer_api, run["id"])
    assert response.status_code == 400
    assert "approval" in response.json()
    assert Run.objects.get(pk=run["id"]).status == "awaiting_approval"


def test_bad_approval_value_is_400(api, reviewer_api, no_search_network):
    run = _paused_search(api)
    response = _advance(reviewer_api, run["id"], approval="maybe")
    assert response.status_code == 400
    assert "approval" in response.json()
    response = _advance(reviewer_api, run["id"], approval=True, arguments="not an object")
    assert response.status_code == 400
    assert "arguments" in response.json()
    assert Run.objects.get(pk=run["id"]).status == "awaiting_approval"
    assert no_search_network.requests == []


def test_owner_without_permission_may_not_decide(api, no_search_network, settings):
    settings.AGENT_SELF_APPROVAL = False
    run = _paused_search(api)
    response = _advance(api, run["id"], approval=True)
    assert response.status_code == 403
    assert "detail" in response.json()
    assert Run.objects.get(pk=run["id"]).status == "awaiting_approval"
    assert not Step.objects.filter(run_id=run["id"], kind="approval").exists()
    assert no_search_network.requests == []


def test_self_approval_is_off_by_default(api, no_search_network):
    run = _paused_search(api)
    assert _advance(api, run["id"], approval=False).status_code == 403


def test_owner_with_self_approval_may_decide(api, search_stub, settings):
    settings.AGENT_SELF_APPROVAL = True
    run = _paused_search(api)
    response = _advance(api, run["id"], approval=True)
    assert response.status_code == 200
    assert response.json()["status"] == "done"
    approval = [s for s in _steps(api, run["id"]) if s["kind"] == "approval"][0]
    assert approval["reviewer"] == "alice"


def test_self_approval_does_not_extend_to_other_users(api, bob, search_stub, settings):
    settings.AGENT_SELF_APPROVAL = True
    run = _paused_search(api)
    assert _advance(client_for(bob), run["id"], approval=True).status_code == 404
    assert search_stub.requests == []


def test_stranger_gets_404_on_a_paused_run(api, bob, no_search_network):
    run = _paused_search(api)
    response = _advance(client_for(bob), run["id"], approval=True)
    assert response.status_code == 404
    assert Run.objects.get(pk=run["id"]).status == "awaiting_approval"


def test_reviewer_approves_and_the_sync_run_finishes(api, reviewer_api, search_stub):
    run = _paused_search(api)
    call_id = run["pending_action"]["call_id"]
    response = _advance(reviewer_api, run["id"], approval=True, reason="looks fine")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["stop_reason"], body["ok"]) == ("done", "final_answer", True)
    assert "Python is a programming language." in body["output"]
    assert body["pending_action"] is None
    assert body["turns"] == 2
    assert search_stub.count("GET", "/") == 1
    steps = _steps(api, run["id"])
    assert [s["kind"] for s in steps] == ["model", "approval", "tool", "model"]
    approval, tool = steps[1], steps[2]
    assert approval == {
        **{k: approval[k] for k in ("index", "kind", "created_at", "latency_ms")},
        "call_id": call_id,
        "name": "search",
        "original_arguments": {"query": "python"},
        "arguments": {"query": "python"},
        "approved": True,
        "reviewer": "rita",
        "reason": "looks fine",
    }
    assert tool["call_id"] == call_id
    assert tool["name"] == "search"
    assert tool["arguments"] == {"query": "python"}
    assert tool["is_error"] is False
    assert "Python is a programming language." in tool["output"]
    assert "<<<TOOL_OUTPUT_START>>>" not in tool["output"]


def test_reviewer_edits_the_arguments(api, reviewer_api, search_stub):
    run = _paused_search(api)
    response = _advance(reviewer_api, run["id"], approval=True, arguments={"query": "django"})
    assert response.status_code == 200
    assert response.json()["status"] == "done"
    steps = _steps(api, run["id"])
    approval = next(s for s in steps if s["kind"] == "approval")
    tool = next(s for s in steps if s["kind"] == "tool")
    assert approval["original_arguments"] == {"query": "python"}
    assert approval["arguments"] == {"query": "django"}
    assert approval["reason"] is None
    assert tool["arguments"] == {"query": "django"}
    (request,) = search_stub.requests
    assert "q=django" in request.path


def test_reviewer_denies_and_the_model_is_told(api, reviewer_api, no_search_network):
    run = _paused_search(api)
    response = _advance(reviewer_api, run["id"], approval=False, reason="not today")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["stop_reason"]) == ("done", "final_answer")
    assert "denied" in body["output"].lower()
    assert no_search_network.requests == []
    steps = _steps(api, run["id"])
    assert [s["kind"] for s in steps] == ["model", "approval", "model"]
    approval = steps[1]
    assert approval["approved"] is False
    assert approval["reviewer"] == "rita"
    assert approval["reason"] == "not today"
    assert approval["original_arguments"] == {"query": "python"}
    assert not [s for s in steps if s["kind"] == "tool"]


def test_denied_with_edited_arguments_still_never_runs(api, reviewer_api, no_search_network):
    run = _paused_search(api)
    response = _advance(reviewer_api, run["id"], approval=False, arguments={"query": "other"})
    assert response.status_code == 200
    assert no_search_network.requests == []
    assert not Step.objects.filter(run_id=run["id"], kind="tool").exists()


def test_step_run_decision_makes_no_model_call(api, reviewer_api, search_stub):
    run = _paused_search(api, mode="step")
    assert run["turns"] == 1
    response = _advance(reviewer_api, run["id"], approval=True)
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["turns"]) == ("running", 1)
    assert [s["kind"] for s in _steps(api, run["id"])] == ["model", "approval", "tool"]
    final = _advance(api, run["id"]).json()
    assert (final["status"], final["stop_reason"], final["turns"]) == ("done", "final_answer", 2)
    assert "Python is a programming language." in final["output"]


def test_step_run_deny_makes_no_model_call(api, reviewer_api, no_search_network):
    run = _paused_search(api, mode="step")
    body = _advance(reviewer_api, run["id"], approval=False).json()
    assert (body["status"], body["turns"]) == ("running", 1)
    assert [s["kind"] for s in _steps(api, run["id"])] == ["model", "approval"]


def test_second_decision_on_a_resolved_call_is_refused(api, reviewer_api, search_stub):
    run = _paused_search(api)
    assert _advance(reviewer_api, run["id"], approval=True).status_code == 200
    again = _advance(reviewer_api, run["id"], approval=True)
    assert again.status_code == 409
    assert Step.objects.filter(run_id=run["id"], kind="approval").count() == 1


def test_superuser_may_decide(api, search_stub):
    root = client_for(make_user("root", staff=True, superuser=True))
    run = _paused_search(api)
    response = _advance(root, run["id"], approval=True)
    assert response.status_code == 200
    assert response.json()["status"] == "done"


def test_plain_staff_cannot_see_or_decide(api, no_search_network):
    staff = client_for(make_user("stan", staff=True))
    run = _paused_search(api)
    assert _advance(staff, run["id"], approval=True).status_code == 404


def test_widened_sensitive_calculator_pauses_and_resumes(api, reviewer_api):
    run = create_run(api, sensitive_tools=["calculator"]).json()
    assert run["status"] == "awaiting_approval"
    body = _advance(reviewer_api, run["id"], approval=True).json()
    # The next calculator call pauses again: every call of a sensitive tool needs a decision.
    assert body["status"] == "awaiting_approval"
    assert body["pending_action"]["arguments"] == {"expression": "84+1"}
    body = _advance(reviewer_api, run["id"], approval=True).json()
    assert (body["status"], body["output"], body["turns"]) == ("done", "85", 3)


# --- cancel ---------------------------------------------------------------------------------------------------


def test_cancel_a_running_run(api):
    run_id = create_run(api, mode="step").json()["id"]
    response = api.post(run_url(run_id, "cancel"))
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["stop_reason"], body["ok"], body["output"]) == ("done", "cancelled", False, None)
    assert body["id"] == run_id
    again = api.post(run_url(run_id, "cancel") + "/")
    assert again.status_code == 409
    assert "detail" in again.json()
    assert _advance(api, run_id).status_code == 409


def test_cancel_a_paused_run(api, no_search_network):
    run = _paused_search(api)
    body = api.post(run_url(run["id"], "cancel")).json()
    assert (body["status"], body["stop_reason"], body["pending_action"]) == ("done", "cancelled", None)


def test_cancel_a_done_run_is_409(api):
    run_id = create_run(api).json()["id"]
    response = api.post(run_url(run_id, "cancel"))
    assert response.status_code == 409
    run = Run.objects.get(pk=run_id)
    assert (run.stop_reason, run.output) == ("final_answer", "85")


def test_cancel_another_users_run_is_404(api, bob):
    bob_run = create_run(client_for(bob), mode="step").json()["id"]
    assert api.post(run_url(bob_run, "cancel")).status_code == 404
    assert Run.objects.get(pk=bob_run).status == "running"


def test_reviewer_may_cancel_others_runs(api, reviewer_api):
    run_id = create_run(api, mode="step").json()["id"]
    assert reviewer_api.post(run_url(run_id, "cancel")).status_code == 200


def test_cancelled_run_is_listed_by_stop_reason(api):
    run_id = create_run(api, mode="step").json()["id"]
    api.post(run_url(run_id, "cancel"))
    body = api.get(RUNS, {"stop_reason": "cancelled"}).json()
    assert [r["id"] for r in body["results"]] == [run_id]


# --- one rule for edited arguments (issue 10.4) -------------------------------------------------------------------


@pytest.mark.parametrize("arguments", [{"query": 5}, {"q": "python"}, {"query": "x", "extra": 1}])
def test_edited_arguments_that_break_the_schema_are_400_and_nothing_is_recorded(
    api, reviewer_api, no_search_network, arguments
):
    run = _paused_search(api)
    before = _steps(api, run["id"])

    response = _advance(reviewer_api, run["id"], approval=True, arguments=arguments)

    assert response.status_code == 400
    assert "schema" in response.json()["arguments"][0]
    assert _steps(api, run["id"]) == before  # no approval step, no failed tool step
    assert api.get(run_url(run["id"])).json()["status"] == "awaiting_approval"
    assert no_search_network.requests == []


def test_after_a_refused_edit_a_valid_decision_still_goes_through(api, reviewer_api, search_stub):
    run = _paused_search(api)
    assert _advance(reviewer_api, run["id"], approval=True, arguments={"query": 5}).status_code == 400

    response = _advance(reviewer_api, run["id"], approval=True, arguments={"query": "django"})

    assert response.status_code == 200
    assert [s["kind"] for s in _steps(api, run["id"])] == ["model", "approval", "tool", "model"]
