"""Run metadata and search (`GET /api/v1/runs?metadata.<key>=<value>&q=&created_after=&created_before=`): metadata
given at creation (runs and threads), bounded and flat; filters by metadata, words and time; each look-up indexed on
both databases (agents/runs/search.py, migration 0021)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents.models import Run
from tests.api.conftest import RUNS, create_run
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(r["id"] for r in response.json()["results"])


def make(api, input="What is 2+3?", **metadata):
    response = create_run(api, input=input, metadata=metadata)
    assert response.status_code == 201, response.content
    return response.json()


def test_metadata_is_stored_and_shown_on_the_run_and_its_thread(api):
    run = make(api, team="billing", priority=2, urgent=True, ratio=0.5)

    assert run["metadata"] == {"team": "billing", "priority": 2, "urgent": True, "ratio": 0.5}
    assert api.get(f"{RUNS}/{run['id']}").json()["metadata"] == run["metadata"]
    assert create_run(api).json()["metadata"] == {}
    thread = api.post("/api/v1/threads", {"title": "t", "metadata": {"customer": "acme"}}, format="json").json()
    assert thread["metadata"] == {"customer": "acme"}
    assert api.get(f"/api/v1/threads/{thread['id']}").json()["metadata"] == {"customer": "acme"}


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ({"a": {"b": 1}}, "is an object: metadata is flat"),
        ({"a": [1]}, "is a list"),
        ({"a": None}, "null"),
        ({"bad key": 1}, "letters, digits"),
        ({f"k{i}": i for i in range(33)}, "At most 32 keys"),
        ({"a": "x" * 513}, "at most 512 characters"),
        ({"a": "x\x00y"}, "no NUL"),
        ([1, 2], "Must be a JSON object"),
    ],
)
def test_bad_metadata_is_a_400_naming_the_problem_and_nothing_is_stored(api, metadata, says):
    before = Run.objects.count()

    response = create_run(api, metadata=metadata)
    thread = api.post("/api/v1/threads", {"metadata": metadata}, format="json")

    assert response.status_code == 400 and says in response.json()["metadata"][0], response.content
    assert thread.status_code == 400 and "metadata" in thread.json()
    assert Run.objects.count() == before


def test_runs_are_found_by_metadata_strings_numbers_and_booleans(api, bob):
    billing = make(api, team="billing", priority=2, urgent=True)
    support = make(api, team="support", priority="2", urgent=False)
    make(api, team="billing:eu")
    make(client_for(bob), team="billing")  # another user's: never in alice's list

    assert ids(api.get(RUNS, {"metadata.team": "billing"})) == [billing["id"]]
    assert ids(api.get(RUNS, {"metadata.priority": "2"})) == sorted([billing["id"], support["id"]])
    assert ids(api.get(RUNS, {"metadata.urgent": "true"})) == [billing["id"]]
    assert ids(api.get(RUNS, {"metadata.urgent": "false", "metadata.team": "support"})) == [support["id"]]
    assert ids(api.get(RUNS, {"metadata.urgent": "false", "metadata.team": "billing"})) == []
    assert ids(api.get(RUNS, {"metadata.nothing": "x"})) == []
    assert api.get(RUNS, {"metadata.team": "billing"}).json()["count"] == 1


def test_runs_are_found_by_the_words_of_their_input_and_output(api):
    dogs = make(api, input="remember that my dogs are called Rex and Fido")
    sums = make(api, input="What is 12*7?")

    assert ids(api.get(RUNS, {"q": "dog"})) == [dogs["id"]]  # stemmed: dogs
    assert ids(api.get(RUNS, {"q": "Rex fido"})) == [dogs["id"]]  # every word, any case
    assert ids(api.get(RUNS, {"q": "rex cat"})) == []
    assert ids(api.get(RUNS, {"q": "84"})) == [sums["id"]]  # its output
    assert ids(api.get(RUNS, {"q": "84", "metadata.x": "1"})) == []


def test_runs_are_found_by_when_they_were_created(api):
    old, new = make(api), make(api)
    Run.objects.filter(pk=old["id"]).update(created_at=timezone.now() - timedelta(days=3))
    yesterday = (timezone.now() - timedelta(days=1)).date().isoformat()

    assert ids(api.get(RUNS, {"created_after": yesterday})) == [new["id"]]
    assert ids(api.get(RUNS, {"created_before": yesterday})) == [old["id"]]
    moment = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ids(api.get(RUNS, {"created_before": moment, "created_after": "2000-01-01"})) == [old["id"]]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"q": ""}, "q"),
        ({"q": "!!!"}, "q"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2026-12-03T09:30"}, "created_before"),  # a date-time needs its offset
        ({"metadata.bad key": "x"}, "metadata.bad key"),
    ],
)
def test_bad_search_parameters_are_a_400_naming_them(api, params, field):
    response = api.get(RUNS, params)

    assert response.status_code == 400
    assert field in response.json()


def test_each_search_uses_an_index(api):
    from agents.runs import search

    make(api, team="billing")
    for kind, wanted in (("metadata", {"team": "billing"}), ("words", None)):
        found = search.RunSearch(metadata=wanted or {}, q=None if wanted else "sum").apply(Run.objects.all())
        sql, params = found.query.sql_with_params()
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("EXPLAIN " + sql, params)
                plan = " ".join(row[0] for row in cursor.fetchall())
                index = "run_metadata_gin" if kind == "metadata" else "run_text_gin"
                assert index in plan, plan
            else:
                cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
                plan = " ".join(str(row[-1]) for row in cursor.fetchall())
                assert "VIRTUAL TABLE INDEX" in plan and "agents_run_fts" in plan, plan


def test_the_console_filters_runs_by_metadata_and_finds_them_by_words(api):
    from tests.conftest import make_user
    from tests.console.conftest import logged_in

    billing = make(api, input="remember that my dogs are called Rex", team="billing")
    other = make(api, team="support")
    staff = logged_in(make_user("rita", staff=True, reviewer=True))

    listing = staff.get("/admin/agents/run/").content.decode()
    by_team = staff.get("/admin/agents/run/", {"metadata": "team=billing"}).content.decode()
    by_words = staff.get("/admin/agents/run/", {"q": "dog"}).content.decode()

    assert "team=billing" in listing and "team=support" in listing  # the filter's choices
    assert billing["id"][:8] in by_team and other["id"][:8] not in by_team
    assert billing["id"][:8] in by_words and other["id"][:8] not in by_words  # stemmed, as ?q= finds it
