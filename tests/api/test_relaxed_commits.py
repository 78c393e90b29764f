"""Which unit commits may skip waiting for the database's flush (settings.AGENT_RELAXED_COMMITS): only those that a
model call follows. A tool's call, a pause and a run's end are stored for good before anything acts on them. The
insert of a run that this request drives on (sync, step) is one of them too: the model is called next, and the
request's last commit, which waits, makes it durable before the response names the run."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from agents.models import Run, Step
from agents.runs import persist
from tests.api.conftest import ARITHMETIC, create_run

pytestmark = pytest.mark.django_db
on_postgres = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's synchronous_commit")


@pytest.fixture
def relaxed(monkeypatch, settings, no_search_network):
    """The `relaxed` flag of each unit commit, in order."""
    settings.AGENT_RATE_LIMIT = "100000/m"
    seen: list[bool] = []
    real = persist.commit_unit

    def recording(*args, relaxed: bool = False, **kwargs):
        seen.append(relaxed)
        return real(*args, relaxed=relaxed, **kwargs)

    monkeypatch.setattr(persist, "commit_unit", recording)
    return seen


@pytest.fixture
def inserts(monkeypatch, settings, no_search_network):
    """The `relaxed` flag of each run insert, in order."""
    settings.AGENT_RATE_LIMIT = "100000/m"
    seen: list[bool] = []
    real = persist.insert_run

    def recording(run, *, relaxed: bool = False):
        seen.append(relaxed)
        return real(run, relaxed=relaxed)

    monkeypatch.setattr(persist, "insert_run", recording)
    return seen


def test_the_insert_of_a_run_this_request_drives_is_relaxed(api, inserts, relaxed):
    assert create_run(api, input=ARITHMETIC).json()["output"] == "85"
    assert inserts == [True] and relaxed[-1] is False  # the final answer waits, and with it the insert
    assert create_run(api, input=ARITHMETIC, mode="step").json()["status"] == "running"
    assert inserts == [True, True] and relaxed[-1] is False  # a step's one unit ends the request: it waits


def test_a_background_run_insert_waits_for_its_flush(api, inserts):
    assert create_run(api, input=ARITHMETIC, mode="background").status_code == 202
    assert inserts == [False]  # the 202 names the run at once: it is stored for good first


def test_no_insert_is_relaxed_when_turned_off(api, inserts, settings):
    settings.AGENT_RELAXED_COMMITS = False
    assert create_run(api, input=ARITHMETIC).json()["output"] == "85"
    assert inserts == [False]


def test_the_relaxed_insert_sets_it_for_its_own_transaction_only():
    relaxed, durable = persist._insert_run_relaxed_sql("postgresql"), persist._insert_run_sql("postgresql")
    assert relaxed == f"WITH i AS ({durable}) SELECT set_config('synchronous_commit', 'off', true)"
    assert "synchronous_commit" not in durable


def test_only_commits_that_a_model_call_follows_are_relaxed(api, relaxed):
    assert create_run(api, input=ARITHMETIC).json()["output"] == "85"
    assert relaxed == [True, True, False]  # two replies with their instant results, then the final answer


def test_a_reply_whose_tool_has_side_effects_waits_for_its_flush(api, relaxed):
    assert create_run(api, input="remember that the sky is green").status_code == 201
    assert relaxed == [False, True, False]  # the call before `remember` acts; its result; the final answer


def test_a_pause_waits_for_its_flush(api, relaxed):
    assert create_run(api, input="search python", mode="step").json()["status"] == "awaiting_approval"
    assert relaxed == [False, False]  # the reply asking for the search, then the pause for a reviewer


def test_every_commit_waits_when_turned_off(api, relaxed, settings):
    settings.AGENT_RELAXED_COMMITS = False
    assert create_run(api, input=ARITHMETIC).json()["output"] == "85"
    assert relaxed == [False, False, False]


def test_the_relaxed_statement_sets_it_for_its_own_transaction_only():
    relaxed, durable = persist._commit_sql("postgresql", 2, True, True), persist._commit_sql("postgresql", 2, True)
    assert "set_config('synchronous_commit', 'off', true)" in relaxed  # true: local to the transaction
    assert "synchronous_commit" not in durable


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_setting_ends_with_the_commit_and_the_steps_are_stored(api, relaxed, inserts):
    run = create_run(api, input=ARITHMETIC).json()
    assert relaxed == [True, True, False] and inserts == [True]
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # the connection's own setting is untouched
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"], dbname=settings["NAME"]
    ) as other:
        count = other.execute(f'SELECT count(*) FROM "{Step._meta.db_table}" WHERE run_id = %s', [run["id"]]).fetchone()
    assert count[0] == 5 and Run.objects.get(pk=run["id"]).status == "done"
