"""Evals over HTTP: staff start an eval run (queued: 202, a worker runs it) and read them; everyone else is refused."""

from __future__ import annotations

from datetime import timedelta

import jsonschema
import pytest
from django.core.management import call_command
from django.utils import timezone
from django_tasks_db.models import DBTaskResult
from rest_framework.test import APIClient

from agents.evals import runner
from agents.evals.cases import CaseError
from agents.models import EvalResult, EvalRun
from tests.conftest import client_for, make_user
from tests.evals.conftest import stored_eval_run

EVALS = "/api/v1/evals/runs"
RESULT_KEYS = {
    "case_id", "protocol", "attempt", "run", "passed", "score", "checks", "reason", "output", "turns", "latency_ms",
    "tokens", "cost",
}  # fmt: skip
# db_worker closes its database connection between tasks, as a long-lived worker does: these tests commit.
WORKER = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff(db):
    return make_user("sam", staff=True)


@pytest.fixture
def staff_api(staff):
    return client_for(staff)


def work() -> None:
    """What `manage.py db_worker` does, once: every queued task, then stop."""
    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)


def start_and_run(api, body: dict) -> dict:
    """POST an eval run (202, queued), let a worker run it, then GET it: the finished eval run with its results."""
    response = api.post(EVALS, body, format="json")
    assert response.status_code == 202, response.content
    work()
    finished = api.get(f"{EVALS}/{response.json()['id']}")
    assert finished.status_code == 200
    return finished.json()


@WORKER
def test_staff_start_an_eval_run_and_get_the_results(staff_api, staff):
    response = staff_api.post(EVALS, {"only": "arith-chain*"}, format="json")

    assert response.status_code == 202, response.content
    queued = response.json()
    eval_run = EvalRun.objects.get()
    assert queued["id"] == eval_run.pk and eval_run.created_by == staff
    assert response["Location"] == f"{EVALS}/{eval_run.pk}"
    assert (queued["finished_at"], queued["results"], queued["total"], queued["created_by"]) == (None, [], 0, "sam")
    assert (queued["provider"], queued["model"], queued["protocol"], queued["only"]) == (
        "demo",
        "demo-1",
        "per case",
        "arith-chain*",
    )
    (task,) = DBTaskResult.objects.all()
    assert (task.status, task.task_path) == ("READY", "agents.tasks.run_eval")
    assert task.args_kwargs == {"args": [], "kwargs": {"eval_run_id": eval_run.pk, "concurrency": 1}}
    assert EvalResult.objects.count() == 0  # nothing ran inside the request

    work()
    task.refresh_from_db()
    assert (task.status, task.return_value) == ("SUCCESSFUL", "4/4")
    detail = staff_api.get(response["Location"])
    assert detail.status_code == 200
    body = detail.json()
    assert body["id"] == eval_run.pk
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


@WORKER
def test_a_failing_case_is_still_202_and_the_eval_run_has_the_reason(staff_api):
    body = start_and_run(staff_api, {"only": "general-knowledge", "protocol": "react"})
    assert (body["total"], body["passed"], body["pass_rate"], body["protocol"]) == (1, 0, 0.0, "react")
    assert body["results"][0]["reason"] == "missing 'Paris'"
    assert DBTaskResult.objects.get().status == "SUCCESSFUL"  # failing cases are results, not a failed task


@WORKER
def test_max_reflections_are_passed_to_the_runs(staff_api, staff):
    body = start_and_run(staff_api, {"only": "budget-one-turn", "protocol": "tools", "max_reflections": 1})
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


@WORKER
def test_the_run_object_shows_max_reflections_only_when_used(staff_api):
    body = start_and_run(staff_api, {"only": "arith-chain-plus", "protocol": "tools"})
    root = client_for(make_user("root", staff=True, superuser=True))
    run = root.get(f"/api/v1/runs/{body['results'][0]['run']}").json()
    assert "max_reflections" not in run
    assert not any("reflection" in s for s in run["steps"])


