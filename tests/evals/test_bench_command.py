"""`manage.py bench`: the figures it prints (never how fast they are), its cleanup and its argument checks."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import connection

from memory.models import Fact
from tests.evals.conftest import command

FAST = "parser,calculator,engine"


def test_parser_calculator_engine_as_json():
    data = json.loads(command("bench", "--only", FAST, "--json"))

    assert data["database"] == connection.vendor
    rows = {r["figure"]: r for r in data["rows"]}
    assert list(rows) == [
        "parser, Action reply",
        "parser, Final Answer reply",
        "calculator",
        "engine overhead per step",
    ]
    assert {f: r["unit"] for f, r in rows.items()} == {
        "parser, Action reply": "parses/s",
        "parser, Final Answer reply": "parses/s",
        "calculator": "calls/s",
        "engine overhead per step": "µs",
    }
    assert all(set(r) == {"figure", "value", "unit", "work", "seed"} for r in data["rows"])
    assert all(isinstance(r["value"], float) and r["value"] > 0 for r in data["rows"])
    assert all(r["work"] for r in data["rows"])
    assert [rows[f]["seed"] for f in ("parser, Action reply", "parser, Final Answer reply", "calculator")] == [
        "~500k/s",
        "~1.16M/s",
        "~85k/s",
    ]
    assert rows["engine overhead per step"]["seed"] == ""


def test_the_text_table():
    lines = command("bench", "--only", "engine").splitlines()
    assert lines[0] == f"database: {connection.vendor}"
    assert lines[1].split() == ["figure", "value", "unit", "work", "measured", "seed", "project"]
    assert set(lines[2]) == {"-", " "}
    assert len(lines) == 4 and lines[3].startswith("engine overhead per step") and "µs" in lines[3]


@pytest.mark.django_db
def test_memory_on_the_test_database_cleans_up():
    users_before = get_user_model().objects.count()
    data = json.loads(command("bench", "--only", "memory", "--sizes", "50,100", "--queries", "5", "--json"))

    figures = [r["figure"] for r in data["rows"]]
    assert figures == [
        "memory recall p50 @ 50 facts",
        "memory recall p95 @ 50 facts",
        "memory recall p50 @ 100 facts",
        "memory recall p95 @ 100 facts",
    ]
    assert all(r["unit"] == "ms" and r["value"] > 0 and "5 two-word queries" in r["work"] for r in data["rows"])
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()
    assert get_user_model().objects.count() == users_before
    assert Fact.objects.count() == 0


@pytest.mark.django_db
def test_memory_with_a_single_query_or_fact():
    data = json.loads(command("bench", "--only", "memory", "--sizes", "1,3", "--queries", "1", "--json"))
    assert [r["figure"] for r in data["rows"]][::2] == ["memory recall p50 @ 1 facts", "memory recall p50 @ 3 facts"]
    assert all(r["value"] > 0 for r in data["rows"])
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.django_db
def test_persisted_cleans_up():
    data = json.loads(command("bench", "--only", "persisted", "--json"))
    (row,) = data["rows"]
    assert (row["figure"], row["unit"]) == ("persisted overhead per step", "ms") and row["value"] > 0
    assert connection.vendor in row["work"]
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "bogus"], "Unknown section(s): bogus"),
        (["--only", "parser,bogus,nope"], "Unknown section(s): bogus, nope"),
        (["--sizes", "x"], "--sizes takes comma-separated whole numbers"),
        (["--only", "memory", "--sizes", "10,x"], "--sizes takes comma-separated whole numbers"),
        (["--only", "memory", "--sizes", "0"], "must be at least 1"),
        (["--only", "memory", "--queries", "0"], "must be at least 1"),
        (["--only", "http", "--http-runs", "0"], "must be at least 1"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_bad_arguments_exit_2(args, message):
    with pytest.raises(CommandError) as exc:
        command("bench", *args)
    assert exc.value.returncode == 2
    assert message in str(exc.value)


@pytest.mark.django_db(transaction=True)
def test_http_through_gunicorn(monkeypatch):
    """The one bench section that starts processes: gunicorn (on the test database) and the instant model server."""
    from tests.integration._support import db_url

    monkeypatch.setenv("DATABASE_URL", db_url())  # the gunicorn under test inherits the environment
    data = json.loads(command("bench", "--only", "http", "--http-runs", "2", "--json"))

    assert [(r["figure"], r["unit"]) for r in data["rows"]] == [
        (f"HTTP {what} @ c={c}", unit)
        for c in (1, 8)
        for what, unit in (("runs/s", "runs/s"), ("run p50", "ms"), ("run p95", "ms"))
    ]
    assert all(r["value"] > 0 for r in data["rows"])
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()
