"""Threads (API.md v1.1): a run continues an earlier conversation; ownership, bounds, one run at a time, deletion."""

from __future__ import annotations

import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Run, Step, Thread
from agents.runs import persist
from tests.api.conftest import ARITHMETIC, RUNS, create_run, make_runs, run_count, run_url, spread_created_at
from tests.conftest import client_for, make_user, stored_run_fields

pytestmark = pytest.mark.django_db

THREADS = "/api/v1/threads"
THREAD_KEYS = {"id", "title", "metadata", "created_at", "updated_at", "run_count"}
THREAD_RUN_KEYS = {"id", "input", "output", "status", "stop_reason", "created_at"}


@pytest.fixture(autouse=True)
def _no_rate_limit(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"
    # django-ratelimit's switch: a window's first hit costs a statement more than later ones, which would blur the
    # statement counts compared here.
    settings.RATELIMIT_ENABLE = False


def new_thread(client, **body) -> dict:
    response = client.post(THREADS, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def in_thread(client, thread_id: str, text: str, **fields):
    return create_run(client, input=text, thread_id=thread_id, **fields)


# --- the thread resource ----------------------------------------------------------------------------------------


def test_create_list_detail_and_shape(api):
    thread = new_thread(api, title="Sums")
    assert set(thread) == THREAD_KEYS
    assert (thread["title"], thread["run_count"]) == ("Sums", 0)
    assert str(uuid.UUID(thread["id"])) == thread["id"]
    assert in_thread(api, thread["id"], ARITHMETIC).status_code == 201

    listed = api.get(THREADS).json()
    assert set(listed) == {"count", "next", "previous", "results"}
    assert listed["count"] == 1 and listed["results"][0]["run_count"] == 1
    detail = api.get(f"{THREADS}/{thread['id']}").json()
    assert set(detail) == THREAD_KEYS | {"summary", "summary_runs", "runs"}
    assert (detail["summary"], detail["summary_runs"]) == ("", 0)  # history "summarize" condenses a long thread
    assert [set(r) for r in detail["runs"]] == [THREAD_RUN_KEYS]
    assert detail["runs"][0]["output"] == "85"


def test_title_is_optional_and_comes_from_the_first_input(api):
    thread = new_thread(api)
    assert thread["title"] == ""
    in_thread(api, thread["id"], ARITHMETIC)
    in_thread(api, thread["id"], "now divide that by 5")
    assert api.get(f"{THREADS}/{thread['id']}").json()["title"] == ARITHMETIC


@pytest.mark.parametrize(
    ("body", "field"),
    [({"title": 5}, "title"), ({"title": "x" * 201}, "title"), ({"title": "a\x00b"}, "title")],
)
def test_a_bad_title_is_a_400_and_nothing_is_stored(api, body, field):
    response = api.post(THREADS, body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert Thread.objects.count() == 0


def test_the_list_is_most_recently_used_first(api):
    old = new_thread(api, title="old")
    new_thread(api, title="new")
    assert [t["title"] for t in api.get(THREADS).json()["results"]] == ["new", "old"]
    in_thread(api, old["id"], ARITHMETIC)  # using a thread moves it to the top
    assert [t["title"] for t in api.get(THREADS).json()["results"]] == ["old", "new"]
    page = api.get(THREADS, {"limit": 1, "offset": 1}).json()
    assert page["count"] == 2 and [t["title"] for t in page["results"]] == ["new"]


def test_the_detail_lists_runs_oldest_first(api, alice):
    thread = new_thread(api)
    for text in (ARITHMETIC, "now divide that by 5", "and add 2"):
        assert in_thread(api, thread["id"], text).status_code == 201
    runs = api.get(f"{THREADS}/{thread['id']}").json()["runs"]
    assert [r["input"] for r in runs] == [ARITHMETIC, "now divide that by 5", "and add 2"]
    assert [r["output"] for r in runs] == ["85", "17", "19"]


def test_another_users_thread_is_404_and_untouched(api, bob):
    thread = new_thread(api)
    in_thread(api, thread["id"], ARITHMETIC)
    other = client_for(bob)
    assert other.get(f"{THREADS}/{thread['id']}").status_code == 404
    assert other.delete(f"{THREADS}/{thread['id']}").status_code == 404
    assert other.get(THREADS).json()["count"] == 0
    assert Thread.objects.filter(pk=thread["id"]).exists() and run_count() == 1


def test_a_malformed_or_unknown_id_is_404(api):
    assert api.get(f"{THREADS}/not-a-uuid").status_code == 404
    assert api.get(f"{THREADS}/{uuid.uuid4()}").status_code == 404


def test_anonymous_is_401(db):
    from rest_framework.test import APIClient

    response = APIClient().get(THREADS)
    assert response.status_code == 401 and "WWW-Authenticate" in response


def test_a_reviewer_sees_every_thread_but_cannot_add_runs_to_one(api, reviewer):
    thread = new_thread(api)
    staff = client_for(reviewer)
    assert staff.get(f"{THREADS}/{thread['id']}").status_code == 200
    response = in_thread(staff, thread["id"], ARITHMETIC)
    assert response.status_code == 400 and "thread_id" in response.json()
    assert run_count() == 0


def test_deleting_a_thread_deletes_its_runs_and_steps_only(api, alice):
    thread = new_thread(api)
    in_thread(api, thread["id"], ARITHMETIC)
    in_thread(api, thread["id"], "now divide that by 5")
    outside = create_run(api).json()
    assert Step.objects.filter(run__thread_id=thread["id"]).count() > 0

    assert api.delete(f"{THREADS}/{thread['id']}").status_code == 204
    assert not Thread.objects.filter(pk=thread["id"]).exists()
    assert list(Run.objects.values_list("id", flat=True)) == [uuid.UUID(outside["id"])]
    assert Step.objects.filter(run__thread_id=thread["id"]).count() == 0
    assert Step.objects.filter(run_id=outside["id"]).count() == 5
    assert api.get(f"{THREADS}/{thread['id']}").status_code == 404


# --- runs on a thread -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_three_run_conversation_with_the_demo_model(api, protocol):
    thread = new_thread(api)
    answers = []
    for text in (ARITHMETIC, "now divide that by 5", "and add 2"):
        body = in_thread(api, thread["id"], text, protocol=protocol).json()
        assert body["thread_id"] == thread["id"]
        answers.append(body["output"])
    assert answers == ["85", "17", "19"]
    # Without the thread the follow-up means nothing to the model.
    alone = create_run(api, input="and add 2", protocol=protocol).json()
    assert alone["thread_id"] is None and alone["output"] != "87"


def test_the_run_stores_the_history_its_model_saw(api):
    thread = new_thread(api)
    first = in_thread(api, thread["id"], ARITHMETIC).json()
    second = in_thread(api, thread["id"], "now divide that by 5").json()
    assert Run.objects.get(pk=first["id"]).history == []
    assert Run.objects.get(pk=second["id"]).history == [
        {"input": ARITHMETIC, "output": "85", "stop_reason": "final_answer"}
    ]
    # Deleting an earlier run later does not rewrite what the second run saw.
    api.delete(run_url(first["id"]))
    assert Run.objects.get(pk=second["id"]).history[0]["output"] == "85"


def test_a_run_that_stopped_without_an_answer_is_history_with_its_stop_reason(api):
    thread = new_thread(api)
    stopped = in_thread(api, thread["id"], ARITHMETIC, max_turns=1).json()
    assert stopped["stop_reason"] == "max_turns"
    follow = in_thread(api, thread["id"], "hello").json()
    assert Run.objects.get(pk=follow["id"]).history == [
        {"input": ARITHMETIC, "output": None, "stop_reason": "max_turns"}
    ]


@pytest.mark.parametrize(
    ("thread_id", "why"),
    [("not-a-uuid", "malformed"), (5, "a number"), ("c3a8f0d2-5e71-4b96-9d24-81f6e0b7a5c3", "unknown")],
)
def test_a_bad_thread_id_is_400_and_stores_nothing(api, thread_id, why):
    response = create_run(api, thread_id=thread_id)
    assert response.status_code == 400, why
    assert "thread_id" in response.json()
    assert run_count() == 0


def test_a_foreign_thread_id_is_400_and_the_thread_is_untouched(api, bob):
    thread = new_thread(client_for(bob))
    response = create_run(api, thread_id=thread["id"])
    assert response.status_code == 400
    assert response.json() == {"thread_id": ["No thread with this id."]}  # the same answer as for an unknown id
    assert run_count() == 0
    assert Thread.objects.get(pk=thread["id"]).title == ""


def test_a_thread_runs_one_run_at_a_time(api):
    thread = new_thread(api)
    paused = in_thread(api, thread["id"], ARITHMETIC, mode="step").json()
    assert paused["status"] == "running"
    response = in_thread(api, thread["id"], "and add 2")
    assert response.status_code == 409
    assert "running" in response.json()["detail"]
    assert run_count() == 1
    # Once it is done (here: cancelled), the thread takes the next run.
    assert api.post(run_url(paused["id"], "cancel")).status_code == 200
    assert in_thread(api, thread["id"], "hello").status_code == 201


def test_a_queued_background_run_also_holds_the_thread(api):
    thread = new_thread(api)
    assert in_thread(api, thread["id"], ARITHMETIC, mode="background").status_code == 202
    assert in_thread(api, thread["id"], "and add 2", mode="background").status_code == 409
    assert run_count() == 1


def test_the_database_refuses_a_second_active_run_on_a_thread(alice):
    """Enforced by a partial unique index, not only checked: two inserts that both passed the check."""
    thread = Thread.objects.create(owner=alice)
    now = timezone.now()
    active = stored_run_fields(status="running", stop_reason=None, output=None, created_at=now, updated_at=now)
    first, second = (Run(owner=alice, thread=thread, **active) for _ in range(2))
    persist.insert_run(first)
    with pytest.raises(IntegrityError), transaction.atomic():
        persist.insert_run(second)
    # A done run does not count: a thread keeps any number of finished runs.
    make_runs(alice, 3, thread=thread)
    assert Run.objects.filter(thread=thread).count() == 4


def test_history_is_bounded_by_runs(api, settings):
    settings.AGENT_THREAD_HISTORY_RUNS = 2
    thread = new_thread(api)
    for i in range(4):
        assert in_thread(api, thread["id"], f"remember that fact {i}").status_code == 201
    last = in_thread(api, thread["id"], "what do you remember about fact?").json()
    history = Run.objects.get(pk=last["id"]).history
    assert [t["input"] for t in history] == ["remember that fact 2", "remember that fact 3"]


def test_history_is_bounded_by_characters_and_never_drops_the_new_input(api, settings, alice):
    settings.AGENT_THREAD_HISTORY_CHARS = 120
    thread = Thread.objects.create(owner=alice)
    runs = make_runs(alice, 3, thread=thread, input="y" * 50, output="z" * 10)
    spread_created_at(runs)
    Run.objects.filter(pk=runs[-1].pk).update(input="newest")
    big_input = "What is 1+1? " + "w" * 500  # longer than the whole budget: still sent in full
    response = in_thread(api, str(thread.pk), big_input)
    assert response.status_code == 201
    run = Run.objects.get(pk=response.json()["id"])
    assert [t["input"] for t in run.history] == ["y" * 50, "newest"]  # 60 + 16 chars fit; a third (60) would not
    assert run.input == big_input


def test_memory_is_per_user_across_threads(api):
    one, two = new_thread(api), new_thread(api)
    assert in_thread(api, one["id"], "remember that the sky is green").status_code == 201
    answer = in_thread(api, two["id"], "what do you remember about the sky?").json()
    assert "green" in answer["output"]


def test_the_seed_route_refuses_thread_id(api, alice):
    thread = Thread.objects.create(owner=alice)
    response = api.post("/v1/agent/runs", {"input": ARITHMETIC, "thread_id": str(thread.pk)}, format="json")
    assert response.status_code == 400
    assert response.json()["thread_id"][0].startswith("Unknown field.")
    assert not Run.objects.exists()


def test_idempotency_replays_a_thread_run(api):
    thread = new_thread(api)
    key = {"Idempotency-Key": "thread-run-1"}
    first = api.post(RUNS, {"input": ARITHMETIC, "thread_id": thread["id"]}, format="json", headers=key)
    again = api.post(RUNS, {"input": ARITHMETIC, "thread_id": thread["id"]}, format="json", headers=key)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["id"] == first.json()["id"] and run_count() == 1


# --- query counts: no N+1 however long the thread ---------------------------------------------------------------


def _statements(call) -> int:
    with CaptureQueriesContext(connection) as ctx:
        call()
    return len(ctx.captured_queries)


def test_reading_the_history_costs_the_same_for_1_or_15_earlier_runs(api, alice):
    short, long = Thread.objects.create(owner=alice), Thread.objects.create(owner=alice)
    make_runs(alice, 1, thread=short)
    make_runs(alice, 15, thread=long)
    counts = [_statements(lambda t=t: in_thread(api, str(t.pk), ARITHMETIC)) for t in (short, long)]
    assert counts[0] == counts[1], counts
    assert Run.objects.get(thread=long, input=ARITHMETIC).history.__len__() == 15


def test_thread_list_and_detail_have_fixed_query_counts(api, alice):
    thread = Thread.objects.create(owner=alice)
    make_runs(alice, 2, thread=thread)
    few = (_statements(lambda: api.get(THREADS)), _statements(lambda: api.get(f"{THREADS}/{thread.pk}")))
    for _ in range(5):
        make_runs(alice, 3, thread=Thread.objects.create(owner=alice))
    make_runs(alice, 10, thread=thread)
    many = (_statements(lambda: api.get(THREADS)), _statements(lambda: api.get(f"{THREADS}/{thread.pk}")))
    assert few == many, (few, many)


def test_a_user_with_no_threads(db):
    user = make_user("nobody")
    assert client_for(user).get(THREADS).json() == {"count": 0, "next": None, "previous": None, "results": []}
