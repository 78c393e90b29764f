"""`manage.py bench --only advance` (issue 36): the figures it names, the runs it drives, its cleanup and its checks
(never how fast an advance is)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import connection

from agents.models import Run, Step
from agents.runs import review
from bench import advance as bench_advance
from tests.evals.conftest import command


def _figures(window: int) -> list[str]:
    return [
        f"advance, first {window} p50",
        f"advance, last {window} p50",
        f"advance, last {window} / first {window}",
        f"advance, last {window} / first {window}, per run",
        "advance, steps read at the last",
        "advance, growth per step read",
    ]


@pytest.fixture
def advances(monkeypatch):
    """Every review.advance_run the bench makes: (run id, the run's status after it)."""
    made = []
    real = review.advance_run

    def spy(**kwargs):
        run = real(**kwargs)
        made.append((run.pk, run.status))
        return run

    monkeypatch.setattr(review, "advance_run", spy)
    return made


@pytest.mark.django_db
def test_a_short_run_names_its_figures_advances_through_the_service_and_cleans_up(advances):
    users, runs, steps = get_user_model().objects.count(), Run.objects.count(), Step.objects.count()

    data = json.loads(command("bench", "--only", "advance", "--advance-turns", "6", "--advance-runs", "2", "--json"))

    assert data["database"] == connection.vendor
    rows = {r["figure"]: r for r in data["rows"]}
    assert list(rows) == _figures(2)  # 5 advances a run: the first 2 against the last 2, never overlapping
    assert [r["unit"] for r in data["rows"]] == ["ms", "ms", "×", "×", "steps", "µs"]
    assert all(r["value"] > 0 for r in data["rows"][:4])
    assert rows["advance, steps read at the last"]["value"] == 10  # 5 turns of a reply and a tool result each
    assert rows["advance, last 2 / first 2"]["value"] == pytest.approx(
        rows["advance, last 2 p50"]["value"] / rows["advance, first 2 p50"]["value"]
    )
    assert "2 step runs of 6 turns" in rows["advance, first 2 p50"]["work"]
    assert connection.vendor in rows["advance, first 2 p50"]["work"]
    assert "9 against 3" in rows["advance, growth per step read"]["work"]  # steps read: 8, 10 against 2, 4

    # A warm-up run of 6 turns, then 2 timed runs: 5 advances each, every one through the service; each run ends
    # with its last advance, none before.
    per_run: dict = {}
    for pk, status in advances:
        per_run.setdefault(pk, []).append(status)
    assert [len(s) for s in per_run.values()] == [5, 5, 5]
    assert all(s == ["running"] * 4 + ["done"] for s in per_run.values())

    assert not get_user_model().objects.filter(username__startswith="bench-").exists()
    assert (get_user_model().objects.count(), Run.objects.count(), Step.objects.count()) == (users, runs, steps)
    assert not Run.objects.filter(pk__in=list(per_run)).exists()


@pytest.mark.django_db
def test_by_default_a_run_has_50_turns_and_the_table_shows_the_figures(advances):
    out = command("bench", "--only", "advance", "--advance-runs", "1")

    lines = out.splitlines()
    assert lines[0] == f"database: {connection.vendor}"
    assert [line.split("  ")[0] for line in lines[3:]] == _figures(5)
    steps = next(line for line in lines if line.startswith("advance, steps read at the last"))
    assert steps.split()[6:8] == ["98", "steps"]  # 49 turns of two steps before the last advance
    assert len(advances) == 7 + 49  # the warm-up's 8 turns, then the run's 50
    assert not Run.objects.filter(pk__in=[pk for pk, _ in advances]).exists()


@pytest.mark.django_db
def test_a_run_that_does_not_go_its_whole_length_is_an_error(monkeypatch):
    """The demo model answers after fewer turns than asked: the bench says so rather than time a shorter run."""
    monkeypatch.setattr(bench_advance, "goal", lambda turns: "What is 1+1?")

    with pytest.raises(CommandError, match=r"ended final_answer with '2' after 1 advances \(expected final_answer"):
        command("bench", "--only", "advance", "--advance-turns", "6", "--advance-runs", "1")
    assert not get_user_model().objects.filter(username__startswith="bench-").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--advance-runs", "0"], "--advance-runs must be at least 1"),
        (["--advance-turns", "1"], "--advance-turns must be between 2 and 50"),
        (["--advance-turns", "51"], "--advance-turns must be between 2 and 50"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_bad_arguments_exit_2_before_anything_is_stored(args, message):
    with pytest.raises(CommandError) as exc:
        command("bench", "--only", "advance", *args)  # no database access: pytest would refuse it here
    assert exc.value.returncode == 2
    assert message in str(exc.value)
