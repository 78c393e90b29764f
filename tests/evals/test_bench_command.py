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
def test_recall_measures_quality_cost_and_latency_per_mode_and_cleans_up():
    from memory import vectors

    modes = ["text", "semantic", "hybrid"] if vectors.available() else ["text"]
    data = json.loads(command("bench", "--only", "recall", "--sizes", "20", "--queries", "3", "--json"))
    rows = {r["figure"]: r for r in data["rows"]}
    quality = [f for f in rows if f.startswith("recall@")]
    # @1 and @3, over all / no shared keyword / shared keyword / the half fusion was tuned on / the held-out half
    assert len(quality) == 10 * len(modes)
    halves = ("tuned-on half (even)", "held-out half (odd)")
    assert {f"recall@3 {m}, {half}" for m in modes for half in halves} <= set(rows)
    assert all(rows[f]["unit"] == "%" and 0 <= rows[f]["value"] <= 100 for f in quality)
    assert rows["recall@3 text, shared keyword"]["value"] > 50  # full-text search finds words (a broken one would not)
    if "semantic" in modes:  # meaning finds what words cannot
        assert rows["recall@3 semantic, no shared keyword"]["value"] > rows["recall@3 text, no shared keyword"]["value"]
    assert {"remember with vectors p50", "remember without vectors p50", "remember: vectors add (p50)"} <= set(rows)
    assert [f for f in rows if " @ " in f] == [f"recall {m} {p} @ 20 facts" for m in modes for p in ("p50", "p95")]
    assert all(rows[f]["value"] > 0 for f in rows if " @ " in f)
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()
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
        (["--only", "latency", "--latency-clients", "0"], "must be at least 1"),
        (["--only", "latency", "--latency-clients", "4,x"], "--latency-clients takes comma-separated whole numbers"),
        (["--only", "latency", "--latency-seconds", "0"], "--latency-seconds must be more than 0"),
        (["--only", "latency", "--model-delay-ms", "-1"], "--model-delay-ms must be between 0 and 60000"),
        (["--only", "prune", "--prune-runs", "0"], "must be at least 1"),
        (["--only", "background", "--background-runs", "0"], "must be at least 1"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_bad_arguments_exit_2(args, message):
    with pytest.raises(CommandError) as exc:
        command("bench", *args)
    assert exc.value.returncode == 2
    assert message in str(exc.value)


def _usage_figures(prefix: str, server: str = "server") -> list[tuple[str, str]]:
    """The server CPU, memory and (on PostgreSQL) database CPU rows a level of the http or latency section ends with."""
    rows = [(prefix.format(f"{server} CPU"), "ms/run"), (prefix.format(f"{server} peak RSS"), "MB")]
    if connection.vendor == "postgresql":  # the test database is always local
        rows.append((prefix.format("+ PostgreSQL CPU"), "ms/run"))
    return rows


@pytest.mark.django_db(transaction=True)
def test_http_through_gunicorn(monkeypatch):
    """The http section starts processes: gunicorn (on the test database) and the instant model server."""
    from tests.integration._support import db_url

    monkeypatch.setenv("DATABASE_URL", db_url())  # the gunicorn under test inherits the environment
    # 10 runs: a run costs ~7 ms of server CPU and the clock ticks every 10 ms, so 2 runs could read as zero
    data = json.loads(command("bench", "--only", "http", "--http-runs", "10", "--json"))

    expected = []
    for c in (1, 8):
        expected += [(f"HTTP runs/s @ c={c}", "runs/s")]
        expected += [(f"HTTP run p50 @ c={c}", "ms"), (f"HTTP run p95 @ c={c}", "ms")]
        expected += _usage_figures(f"HTTP {{}} @ c={c}")
    assert [(r["figure"], r["unit"]) for r in data["rows"]] == expected
    rows = {r["figure"]: r for r in data["rows"]}
    # PostgreSQL's share of a few runs can stay under one 10 ms clock tick; everything else is well above zero.
    assert {f: r["value"] for f, r in rows.items() if r["value"] <= 0 and "PostgreSQL" not in f} == {}
    assert all(rows[f"HTTP server peak RSS @ c={c}"]["value"] > 20 for c in (1, 8))  # master + 2 Django workers
    # the worker class gunicorn reported: the default, gunicorn's gevent worker as reactsite/serving/gunicorn_worker.py
    # has it
    assert "gunicorn (reactsite.serving.gunicorn_worker.GeventWorker)" in rows["HTTP runs/s @ c=1"]["work"]
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.django_db(transaction=True)
def test_latency_through_gunicorn(monkeypatch):
    """The latency section: a closed loop of clients against a model that takes its time."""
    from tests.integration._support import db_url

    monkeypatch.setenv("DATABASE_URL", db_url())
    args = ("--latency-clients", "4", "--latency-seconds", "1", "--model-delay-ms", "50")
    data = json.loads(command("bench", "--only", "latency", *args, "--json"))

    prefix = "http, 50 ms model, {} @ c=4"
    assert [(r["figure"], r["unit"]) for r in data["rows"]] == [
        (prefix.format("runs/s"), "runs/s"),
        (prefix.format("run p50"), "ms"),
        (prefix.format("run p99"), "ms"),
        (prefix.format("errors"), "requests"),
        *_usage_figures(prefix),
    ]
    value = {r["figure"]: r["value"] for r in data["rows"]}
    assert value.pop(prefix.format("errors")) == 0
    assert all(v > 0 for v in value.values())
    assert value[prefix.format("run p50")] >= 3 * 50  # three model calls per run, each after 50 ms
    assert value[prefix.format("run p99")] >= value[prefix.format("run p50")]
    assert value[prefix.format("server peak RSS")] > 20
    assert "4 clients back to back for 1 s" in data["rows"][0]["work"]
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.django_db(transaction=True)
def test_latency_model_delay_sets_the_run_time(monkeypatch):
    """With 300 ms per model call a three-call run takes at least 900 ms, far above an instant model's run."""
    from tests.integration._support import db_url

    monkeypatch.setenv("DATABASE_URL", db_url())
    args = ("--latency-clients", "2,3", "--latency-seconds", "1.5", "--model-delay-ms", "300")
    rows = json.loads(command("bench", "--only", "latency", *args, "--json"))["rows"]

    p50 = {r["figure"]: r["value"] for r in rows if " run p50 " in r["figure"]}
    assert list(p50) == ["http, 300 ms model, run p50 @ c=2", "http, 300 ms model, run p50 @ c=3"]
    assert all(v >= 900 for v in p50.values())


def test_the_processes_under_test_run_as_in_production(tmp_path):
    """A checkout's .env has DEBUG=1 (every query timed and logged, and on SQLite an extra statement per query): the
    bench's gunicorn and run_worker get DEBUG off, with a secret of their own that production settings accept."""
    import os
    import subprocess
    import sys

    from agents.management.commands.bench import _http_env

    env_file = tmp_path / ".env"
    env_file.write_text("DEBUG=1\nSECRET_KEY=dev-a-development-key\n")
    env = {**os.environ, "REACTSITE_ENV_FILE": str(env_file), **_http_env("http://127.0.0.1:9/v1")}
    code = "import django; django.setup(); from django.conf import settings as s; print(s.DEBUG, len(s.SECRET_KEY))"
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**env, "DJANGO_SETTINGS_MODULE": "reactsite.settings"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    debug, key_length = proc.stdout.split()
    assert (debug, int(key_length) >= 50) == ("False", True)
    assert _http_env("x")["SECRET_KEY"] not in proc.stdout + proc.stderr


@pytest.mark.django_db(transaction=True)
def test_background_section_drives_queued_runs_with_one_worker(monkeypatch):
    """The background section: runs queued at once, then one run_worker process (on the test database) drives them."""
    from django_tasks_db.models import DBTaskResult

    from agents.models import Run
    from tests.integration._support import db_url

    monkeypatch.setenv("DATABASE_URL", db_url())  # the worker inherits the environment
    args = ("--background-runs", "12", "--model-delay-ms", "50")
    data = json.loads(command("bench", "--only", "background", *args, "--json"))

    name = "background, 50 ms model, {}"
    assert [(r["figure"], r["unit"]) for r in data["rows"]] == [
        (name.format("12 runs queued in"), "s"),
        (name.format("worker start-up"), "s"),
        (name.format("12 runs done in"), "s"),
        *_usage_figures(name, server="worker"),
    ]
    value = {r["figure"]: r["value"] for r in data["rows"]}
    assert all(v > 0 for f, v in value.items() if "PostgreSQL" not in f)
    # three model calls of 50 ms each, after the worker has started
    assert value[name.format("12 runs done in")] >= value[name.format("worker start-up")] + 3 * 0.05
    assert "one run_worker process (--concurrency 200)" in data["rows"][2]["work"]
    assert not Run.objects.exists() and not DBTaskResult.objects.exists()  # runs, tasks and the user are gone
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.django_db(transaction=True)
def test_background_section_leaves_a_busy_queue_alone():
    """Its worker would take other tasks too: with any task waiting, it refuses and touches nothing."""
    import uuid

    from django_tasks_db.models import DBTaskResult

    from agents.tasks import advance_in_background

    advance_in_background.enqueue(str(uuid.uuid4()))
    with pytest.raises(CommandError, match=r"1 task\(s\) already wait in this database's queue"):
        command("bench", "--only", "background", "--background-runs", "3")
    assert list(DBTaskResult.objects.values_list("status", flat=True)) == ["READY"]
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.django_db
def test_prune_section_reports_its_rate_and_cleans_up():
    from agents.models import Run

    data = json.loads(command("bench", "--only", "prune", "--prune-runs", "120", "--json"))
    rows = {r["figure"]: r for r in data["rows"]}
    assert rows["prune rows/s"]["value"] > rows["prune runs/s"]["value"] > 0
    assert "120 runs + 360 steps" in rows["prune rows/s"]["work"]
    assert not Run.objects.exists()  # the prune itself deleted every bench run
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.django_db
def test_prune_section_never_touches_other_users_runs():
    from datetime import timedelta

    from agents.models import Run
    from tests.conftest import make_user, stored_run_fields

    kept = Run.objects.create(owner=make_user("keeper"), **stored_run_fields(input="old"))
    Run.objects.filter(pk=kept.pk).update(created_at=kept.created_at - timedelta(days=400))
    command("bench", "--only", "prune", "--prune-runs", "5", "--json")
    assert Run.objects.filter(pk=kept.pk).exists()
