"""Scores on production runs: an agent's online evaluators (checked, sampled when a run settles, scored by the task on
a worker), feedback over the API, the scores in the run object, and the Prometheus counter."""

from __future__ import annotations

import re

import pytest
from django_tasks_db.models import DBTaskResult

from agents.admin.agents import AgentForm
from agents.evals import online
from agents.models import Agent, Run, RunScore
from tests.api.conftest import create_run, run_url
from tests.conftest import client_for
from tests.observability.test_metrics import metrics_on, scrape  # noqa: F401 - the fixture

TURNS = {"name": "short", "sample": 1, "check": {"type": "turns", "max": 3}}
TOOLS = {"name": "calculated", "sample": 1, "check": {"type": "tools", "calls": [{"name": "calculator"}]}}
JUDGE = {"name": "helpful", "sample": 1, "check": {"type": "judge", "rubric": 'The answer is "85".'}}


# --- the evaluators an agent may have ---------------------------------------------------------------------------------


def test_evaluators_of_the_types_that_need_no_expected_answer_are_accepted():
    parsed = online.parse_evaluators(
        [TURNS, TOOLS, JUDGE, {"name": "j", "check": {"type": "json", "fields": {"a": 1}}}]
    )
    assert [(e.name, e.check.type, e.sample) for e in parsed] == [
        ("short", "turns", 1.0), ("calculated", "tools", 1.0), ("helpful", "judge", 1.0), ("j", "json", 1.0),
    ]  # fmt: skip
    assert online.evaluator_problems([]) == [] and online.evaluator_problems(None) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"name": "x"}, "evaluators must be a list"),
        ([{"name": "x", "check": {"type": "exact", "value": "85"}}], r"'x': check \(exact\): needs an expected"),
        ([{"name": "x", "sample": 1.5, "check": TURNS["check"]}], "evaluator 'x': 'sample' must be a number from 0"),
        ([{"name": "x", "sample": True, "check": TURNS["check"]}], "'sample' must be a number from 0 to 1"),
        ([TURNS, TURNS], "evaluator 'short': the name is used twice"),
        ([{**TURNS, "when": "always"}], r"evaluator #1: unknown field\(s\) when"),
        ([{"check": TURNS["check"]}], "evaluator #1: 'name' must be a string"),
        ([{"name": "feedback", "check": TURNS["check"]}], "not 'feedback'"),
        ([{"name": "x", "check": {"type": "turns"}}], r"evaluator 'x': check \(turns\): 'max' is required"),
        (["turns"], "evaluator #1 must be a mapping"),
    ],
    ids=str,
)
def test_a_bad_evaluator_is_refused_naming_it_and_the_field(value, message):
    problems = online.evaluator_problems(value)
    assert len(problems) == 1
    assert re.search(message, problems[0]), problems


def test_the_agent_admin_form_refuses_bad_evaluators_and_keeps_good_ones(db):
    bad = AgentForm(data={"name": "triage", "evaluators": '[{"name": "x", "check": {"type": "regex", "value": "a"}}]'})
    assert not bad.is_valid()
    assert "needs an expected answer" in " ".join(bad.errors["evaluators"])
    good = AgentForm(data={"name": "triage", "evaluators": '[{"name": "short", "check": {"type": "turns", "max": 3}}]'})
    assert good.is_valid(), good.errors
    assert good.save().evaluators == [{"name": "short", "check": {"type": "turns", "max": 3}}]


# --- sampled when a run settles, scored on the worker ---------------------------------------------------------------


def _score_tasks() -> list[DBTaskResult]:
    return list(DBTaskResult.objects.filter(task_path="agents.tasks.score_run").order_by("enqueued_at"))


def test_a_run_of_an_agent_with_evaluators_is_queued_for_scoring_and_scored_by_the_task(
    api, django_capture_on_commit_callbacks
):
    Agent.objects.create(name="maths", evaluators=[TURNS, TOOLS, {**JUDGE, "sample": 0}])
    with django_capture_on_commit_callbacks(execute=True):
        response = create_run(api, agent="maths")
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]
    (task,) = _score_tasks()
    assert task.args_kwargs == {"args": [], "kwargs": {"run_id": run_id, "evaluators": ["short", "calculated"]}}
    assert RunScore.objects.count() == 0  # nothing is scored in the request

    assert online.score_run(run_id=run_id, evaluators=["short", "calculated"]) == "2 scored"
    scores = {s.name: s for s in RunScore.objects.filter(run_id=run_id)}
    assert (scores["short"].passed, scores["short"].score, scores["short"].source) == (True, 1.0, "online")
    assert scores["calculated"].passed and scores["calculated"].reason == ""

    detail = api.get(run_url(run_id)).json()
    assert [(s["name"], s["source"], s["passed"]) for s in detail["scores"]] == [
        ("short", "online", True), ("calculated", "online", True),
    ]  # fmt: skip


def test_a_failing_evaluator_scores_low_with_its_reason(api, django_capture_on_commit_callbacks):
    Agent.objects.create(name="maths", evaluators=[{"name": "terse", "check": {"type": "turns", "max": 1}}])
    with django_capture_on_commit_callbacks(execute=True):
        run_id = create_run(api, agent="maths").json()["id"]
    online.score_run(run_id=run_id, evaluators=["terse"])
    (score,) = RunScore.objects.filter(run_id=run_id)
    assert (score.passed, score.score, score.reason) == (False, 0.0, "3 turns (at most 1)")


