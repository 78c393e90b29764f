"""A long thread's summary, kept on the thread (run option `history: summarize`, docs/threads.md#long-threads).

A run on a thread gets its history when it is stored: the newest earlier turns that fit the budget (thread_runs.py).
With `summarize`, before its first unit the turns left out of it are condensed: the thread's summary covers its
first `summary_runs` runs; the runs left out that it does not cover yet are sent with it to the run's own model (one
call, through the same pipeline as the run's turns: quota, telemetry, price), and the new summary is stored on the
thread, covering them too. Later runs extend it the same way; a run whose left-out turns the summary covers already
just shows it. The run's history, as stored, is then led by the summary its model sees.

The call holds nothing (no transaction, no lock; the connection goes back in the pipeline). Its result is stored in
one transaction: the `summary` step (its usage and cost counted as the run's), the run's history, and the thread's
summary, only if `summary_runs` is still what was read (two runs never both extend it; runs on a thread are
serialised anyway). A crash before that commit loses only the call, which the run's next take makes again; a failed
call stores nothing on the thread and the run goes on as `truncate` would.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from agents.engine import history as thread_history
from agents.engine import summary as engine_summary
from agents.engine.types import Model
from agents.models import Run, RunStatus, Thread
from agents.runconfig.options import HistoryMode
from agents.runs import runtime, store, telemetry, thread_runs

log = logging.getLogger(__name__)


def wanted(held: store.Held) -> bool:
    """Whether the held run condenses its thread's left-out turns now: a `summarize` run on a thread, running, before
    its first commit, whose history holds no summary yet."""
    run = held.run
    return (
        run.thread_id is not None
        and run.history_mode == HistoryMode.SUMMARIZE
        and run.version == 0
        and held.state.status == RunStatus.RUNNING
        and settings.AGENT_THREAD_HISTORY_RUNS > 0
        and not any(thread_history.is_summary(turn) for turn in held.state.history)
    )


def condense(held: store.Held, model: Model) -> None:
    """Lead the held run's history with its thread's summary, extended first (one call of `model`, the run's own
    pipeline) when turns the budget leaves out are not in it yet. Nothing when every earlier turn fits."""
    run = held.run
    thread = Thread.objects.filter(pk=run.thread_id).values("summary", "summary_runs").first()
    if thread is None:
        return
    left_out = thread_runs.earlier_runs(run.thread_id, run.created_at) - len(held.state.history)
    covered, summary = thread["summary_runs"], thread["summary"]
    if left_out <= 0:
        return  # every earlier turn fits
    if covered >= left_out:
        if summary:
            _show(held, summary, covered)
        return
    stop = min(left_out, covered + max(settings.AGENT_THREAD_HISTORY_RUNS, 1))
    turns = thread_runs.turns_between(run.thread_id, run.created_at, covered, stop, settings.AGENT_THREAD_HISTORY_CHARS)
    events: list[dict] = []
    if turns:  # (none: the thread's runs were deleted meanwhile)
        job = engine_summary.Condense(summary, covered, turns, covered + len(turns))
        with telemetry.summary(run):
            state, events, text = engine_summary.summarize(held.state, model, runtime.clock, job, held.interrupt)
    if not events:  # no call was made (the deadline, a cancel, the token limit): the summary so far, if any
        if summary:
            _show(held, summary, covered)
        return
    with transaction.atomic():
        if text is not None:
            stored = Thread.objects.filter(pk=run.thread_id, summary_runs=covered).update(
                summary=text, summary_runs=job.runs
            )
            if not stored:
                log.info("thread summary extended meanwhile", extra={"run_id": str(run.pk)})
        _store_history(held, state.history)
        store.commit_unit(held, state, events, release=False)
    if text is None:
        log.warning("thread summary failed: the run goes on without it", extra={"run_id": str(run.pk)})


def _show(held: store.Held, summary: str, covered: int) -> None:
    """The thread's summary as it is leads the run's history (no call: it covers every turn left out)."""
    state = held.state.copy()
    state.history = thread_history.with_summary(state.history, summary, covered)
    _store_history(held, state.history)
    held.state = state


def _store_history(held: store.Held, history: list[dict]) -> None:
    """The run's history as its model sees it, stored while the lease is ours (a cancelled run keeps its own)."""
    ours = Run.objects.filter(pk=held.run.pk, lease_owner=held.token).exclude(status=RunStatus.DONE)
    if ours.update(history=history):
        held.run.history = history
