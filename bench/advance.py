"""`manage.py bench --only advance`: a step run's last advances against its first, on the current database.

A step run (`mode="step"`) is advanced one unit at a time by its client, and each advance takes the run's lease and
reads the run's steps again (`drive.hold` → `rows.state_from_rows`): the read grows with the run. The bench drives
`--advance-runs` step runs of `--advance-turns` turns (default 50, the most a run may have) through the service a
client's advance calls (`review.advance_run`), the demo model (offline, no key) calling the calculator, an instant
tool, each turn until the last, where it answers: every advance adds a model reply and a tool result (two steps),
the last one the answer. The first unit is the submit's (`submit_run`, which reads no steps); the advances are the
other turns. It reports the median time of the first five advances and of the last five over all runs, their ratio,
how many steps the last advance read, and what each further step read added. A shorter warm-up run goes first
(imports, prepared statements), untimed. Everything it creates goes with its throwaway user.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import connection

from agents.models import RunMode, RunStatus
from agents.runs import review, submit
from bench.support import Row

WINDOW = 5  # advances at each end of a run that are compared
_, MOST_TURNS = submit.RUN_LIMITS["max_turns"]


@dataclass
class _Advances:
    """One run's advances: each one's time (ms) and how many steps it read back."""

    ms: list[float]
    steps: list[int]


def goal(turns: int) -> str:
    """An input the demo model answers in `turns` turns: `turns - 1` calculator calls ("1+1", then "2+1", …), then
    the answer (which is `turns`)."""
    return "What is 1+1" + ", plus 1" * (turns - 2) + "?"


def check(runs: int, turns: int) -> None:
    """The options, checked before anything is stored (a CommandError exiting 2 names the bad one)."""
    if runs < 1:
        raise CommandError("--advance-runs must be at least 1.", returncode=2)
    if not 2 <= turns <= MOST_TURNS:
        raise CommandError(f"--advance-turns must be between 2 and {MOST_TURNS}.", returncode=2)


def measure(progress: Callable[[str], None], *, runs: int, turns: int) -> list[Row]:
    check(runs, turns)
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    try:
        _drive(user, min(turns, 8))  # warm-up: imports, and statements psycopg prepares only on their 5th use
        done = []
        for number in range(1, runs + 1):
            progress(f"  advance: step run {number} of {runs}, {turns} turns …")
            done.append(_drive(user, turns))
    finally:
        user.delete()  # its runs and their steps go with it
    return _rows(done, turns)


def _drive(user, turns: int) -> _Advances:
    """A step run of `turns` turns, submitted, then advanced until it is done; each advance timed."""
    options = submit.RunOptions(
        input=goal(turns),
        mode=RunMode.STEP,
        provider="demo",
        tools=["calculator"],
        max_turns=turns,
        timeout_s=600,  # a slow database must not end the run on its deadline before its turns
    )
    run = submit.submit_run(owner=user, options=options)
    ms: list[float] = []
    steps: list[int] = []
    while run.status == RunStatus.RUNNING:
        steps.append(len(run.engine_state.steps))  # what the next advance reads back
        started = time.perf_counter()
        run = review.advance_run(run_id=run.pk, actor=user, owner_id=user.pk)
        ms.append((time.perf_counter() - started) * 1000)
    if run.stop_reason != "final_answer" or run.output != str(turns) or len(ms) != turns - 1:
        raise CommandError(
            f"advance bench: the step run ended {run.stop_reason} with {run.output!r} after {len(ms)} advances "
            f"(expected final_answer, {str(turns)!r}, {turns - 1})."
        )
    return _Advances(ms, steps)


def _rows(done: list[_Advances], turns: int) -> list[Row]:
    advances = turns - 1
    window = min(WINDOW, max(advances // 2, 1))  # the two ends never overlap (unless one advance is all there is)
    first = [ms for run in done for ms in run.ms[:window]]
    last = [ms for run in done for ms in run.ms[-window:]]
    first_p50, last_p50 = statistics.median(first), statistics.median(last)
    ratios = [statistics.median(run.ms[-window:]) / statistics.median(run.ms[:window]) for run in done]
    work = (
        f"review.advance_run, {len(done)} step runs of {turns} turns (calculator, the answer in the last): "
        f"{advances} advances each after the submit's unit, {connection.vendor}"
    )
    ends = f"median over {len(done)} runs × {window} advances"
    steps_first = statistics.mean(n for run in done for n in run.steps[:window])
    steps_last = statistics.mean(n for run in done for n in run.steps[-window:])
    per_step = (last_p50 - first_p50) / (steps_last - steps_first) * 1000 if steps_last > steps_first else 0.0
    return [
        Row(f"advance, first {window} p50", first_p50, "ms", f"{work}; {ends}"),
        Row(f"advance, last {window} p50", last_p50, "ms", f"{work}; {ends}; the last one finishes the run"),
        Row(f"advance, last {window} / first {window}", last_p50 / first_p50, "×", f"{work}; ratio of the medians"),
        Row(
            f"advance, last {window} / first {window}, per run",
            statistics.median(ratios),
            "×",
            f"median of each run's ratio (lowest {min(ratios):.2f}, highest {max(ratios):.2f})",
        ),
        Row("advance, steps read at the last", float(done[-1].steps[-1]), "steps", "the run's steps it read back"),
        Row(
            "advance, growth per step read",
            per_step,
            "µs",
            f"(last p50 − first p50) / steps more read ({steps_last:g} against {steps_first:g} on average)",
        ),
    ]