@WORKER
def test_concurrency_reaches_the_worker(staff_api, monkeypatch):
    pools = []
    real_pool = runner.ThreadPoolExecutor

    def pool(max_workers):
        pools.append(max_workers)
        return real_pool(max_workers=max_workers)

    monkeypatch.setattr(runner, "ThreadPoolExecutor", pool)
    body = start_and_run(staff_api, {"only": "arith-chain*", "concurrency": 2})
    assert pools == [2]
    assert (body["total"], body["passed"]) == (4, 4)
    assert {(r["case_id"], r["protocol"]) for r in body["results"]} == {
        (case, protocol) for case in ("arith-chain-plus", "arith-chain-times") for protocol in ("tools", "react")
    }


@WORKER
def test_a_failing_task_ends_the_eval_run_with_what_it_had_and_fails_the_task(staff_api, monkeypatch, caplog):
    real_run_case = runner._run_case
    calls = []

    def run_case(*args):
        calls.append(args[1][0].id)
        if len(calls) == 2:
            raise RuntimeError("the second case broke")
        return real_run_case(*args)

    monkeypatch.setattr(runner, "_run_case", run_case)
    response = staff_api.post(EVALS, {"only": "arith-chain*", "protocol": "tools"}, format="json")
    assert response.status_code == 202
    with caplog.at_level("ERROR", logger="agents.evals.runner"):
        work()

    task = DBTaskResult.objects.get()
    assert (task.status, task.exception_class_path) == ("FAILED", "builtins.RuntimeError")
    assert "the second case broke" in task.traceback
    body = staff_api.get(response["Location"]).json()
    assert body["finished_at"] is not None  # not left "running" for good
    assert (body["total"], body["passed"], body["pass_rate"]) == (1, 1, 1.0)  # the one result stored
    assert [r["case_id"] for r in body["results"]] == ["arith-chain-plus"]
    assert calls == ["arith-chain-plus", "arith-chain-times"]
    assert any(f"eval run {body['id']} failed" in r.getMessage() and r.exc_info for r in caplog.records)


@pytest.mark.django_db
def test_an_eval_run_stopped_midway_ends_with_what_it_had(monkeypatch, caplog):
    """A worker's shutdown stops its task with a BaseException (GreenletExit), as Ctrl-C stops the command."""
    real_run_case = runner._run_case

    def run_case(*args):
        if EvalResult.objects.exists():
            raise KeyboardInterrupt
        return real_run_case(*args)

    monkeypatch.setattr(runner, "_run_case", run_case)
    config = runner.EvalConfig(provider="demo", protocol="tools", cases_file="agents/evals/cases.yaml")
    with caplog.at_level("WARNING", logger="agents.evals.runner"), pytest.raises(KeyboardInterrupt):
        runner.run_evals(cases=runner.load_cases(None, "arith-chain*"), config=config)
    eval_run = EvalRun.objects.get()
    assert eval_run.finished_at is not None and (eval_run.total, eval_run.passed) == (1, 1)
    assert any("stopped (KeyboardInterrupt)" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db
def test_a_task_whose_cases_cannot_be_read_now_ends_the_eval_run_empty(staff):
    from agents.tasks import run_eval

    eval_run = EvalRun.objects.create(
        created_by=staff, provider="demo", model="demo-1", protocol="per case", cases_file="agents/evals/gone.yaml"
    )
    with pytest.raises(CaseError, match="Cannot read cases file"):
        run_eval.call(eval_run_id=eval_run.pk, concurrency=1)
    eval_run.refresh_from_db()
    assert eval_run.finished_at is not None and (eval_run.total, eval_run.passed) == (0, 0)


@pytest.mark.django_db
def test_the_task_skips_an_eval_run_deleted_or_finished_meanwhile():
    from agents.tasks import run_eval

    finished = stored_eval_run({("a", "tools"): True})
    assert run_eval.call(eval_run_id=finished.pk, concurrency=1) == "skipped"
    assert finished.results.count() == 1
    assert run_eval.call(eval_run_id=finished.pk + 1, concurrency=1) == "skipped"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "config",
    [
        runner.EvalConfig(provider="demo", model="demo-1", cases_file="agents/evals/cases.yaml", only="arith-*"),
        runner.EvalConfig(
            provider="demo",
            model="demo-1",
            protocol="react",
            max_reflections=2,
            cases_file="/tmp/cases.yaml",
            only="",
            replay=True,
            agent="helper",
        ),
    ],
    ids=["per-case", "react-replay-agent"],
)
def test_the_task_rebuilds_the_config_the_eval_run_was_started_with(config):
    cases = runner.load_cases(None, "arith-chain*")
    eval_run = runner.start_eval_run(cases=cases, config=config)
    assert runner.config_for(EvalRun.objects.get(pk=eval_run.pk), concurrency=3) == runner.EvalConfig(
        **{**config.__dict__, "concurrency": 3}
    )