def test_the_demo_judge_scores_a_run_through_an_ordinary_run_of_the_online_user(
    api, django_capture_on_commit_callbacks
):
    Agent.objects.create(name="maths", evaluators=[JUDGE])
    with django_capture_on_commit_callbacks(execute=True):
        run_id = create_run(api, agent="maths").json()["id"]
    online.score_run(run_id=run_id, evaluators=["helpful"])
    (score,) = RunScore.objects.filter(run_id=run_id)
    assert (score.passed, score.score) == (True, 1.0)
    judge_run = Run.objects.get(owner__username=online.ONLINE_USER)
    assert judge_run.metadata == {"eval": "judge"} and judge_run.output_json["score"] == 1
    assert not judge_run.owner.is_active  # an eval user: in no one's list
    assert api.get("/api/v1/runs").json()["count"] == 1  # alice sees her run only


def test_no_scoring_for_a_run_without_an_agent_or_with_sample_zero(api, django_capture_on_commit_callbacks):
    Agent.objects.create(name="maths", evaluators=[{**TURNS, "sample": 0}])
    with django_capture_on_commit_callbacks(execute=True):
        create_run(api, agent="maths")
        create_run(api)
    assert _score_tasks() == []


def test_the_task_skips_a_run_gone_or_an_evaluator_removed_meanwhile(api, django_capture_on_commit_callbacks):
    agent = Agent.objects.create(name="maths", evaluators=[TURNS])
    with django_capture_on_commit_callbacks(execute=True):
        run_id = create_run(api, agent="maths").json()["id"]
    agent.evaluators = []
    agent.save()
    assert online.score_run(run_id=run_id, evaluators=["short"]) == "skipped"
    assert online.score_run(run_id="00000000-0000-0000-0000-000000000000", evaluators=["short"]) == "skipped"
    assert RunScore.objects.count() == 0


# --- feedback -------------------------------------------------------------------------------------------------------


def test_the_owner_and_a_reviewer_give_feedback_and_it_shows_in_the_scores(api, reviewer):
    run_id = create_run(api).json()["id"]
    mine = api.post(run_url(run_id, "feedback"), {"score": 0.2, "comment": "too slow"}, format="json")
    assert mine.status_code == 201, mine.content
    assert {k: mine.json()[k] for k in ("name", "score", "passed", "source", "comment")} == {
        "name": "feedback", "score": 0.2, "passed": None, "source": "human", "comment": "too slow",
    }  # fmt: skip
    theirs = client_for(reviewer).post(run_url(run_id, "feedback"), {"score": 1, "name": "accuracy"}, format="json")
    assert theirs.status_code == 201
    scores = api.get(run_url(run_id)).json()["scores"]
    assert [(s["name"], s["score"], s["source"]) for s in scores] == [
        ("feedback", 0.2, "human"),
        ("accuracy", 1.0, "human"),
    ]
    assert RunScore.objects.get(name="accuracy").created_by == reviewer


def test_feedback_on_another_users_run_is_404_and_stores_nothing(api, bob):
    run_id = create_run(api).json()["id"]
    response = client_for(bob).post(run_url(run_id, "feedback"), {"score": 1}, format="json")
    assert response.status_code == 404
    assert RunScore.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"score": 1.5}, "score"),
        ({"score": -0.1}, "score"),
        ({"score": "good"}, "score"),
        ({}, "score"),
        ({"score": 1, "name": "x" * 65}, "name"),
        ({"score": 1, "name": ""}, "name"),
        ({"score": 1, "comment": "x" * 2001}, "comment"),
        ({"score": 1, "comment": 5}, "comment"),
        ({"score": 1, "comment": "a\x00b"}, "comment"),
        ({"score": 1, "stars": 5}, "stars"),
    ],
    ids=str,
)
def test_bad_feedback_is_a_400_naming_the_field_and_stores_nothing(api, body, field):
    run_id = create_run(api).json()["id"]
    response = api.post(run_url(run_id, "feedback"), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert RunScore.objects.count() == 0


def test_scores_are_counted_for_prometheus(api, metrics_on, django_capture_on_commit_callbacks):  # noqa: F811
    Agent.objects.create(name="maths", evaluators=[{"name": "terse", "check": {"type": "turns", "max": 1}}])
    with django_capture_on_commit_callbacks(execute=True):
        run_id = create_run(api, agent="maths").json()["id"]
    online.score_run(run_id=run_id, evaluators=["terse"])
    api.post(run_url(run_id, "feedback"), {"score": 0.9}, format="json")
    samples = [s for s in scrape() if s[0] == "reactsite_run_scores_total"]
    assert {(labels["name"], labels["source"], labels["passed"]): v for _, labels, v in samples} == {
        ("terse", "online", "false"): 1.0, ("feedback", "human", "none"): 1.0,
    }  # fmt: skip


def test_the_console_run_page_shows_the_scores(api, reviewer):
    from django.test import Client

    run_id = create_run(api).json()["id"]
    api.post(run_url(run_id, "feedback"), {"score": 0.25, "comment": "missed the point"}, format="json")
    console = Client()
    console.force_login(reviewer)
    page = console.get(f"/admin/agents/run/{run_id}/change/")
    assert page.status_code == 200
    assert "feedback 0.25 (human) missed the point" in page.content.decode()


def test_feedback_refuses_a_score_that_is_not_a_finite_number():
    from agents.api.serializers import FeedbackSerializer

    body = FeedbackSerializer(data={"score": float("nan")})
    assert not body.is_valid()
    assert body.errors["score"] == ["Expected a finite number."]
