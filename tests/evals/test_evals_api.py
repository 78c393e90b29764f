"""Evals over HTTP: staff start an eval run (synchronously) and read them; everyone else is refused."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import EvalRun
from tests.conftest import client_for, make_user
from tests.evals.conftest import stored_eval_run

EVALS = "/api/v1/evals/runs"
RESULT_KEYS = {"case_id", "protocol", "run", "passed", "reason", "output", "turns", "latency_ms", "tokens"}


@pytest.fixture
def staff(db):
    return make_user("sam", staff=True)


@pytest.fixture
def staff_api(staff):
    return client_for(staff)


def test_staff_start_an_eval_run_and_get_the_results(staff_api, staff):
    response = staff_api.post(EVALS, {"only": "arith-chain*"}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    eval_run = EvalRun.objects.get()
    assert body["id"] == eval_run.pk and eval_run.created_by == staff
    assert (body["total"], body["passed"], body["pass_rate"], body["created_by"]) == (4, 4, 1.0, "sam")
    assert (body["provider"], body["model"], body["protocol"], body["only"]) == (
        "demo",
        "demo-1",
        "per case",
        "arith-chain*",
    )
    assert body["finished_at"] is not None
    assert len(body["results"]) == 4
    assert all(set(r) == RESULT_KEYS and r["passed"] for r in body["results"])
    assert {r["case_id"] for r in body["results"]} == {"arith-chain-plus", "arith-chain-times"}


def test_a_failing_case_is_still_201_with_the_reason(staff_api):
    response = staff_api.post(EVALS, {"only": "general-knowledge", "protocol": "react"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert (body["total"], body["passed"], body["pass_rate"], body["protocol"]) == (1, 0, 0.0, "react")
    assert body["results"][0]["reason"] == "missing 'Paris'"


def test_max_reflections_are_passed_to_the_runs(staff_api, staff):
    body = staff_api.post(
        EVALS, {"only": "budget-one-turn", "protocol": "tools", "max_reflections": 1}, format="json"
    ).json()
    assert body["max_reflections"] == 1 and body["passed"] == 0
    run_id = body["results"][0]["run"]

    # The case's run belongs to the inactive eval user; a superuser may read any run.
    root = client_for(make_user("root", staff=True, superuser=True))
    run = root.get(f"/api/v1/runs/{run_id}").json()
    assert (run["max_reflections"], run["stop_reason"], run["turns"]) == (1, "max_turns", 5)
    reflections = [s for s in run["steps"] if s.get("reflection")]
    assert len(reflections) == 1
    assert reflections[0]["reflection"] is True and reflections[0]["thought"] == "Reflection on attempt 1"
    assert all("reflection" not in s for s in run["steps"] if s is not reflections[0])


def test_the_run_object_shows_max_reflections_only_when_used(staff_api):
    body = staff_api.post(EVALS, {"only": "arith-chain-plus", "protocol": "tools"}, format="json").json()
    root = client_for(make_user("root", staff=True, superuser=True))
    run = root.get(f"/api/v1/runs/{body['results'][0]['run']}").json()
    assert "max_reflections" not in run
    assert not any("reflection" in s for s in run["steps"])


def test_non_staff_cannot_start_or_read(alice):
    api = client_for(alice)
    eval_run = stored_eval_run({("a", "tools"): True})
    assert api.post(EVALS, {"only": "arith-chain*"}, format="json").status_code == 403
    assert api.get(EVALS).status_code == 403
    assert api.get(f"{EVALS}/{eval_run.pk}").status_code == 403
    assert EvalRun.objects.count() == 1


def test_anonymous_is_401(db):
    response = APIClient().post(EVALS, {"only": "arith-chain*"}, format="json")
    assert response.status_code == 401
    assert APIClient().get(EVALS).status_code == 401
    assert EvalRun.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"protocol": "x"}, "protocol"),
        ({"max_reflections": 9}, "max_reflections"),
        ({"max_reflections": -1}, "max_reflections"),
        ({"concurrency": 0}, "concurrency"),
        ({"only": "no-such-case*"}, "only"),
        ({"only": "arith-chain*", "provider": "nope"}, "provider"),
    ],
    ids=str,
)
def test_bad_bodies_are_400(staff_api, body, field):
    response = staff_api.post(EVALS, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert EvalRun.objects.count() == 0


def test_list_is_staff_only_paginated_newest_first(staff_api):
    runs = [stored_eval_run({("a", "tools"): i % 2 == 0}) for i in range(3)]
    base = timezone.now() - timedelta(hours=1)
    for i, eval_run in enumerate(runs):
        EvalRun.objects.filter(pk=eval_run.pk).update(created_at=base + timedelta(minutes=i))

    body = staff_api.get(EVALS).json()
    assert body["count"] == 3
    assert [r["id"] for r in body["results"]] == [r.pk for r in reversed(runs)]
    assert "results" not in body["results"][0]  # the list has no per-case results

    page = staff_api.get(EVALS, {"limit": 1, "offset": 1}).json()
    assert [r["id"] for r in page["results"]] == [runs[1].pk]
    assert page["next"] and page["previous"]


def test_retrieve_has_the_results(staff_api, alice):
    eval_run = stored_eval_run({("a", "tools"): True, ("a", "react"): False}, owner=alice)
    body = staff_api.get(f"{EVALS}/{eval_run.pk}").json()
    assert body["id"] == eval_run.pk and (body["passed"], body["total"]) == (1, 2)
    assert {(r["case_id"], r["protocol"], r["passed"]) for r in body["results"]} == {
        ("a", "tools", True),
        ("a", "react", False),
    }
    assert all(r["run"] for r in body["results"])
    assert staff_api.get(f"{EVALS}/999999").status_code == 404
