"""GET /api/v1/runs and /api/v1/runs/{id}, DELETE, visibility rules and query counts."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Run, Step
from tests.api.conftest import (
    RUN_KEYS,
    RUNS,
    STEP_COMMON,
    STEP_FIELDS,
    create_run,
    make_runs,
    run_url,
    spread_created_at,
)
from tests.conftest import client_for, make_user

pytestmark = pytest.mark.django_db


def _iso_with_tz(value: str) -> datetime:
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert moment.tzinfo is not None, value
    return moment


def _check_steps(steps: list[dict]) -> None:
    assert [s["index"] for s in steps] == list(range(len(steps)))
    for step in steps:
        assert step["kind"] in STEP_FIELDS
        assert set(step) == STEP_COMMON | STEP_FIELDS[step["kind"]], step
        assert isinstance(step["latency_ms"], int) and step["latency_ms"] >= 0
        _iso_with_tz(step["created_at"])


# --- detail ---------------------------------------------------------------------------------------------------


def test_detail_has_the_run_keys_plus_ordered_steps(api):
    run_id = create_run(api).json()["id"]
    response = api.get(run_url(run_id))
    assert response.status_code == 200
    body = response.json()
    assert RUN_KEYS | {"steps"} <= set(body)
    assert body["id"] == run_id
    _iso_with_tz(body["created_at"])
    _iso_with_tz(body["updated_at"])
    steps = body["steps"]
    _check_steps(steps)
    assert [s["kind"] for s in steps] == ["model", "tool", "model", "tool", "model"]


def test_model_and_tool_step_fields(api):
    run_id = create_run(api).json()["id"]
    steps = api.get(run_url(run_id)).json()["steps"]
    first, tool, *_, last = steps
    assert first["kind"] == "model"
    assert first["final_answer"] is None
    assert isinstance(first["text"], str)
    assert first["thought"] is None or isinstance(first["thought"], str)
    usage = first["usage"]  # the demo model's estimate from text length
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert len(first["tool_calls"]) == 1
    call = first["tool_calls"][0]
    assert set(call) == {"id", "name", "arguments"}
    assert call["name"] == "calculator"
    assert call["arguments"] == {"expression": "12*7"}
    assert tool["kind"] == "tool"
    assert tool["call_id"] == call["id"]
    assert tool["name"] == "calculator"
    assert tool["arguments"] == {"expression": "12*7"}
    assert tool["output"] == "84"
    assert tool["is_error"] is False
    assert last["kind"] == "model"
    assert last["final_answer"] == "85"
    assert last["tool_calls"] == []


def test_react_model_step_keeps_raw_text(api):
    run_id = create_run(api, protocol="react").json()["id"]
    steps = api.get(run_url(run_id)).json()["steps"]
    _check_steps(steps)
    first = steps[0]
    assert "Action: calculator" in first["text"]
    assert first["thought"]
    assert first["tool_calls"][0]["arguments"] == {"expression": "12*7"}
    assert steps[-1]["final_answer"] == "85"
    assert "Final Answer" in steps[-1]["text"]


def test_error_step_fields_on_a_deadline(api):
    run_id = create_run(api, mode="step").json()["id"]
    Run.objects.filter(pk=run_id).update(deadline=timezone.now() - timedelta(seconds=1))
    response = api.post(run_url(run_id, "advance"), {}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["stop_reason"], body["ok"], body["output"]) == ("done", "timeout", False, None)
    steps = api.get(run_url(run_id)).json()["steps"]
    _check_steps(steps)
    assert steps[-1]["kind"] == "error"
    assert isinstance(steps[-1]["message"], str) and steps[-1]["message"]


def test_approval_step_fields(api, reviewer_api, search_stub):
    run_id = create_run(api, input="search python").json()["id"]
    reviewer_api.post(run_url(run_id, "advance"), {"approval": True, "reason": "fine"}, format="json")
    steps = api.get(run_url(run_id)).json()["steps"]
    _check_steps(steps)
    assert [s["kind"] for s in steps] == ["model", "approval", "tool", "model"]


def test_other_users_run_is_404_without_data(api, bob):
    bob_run = create_run(client_for(bob)).json()["id"]
    response = api.get(run_url(bob_run))
    assert response.status_code == 404
    assert set(response.json()) == {"detail"}
    assert bob_run not in response.content.decode()
    assert "85" not in response.content.decode()


@pytest.mark.parametrize("bad", ["not-a-uuid", "123", "4b9e2f71-0c3d-4a58-8e16-d27f5a9c3b80"])
def test_invalid_or_unknown_id_is_404(api, bad):
    response = api.get(run_url(bad))
    assert response.status_code == 404
    assert "detail" in response.json()


def test_staff_reviewer_sees_others_runs(api, reviewer_api):
    run_id = create_run(api).json()["id"]
    response = reviewer_api.get(run_url(run_id))
    assert response.status_code == 200
    assert response.json()["output"] == "85"
    listed = reviewer_api.get(RUNS).json()
    assert run_id in [r["id"] for r in listed["results"]]


def test_staff_without_permission_does_not_see_others_runs(api):
    run_id = create_run(api).json()["id"]
    staff = client_for(make_user("stan", staff=True))
    assert staff.get(run_url(run_id)).status_code == 404
    assert staff.get(RUNS).json()["count"] == 0


def test_permission_without_staff_does_not_see_others_runs(api):
    run_id = create_run(api).json()["id"]
    perm_only = client_for(make_user("pete", reviewer=True))
    assert perm_only.get(run_url(run_id)).status_code == 404


def test_superuser_sees_others_runs(api):
    run_id = create_run(api).json()["id"]
    root = client_for(make_user("root", superuser=True, staff=True))
    assert root.get(run_url(run_id)).status_code == 200
    assert root.get(RUNS).json()["count"] == 1


def test_detail_trailing_slash_optional(api):
    run_id = create_run(api).json()["id"]
    assert api.get(run_url(run_id) + "/").status_code == 200
    assert api.get(run_url(run_id)).status_code == 200


# --- list -----------------------------------------------------------------------------------------------------


def test_list_shape_newest_first_without_steps(api, alice):
    runs = make_runs(alice, 3)
    spread_created_at(runs)
    response = api.get(RUNS)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert body["count"] == 3
    assert body["next"] is None and body["previous"] is None
    assert [r["id"] for r in body["results"]] == [str(r.pk) for r in reversed(runs)]
    for item in body["results"]:
        assert RUN_KEYS <= set(item)
        assert "steps" not in item


def test_list_of_api_created_runs_is_newest_first(api):
    first = create_run(api).json()["id"]
    second = create_run(api, input="What is 2+2?").json()["id"]
    ids = [r["id"] for r in api.get(RUNS).json()["results"]]
    assert ids == [second, first]


def test_list_shows_only_own_runs(api, alice, bob):
    make_runs(alice, 2)
    make_runs(bob, 3)
    body = api.get(RUNS).json()
    assert body["count"] == 2
    assert {r["id"] for r in body["results"]} == {str(r.pk) for r in Run.objects.filter(owner=alice)}


def test_list_empty(api):
    body = api.get(RUNS + "/").json()
    assert body == {"count": 0, "next": None, "previous": None, "results": []}


def test_filter_by_status_and_stop_reason(api, alice):
    make_runs(alice, 2, status="done", stop_reason="final_answer")
    make_runs(alice, 3, status="done", stop_reason="cancelled", output=None)
    make_runs(alice, 1, status="running", stop_reason=None, output=None)
    make_runs(alice, 4, status="awaiting_approval", stop_reason=None, output=None)
    assert api.get(RUNS, {"status": "done"}).json()["count"] == 5
    assert api.get(RUNS, {"status": "running"}).json()["count"] == 1
    assert api.get(RUNS, {"status": "awaiting_approval"}).json()["count"] == 4
    cancelled = api.get(RUNS, {"stop_reason": "cancelled"}).json()
    assert cancelled["count"] == 3
    assert {r["stop_reason"] for r in cancelled["results"]} == {"cancelled"}
    assert api.get(RUNS, {"status": "done", "stop_reason": "final_answer"}).json()["count"] == 2
    assert api.get(RUNS, {"stop_reason": "timeout"}).json()["count"] == 0


@pytest.mark.parametrize("query", [{"status": "bogus"}, {"stop_reason": "bogus"}])
def test_filter_with_a_bad_value_is_400(api, alice, query):
    make_runs(alice, 1)
    response = api.get(RUNS, query)
    assert response.status_code == 400
    assert list(query)[0] in response.json()


def test_limit_defaults_to_50(api, alice):
    make_runs(alice, 55)
    body = api.get(RUNS).json()
    assert body["count"] == 55
    assert len(body["results"]) == 50
    assert body["next"] is not None
    assert body["previous"] is None


def test_limit_is_capped_at_200(api, alice):
    make_runs(alice, 205)
    body = api.get(RUNS, {"limit": 1000}).json()
    assert body["count"] == 205
    assert len(body["results"]) == 200
    assert body["next"] is not None
    assert len(api.get(RUNS, {"limit": 200}).json()["results"]) == 200


def test_limit_and_offset_page_through_in_order(api, alice):
    runs = make_runs(alice, 7)
    spread_created_at(runs)
    newest_first = [str(r.pk) for r in reversed(runs)]
    page1 = api.get(RUNS, {"limit": 3}).json()
    page2 = api.get(RUNS, {"limit": 3, "offset": 3}).json()
    page3 = api.get(RUNS, {"limit": 3, "offset": 6}).json()
    assert [r["id"] for r in page1["results"]] == newest_first[:3]
    assert [r["id"] for r in page2["results"]] == newest_first[3:6]
    assert [r["id"] for r in page3["results"]] == newest_first[6:]
    assert page1["previous"] is None and page1["next"]
    assert page2["previous"] and page2["next"]
    assert page3["next"] is None and page3["previous"]
    assert "offset=3" in page1["next"]


def test_pending_action_shows_in_list(api, no_search_network):
    run_id = create_run(api, input="search python").json()["id"]
    item = api.get(RUNS).json()["results"][0]
    assert item["id"] == run_id
    assert item["pending_action"]["tool"] == "search"
    assert item["pending_action"]["arguments"] == {"query": "python"}


# --- delete ---------------------------------------------------------------------------------------------------


def test_delete_removes_run_and_steps(api):
    run_id = create_run(api).json()["id"]
    assert Step.objects.filter(run_id=run_id).count() == 5
    response = api.delete(run_url(run_id))
    assert response.status_code == 204
    assert not Run.objects.filter(pk=run_id).exists()
    assert Step.objects.filter(run_id=run_id).count() == 0
    assert api.get(run_url(run_id)).status_code == 404
    assert api.delete(run_url(run_id)).status_code == 404


def test_delete_of_another_users_run_is_404(api, bob):
    bob_run = create_run(client_for(bob)).json()["id"]
    assert api.delete(run_url(bob_run)).status_code == 404
    assert Run.objects.filter(pk=bob_run).exists()
    assert Step.objects.filter(run_id=bob_run).count() == 5


def test_delete_with_invalid_id_is_404(api):
    assert api.delete(run_url("nope")).status_code == 404


# --- query counts ---------------------------------------------------------------------------------------------


def _mixed_runs(owner, n: int) -> None:
    """Runs of every status, including paused ones with a pending action (the expensive case)."""
    per = max(1, n // 3)
    make_runs(owner, per)
    make_runs(owner, per, status="running", stop_reason=None, output=None)
    paused = make_runs(owner, n - 2 * per, status="awaiting_approval", stop_reason=None, output=None)
    steps = []
    for run in paused:
        call = {"id": f"c-{run.pk}", "name": "search", "arguments": {"query": "x"}}
        steps.append(
            Step(
                run=run,
                index=0,
                kind="model",
                data={"thought": None, "text": "", "tool_calls": [call], "final_answer": None, "usage": {}},
            )
        )
    Step.objects.bulk_create(steps)


def _count_list_queries(api) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = api.get(RUNS)
    assert response.status_code == 200
    return len(ctx.captured_queries)


def test_list_query_count_does_not_grow_with_runs(api, alice, bob, django_assert_max_num_queries):
    _mixed_runs(alice, 3)
    small = _count_list_queries(api)
    _mixed_runs(alice, 27)
    assert api.get(RUNS).json()["count"] == 30
    with django_assert_max_num_queries(small):
        response = api.get(RUNS)
    assert response.status_code == 200
    assert len(response.json()["results"]) == 30
    paused = [r for r in response.json()["results"] if r["status"] == "awaiting_approval"]
    assert paused and all(r["pending_action"]["tool"] == "search" for r in paused)


def test_detail_query_count_does_not_grow_with_steps(api, django_assert_max_num_queries):
    short = create_run(api, input="What is 2+2?").json()["id"]
    long = create_run(api, input="What is 1+1, plus 1, plus 1, plus 1, plus 1, plus 1, plus 1").json()["id"]
    assert Step.objects.filter(run_id=long).count() > Step.objects.filter(run_id=short).count()
    with CaptureQueriesContext(connection) as ctx:
        assert api.get(run_url(short)).status_code == 200
    with django_assert_max_num_queries(len(ctx.captured_queries)):
        body = api.get(run_url(long)).json()
    assert body["output"] == "8"
    _check_steps(body["steps"])