def test_non_staff_cannot_start_or_read(alice):
    api = client_for(alice)
    eval_run = stored_eval_run({("a", "tools"): True})
    assert api.post(EVALS, {"only": "arith-chain*"}, format="json").status_code == 403
    assert api.get(EVALS).status_code == 403
    assert api.get(f"{EVALS}/{eval_run.pk}").status_code == 403
    assert EvalRun.objects.count() == 1
    assert DBTaskResult.objects.count() == 0


def test_anonymous_is_401(db):
    response = APIClient().post(EVALS, {"only": "arith-chain*"}, format="json")
    assert response.status_code == 401
    assert APIClient().get(EVALS).status_code == 401
    assert EvalRun.objects.count() == 0
    assert DBTaskResult.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"protocol": "x"}, "protocol"),
        ({"max_reflections": 9}, "max_reflections"),
        ({"max_reflections": -1}, "max_reflections"),
        ({"concurrency": 0}, "concurrency"),
        ({"only": "no-such-case*"}, "only"),
        ({"only": "arith-chain*", "provider": "nope"}, "provider"),
        ({"only": "arith-chain*", "provider": 5}, "provider"),
    ],
    ids=str,
)
def test_bad_bodies_are_400(staff_api, body, field):
    response = staff_api.post(EVALS, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert EvalRun.objects.count() == 0
    assert DBTaskResult.objects.count() == 0  # nothing queued either


def test_a_case_naming_an_unknown_tool_is_400_before_anything_is_stored(staff_api, monkeypatch):
    from agents.runs import runtime

    registry = runtime.tool_registry()

    class WithoutSearch:  # as on a server whose search tool is gone
        def names(self):
            return [name for name in registry.names() if name != "search"]

    monkeypatch.setattr(runtime, "tool_registry", WithoutSearch)
    response = staff_api.post(EVALS, {"only": "calculator-disabled"}, format="json")  # tools: [search]
    assert response.status_code == 400, response.content
    assert response.json() == {"cases": ["case 'calculator-disabled' names unknown tool(s): search"]}
    assert (EvalRun.objects.count(), DBTaskResult.objects.count()) == (0, 0)


@pytest.mark.parametrize("blank", ["", "   ", "\t"], ids=repr)
@pytest.mark.parametrize("field", ["provider", "model"])
def test_a_blank_provider_or_model_is_400_as_the_schema_says(staff_api, field, blank):
    response = staff_api.post(EVALS, {"only": "arith-chain*", field: blank}, format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {field: ["This field may not be blank."]}
    assert (EvalRun.objects.count(), DBTaskResult.objects.count()) == (0, 0)

    start = staff_api.get("/api/v1/schema", {"format": "json"}).json()["components"]["schemas"]["EvalStart"]
    assert start["properties"][field]["minLength"] == 1
    with pytest.raises(jsonschema.ValidationError):  # the served schema refuses that body too
        jsonschema.validate({"only": "arith-chain*", field: blank}, start)
    jsonschema.validate({"only": "arith-chain*", field: "x"}, start)  # and accepts a named one


@WORKER
def test_leaving_provider_and_model_out_runs_the_defaults(staff_api, settings):
    settings.AGENT_DEFAULT_PROVIDER = "demo"
    body = start_and_run(staff_api, {"only": "arith-chain-plus", "protocol": "tools"})
    assert (body["provider"], body["model"], body["total"], body["passed"]) == ("demo", "demo-1", 1, 1)


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
