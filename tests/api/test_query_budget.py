"""Query budgets of the hot endpoints, pinned exactly (issue 12): a regression (an N+1, a read-back, a second
cancellation check) fails CI instead of creeping in. Counts are of statements sent while serving the request.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from memory import services as memory
from tests.api.conftest import ARITHMETIC, RUNS, create_run, make_runs, run_url
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

# One per request: the token look-up (with its user). The rate limit on routes that may call a model is
# django-ratelimit's cache.add then cache.incr (agents/usage/ratelimit.py), no SQL with REDIS_URL (Redis round trips).
# On the
# database cache (reactsite/serving/cache.py, in a test's transaction): a window's first hit looks the key up and runs
# Django's add (savepoint, count, look-up, insert, release); a later hit looks it up, then the incr writes the value
# read plus one where the entry still holds it (a compare-and-set UPDATE).
AUTH = 1
RATE_LIMIT, RATE_LIMIT_AGAIN = (0, 0) if settings.REDIS_URL else (6, 2)
# A unit's commit (update the held run, append its steps): one statement, on PostgreSQL a data-modifying CTE, on
# SQLite an INSERT into the connection's commit view, whose trigger does both (agents/runs/persist.py).
COMMIT = 1
# A run that finishes tells its owner's webhooks, after the commit (agents/notifications/notify.py). Whether the owner
# has any came
# with the API token's look-up, so a user without webhooks costs no read at all (one indexed read otherwise). The
# tests run inside a transaction, so `committed` runs what waited for its commit, as in production.
NOTIFY = 0


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def quiet(settings, no_search_network):
    settings.AGENT_RATE_LIMIT = "100000/m"
    return no_search_network


def test_creating_a_three_turn_sync_run(api, quiet, committed, django_assert_num_queries):
    # insert (held) + 3 commits: reply 1 with its calculator result, reply 2 with its result (the calculator is an
    # instant tool: agents/engine/plan.py), the final reply (lease released)
    with django_assert_num_queries(AUTH + RATE_LIMIT + 1 + 3 * COMMIT + NOTIFY), committed() as callbacks:
        response = create_run(api)
    assert len(callbacks) == 1  # the run.done announcement, run after the commit
    assert response.status_code == 201
    assert response.json()["output"] == "85"


def test_a_step_mode_advance(api, quiet, django_assert_num_queries):
    run = create_run(api, mode="step").json()
    # read the run, claim it (the claim's UPDATE returns the run as claimed), read its steps, commit the reply with its
    # calculator result (lease released)
    with django_assert_num_queries(AUTH + RATE_LIMIT_AGAIN + 1 + 1 + 1 + COMMIT):  # create_run counted first
        response = api.post(run_url(run["id"], "advance"), {}, format="json")
    assert response.status_code == 200 and response.json()["turns"] == 2


def test_a_background_runs_first_take(api, quiet, committed, django_assert_num_queries):
    """The worker's share of a queued run (without the task queue's own statements, which are django-tasks-db's):
    read its timeout, then claim it with its budget starting now in an UPDATE that returns it together with its owner's
    quota override and whether the owner has webhooks (no steps to read yet: no unit has committed), then the three
    commits. The owner has no webhooks, so the announcement reads nothing."""
    from agents.runs import drive

    run = create_run(api, mode="background").json()
    with django_assert_num_queries(2 + 3 * COMMIT + NOTIFY), committed() as callbacks:
        assert drive.run_background(run_id=run["id"]) == "done"
    assert len(callbacks) == 1  # the run.done announcement, after the commit


def test_a_tool_that_is_not_instant_runs_after_its_reply_is_committed(api, quiet, committed):
    """`remember` writes, so the reply that asks for it is committed before it runs (two commits for that unit), where
    the calculator's result is stored with its reply (above)."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx, committed():
        response = create_run(api, input="remember that the sky is green")
    assert response.status_code == 201 and response.json()["output"]
    sql = [q["sql"] for q in ctx.captured_queries]
    step_writes = [
        i for i, q in enumerate(sql) if 'INSERT INTO "agents_step"' in q or "INSERT INTO reactsite_unit" in q
    ]
    fact_write = next(i for i, q in enumerate(sql) if 'INSERT INTO "memory_fact"' in q)
    assert len(step_writes) == 3  # the reply, the tool's result, the final reply: one commit each
    assert step_writes[0] < fact_write < step_writes[1]


def test_an_approval_decision(api, quiet, reviewer, django_assert_num_queries):
    run = create_run(api, input="search python", mode="step").json()
    assert run["status"] == "awaiting_approval"
    staff = client_for(reviewer)
    # the view's look-up, the reviewer's permissions (2), the owner's quota (the reviewer is not the owner: their
    # facts did not come with the token), the service's read, the claim (which returns the run with its owner's
    # facts), its steps, then two commits: the decision (stored before any tool runs), then the rest of the unit (a
    # denial: the run row only)
    with django_assert_num_queries(AUTH + RATE_LIMIT + 1 + 2 + 1 + 1 + 1 + 1 + COMMIT + 1):
        response = staff.post(run_url(run["id"], "advance"), {"approval": False}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "running"


def test_a_runs_detail(api, quiet, django_assert_num_queries):
    run = create_run(api).json()
    with django_assert_num_queries(AUTH + 3):  # the run, its steps, its scores
        response = api.get(run_url(run["id"]))
    assert len(response.json()["steps"]) == 5


def test_the_run_list_at_50_rows(api, alice, django_assert_num_queries):
    make_runs(alice, 49)
    make_runs(alice, 1, status="awaiting_approval", stop_reason=None, output=None)
    with django_assert_num_queries(AUTH + 3):  # count, page, the paused runs' steps
        response = api.get(RUNS, {"limit": 50})
    assert len(response.json()["results"]) == 50


def test_an_event_stream_replay(api, quiet, django_assert_num_queries):
    run = create_run(api).json()
    response = api.get(run_url(run["id"], "events"))
    with django_assert_num_queries(2):  # the run, its steps (the view's own look-up ran before streaming)
        body = b"".join(response.streaming_content).decode()
    assert body.count("event: step") == 5 and "event: done" in body


def test_the_memory_list(api, alice, django_assert_num_queries):
    for i in range(30):
        memory.remember(alice, f"fact number {i}")
    with django_assert_num_queries(AUTH + 2):  # count, page
        response = api.get("/api/v1/memory/facts", {"limit": 20})
    assert len(response.json()["results"]) == 20


def test_memory_recall(api, alice, django_assert_num_queries):
    for i in range(30):
        memory.remember(alice, f"the user likes colour {i}")
    with django_assert_num_queries(AUTH + 3):  # count, ranked ids, their rows
        response = api.get("/api/v1/memory/facts", {"q": "colour", "mode": "text"})
    assert response.json()["count"] == 30


def test_memory_recall_by_meaning_and_words(api, alice, django_assert_num_queries):
    from memory import vectors

    if not vectors.available():
        pytest.skip("this database has no vector index (PostgreSQL without pgvector)")
    for i in range(30):
        memory.remember(alice, f"the user likes colour {i}")
    api.get("/api/v1/memory/facts", {"q": "colour"})  # the connection learns its vector index once
    # ranked once for the count and the page. SQLite: the vector shortlist, its vectors, the ids by words, then the
    # page's rows. PostgreSQL with pgvector: the shortlist in a transaction of its own, for its SET LOCALs (here a
    # savepoint, the settings, the query, its release), the ids by words with their similarities, the page's rows.
    ranked = 6 if connection.vendor == "postgresql" else 4
    with django_assert_num_queries(AUTH + ranked):
        response = api.get("/api/v1/memory/facts", {"q": "colour", "mode": "hybrid"})
    assert response.json()["count"] == 30


def test_a_sync_run_costs_at_most_14_statements(api, quiet, committed):
    """The issue's budget, on whichever database this suite runs on (SQLite or PostgreSQL), announcement included."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx, committed():
        assert create_run(api, input=ARITHMETIC).status_code == 201
    assert len(ctx.captured_queries) <= 14, [q["sql"][:80] for q in ctx.captured_queries]


def test_a_user_with_a_webhook_costs_one_read_more(api, alice, quiet, committed, django_assert_num_queries):
    from agents.models import Webhook

    Webhook.objects.create(owner=alice, url="https://example.org/hook", events=["run.awaiting_approval"], secret="s")
    # the same run as above, plus the owner's webhooks read once (none wants run.done: nothing else is written)
    with django_assert_num_queries(AUTH + RATE_LIMIT + 1 + 3 * COMMIT + 1), committed():
        assert create_run(api).status_code == 201


def test_nothing_else_is_read_back(api, quiet, committed):
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx, committed():
        create_run(api)
    cache = settings.CACHES["default"].get("LOCATION")  # the rate limit's counters, not the run's rows
    reads = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("SELECT") and cache not in q["sql"]]
    # the run and its steps are never read back (the response is built in memory); the webhook look-up is no read-back
    assert len(reads) == AUTH + NOTIFY, reads
    assert "agents_webhook" in reads[-1]
