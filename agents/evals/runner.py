"""Running eval cases through the same services as any run, and storing the results."""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agents import errors
from agents.evals import gates
from agents.evals.cases import Case, cases_sha256, load_cases
from agents.evals.checks import Outcome
from agents.evals.evidence import evidence_of, graders_for
from agents.evals.fixtures import FixtureBook
from agents.evals.judging import judge_model
from agents.evals.replay import execute as execute_replay
from agents.models import EvalResult, EvalRun, Run, RunStatus
from agents.providers import ProviderConfigError, validate_choice
from agents.runs import drive, runtime, submit

log = logging.getLogger(__name__)
PER_CASE = "per case"  # EvalRun.protocol when each case runs in its own protocols
REPLAY_MARK = " (replay)"  # the end of a replayed eval run's cases_file


@dataclass(frozen=True)
class EvalConfig:
    provider: str
    model: str | None = None
    protocol: str | None = None  # None: each case's own protocols
    max_reflections: int = 0
    concurrency: int = 1
    cases_file: str = ""
    only: str = ""
    replay: bool = False  # tool calls answered from each case's fixtures (agents.evals.replay), no real tool runs
    agent: str | None = None  # every case's run starts from this agent's configuration (the case's fields override)
    repeat: int = 1  # attempts of each case and protocol
    baseline: EvalRun | None = None  # the eval run this one is compared against (agents.evals.gates)


def plan(cases: list[Case], protocol: str | None, replay: bool = False, repeat: int = 1) -> list[tuple[Case, str, int]]:
    """Every (case, protocol, attempt) to run, attempts from 1 to `repeat`. A replay in a given protocol runs every
    case in it: a run recorded in one protocol is checked in the other."""
    if replay and protocol is not None:
        pairs = [(c, protocol) for c in cases]
    else:
        pairs = [(c, p) for c in cases for p in c.protocols if protocol is None or p == protocol]
    return [(c, p, attempt) for c, p in pairs for attempt in range(1, repeat + 1)]


def validate(config: EvalConfig) -> str:
    """Check provider and model before anything runs; returns the model. Raises errors.InvalidRequest."""

    try:
        return validate_choice(config.provider, config.model)
    except ProviderConfigError as exc:
        raise errors.InvalidRequest({"provider": [str(exc)]}) from None


def run_evals(
    *, cases: list[Case], config: EvalConfig, created_by=None, progress: Callable[[EvalResult], None] | None = None
) -> EvalRun:
    """Check, store and run an eval run at once (`manage.py run_evals`): `start_eval_run`, then `run_into`."""
    eval_run = start_eval_run(cases=cases, config=config, created_by=created_by)
    return run_into(eval_run, cases=cases, config=config, progress=progress)


def start_eval_run(*, cases: list[Case], config: EvalConfig, created_by=None) -> EvalRun:
    """Check provider, model and tools (errors.InvalidRequest), then store the eval run, not yet run: no results,
    `finished_at` null. `run_into` runs it (in-process, or in a worker: `run_queued`)."""
    model = validate(config)
    _check_tools(cases)
    _check_judges(cases, config.provider, model)
    return EvalRun.objects.create(
        created_by=created_by,
        provider=config.provider,
        model=model,
        protocol=config.protocol or PER_CASE,
        max_reflections=config.max_reflections,
        cases_file=f"{config.cases_file}{REPLAY_MARK}"[:300] if config.replay else config.cases_file,
        only=config.only,
        agent=config.agent or "",
        cases_sha256=_sha256(config.cases_file),
        repeat=config.repeat,
        baseline=config.baseline,
    )


def _sha256(cases_file: str) -> str:
    try:
        return cases_sha256(_cases_path(cases_file)) if cases_file else ""
    except OSError:
        return ""


def run_into(
    eval_run: EvalRun,
    *,
    cases: list[Case],
    config: EvalConfig,
    progress: Callable[[EvalResult], None] | None = None,
) -> EvalRun:
    """Run every case into a stored eval run (in parallel up to `config.concurrency`), storing each result, then the
    summary. When anything fails (a case raises, the process is being stopped), the results stored so far are
    summarised and `finished_at` is set before the exception goes on: an eval run never stays running with no word.
    """
    work = plan(cases, config.protocol, config.replay, config.repeat)
    model = eval_run.model

    def one(item: tuple[Case, str, int]) -> EvalResult:
        try:
            result = _run_case(eval_run, item, config, model)
        finally:
            if config.concurrency > 1:
                connection.close()  # each worker thread has its own connection
        if progress:
            progress(result)
        return result

    try:
        if config.concurrency > 1:
            pool = ThreadPoolExecutor(max_workers=config.concurrency)
            try:
                results = list(pool.map(one, work))
            finally:  # on a failure: the cases in flight finish, those not started never do
                pool.shutdown(wait=True, cancel_futures=True)
        else:
            results = [one(item) for item in work]
    except BaseException as exc:
        _finish_failed(eval_run, exc)
        raise
    return _summarise(eval_run, results)


def _finish_failed(eval_run: EvalRun, exc: BaseException) -> None:
    """Summarise what a failed eval run stored (its total counts only those) and mark it finished."""
    if isinstance(exc, Exception):
        log.exception("eval run %s failed; it ends with the results stored so far", eval_run.pk)
    else:  # stopped (a worker's shutdown, Ctrl-C)
        log.warning("eval run %s stopped (%s); it ends with the results stored so far", eval_run.pk, type(exc).__name__)
    try:
        _summarise(eval_run, list(eval_run.results.all()))
    except Exception:  # noqa: BLE001 - the database away too: the eval run stays unfinished; the first error goes on
        log.exception("eval run %s: could not record its end", eval_run.pk)


def config_for(eval_run: EvalRun, *, concurrency: int = 1) -> EvalConfig:
    """The configuration a stored eval run was started with (`start_eval_run` is its inverse), plus `concurrency`,
    which is not stored."""
    replay = eval_run.cases_file.endswith(REPLAY_MARK)
    return EvalConfig(
        provider=eval_run.provider,
        model=eval_run.model,
        protocol=None if eval_run.protocol == PER_CASE else eval_run.protocol,
        max_reflections=eval_run.max_reflections,
        concurrency=concurrency,
        cases_file=eval_run.cases_file.removesuffix(REPLAY_MARK) if replay else eval_run.cases_file,
        only=eval_run.only,
        replay=replay,
        agent=eval_run.agent or None,
        repeat=eval_run.repeat,
        baseline=eval_run.baseline,
    )


def run_queued(*, eval_run_id: int, concurrency: int = 1) -> str:
    """A worker's share of an eval run started over HTTP (the task agents.tasks.run_eval): its cases, read again from
    its cases file, run into it with the configuration it was stored with; "passed/total", or "skipped" for an eval
    run deleted or already finished meanwhile. A failure (the cases file unreadable now, a provider no longer
    configured, a case raising) ends the eval run with the results stored so far and fails the task.

    A worker that dies mid-eval (kill -9, a lost machine) leaves its task RUNNING and the eval run unfinished
    (`finished_at` null) for good, with the results stored until then: nothing takes it over (the lease sweep hands
    on the case's run, which goes on as a background run of its eval user, but records no result). Start another.
    A worker stopped gracefully (SIGTERM) gives the eval its `--drain` seconds, then stops it: it ends with the
    results stored so far, and its task is marked failed."""
    eval_run = EvalRun.objects.filter(pk=eval_run_id).first()
    if eval_run is None or eval_run.finished_at is not None:
        return "skipped"
    config = config_for(eval_run, concurrency=concurrency)
    try:
        cases = load_cases(_cases_path(config.cases_file), config.only or None)
        _check_judges(cases, config.provider, validate(config))
        _check_tools(cases)
    except Exception as exc:
        _finish_failed(eval_run, exc)
        raise
    eval_run = run_into(eval_run, cases=cases, config=config)
    return f"{eval_run.passed}/{eval_run.total}"


def _cases_path(cases_file: str) -> Path:
    """A stored cases file: a relative one (the API's `agents/evals/cases.yaml`) is the project's, wherever the
    worker runs from."""
    path = Path(cases_file)
    return path if path.is_absolute() else Path(settings.BASE_DIR) / path


def _check_tools(cases: list[Case]) -> None:
    """Every tool a case names must exist, before anything is stored."""

    known = set(runtime.tool_registry().names())
    for case in cases:
        unknown = sorted(set(case.tools or ()) - known)
        if unknown:
            raise errors.InvalidRequest({"cases": [f"case '{case.id}' names unknown tool(s): {', '.join(unknown)}"]})


def _check_judges(cases: list[Case], provider: str, model: str) -> None:
    """Every judge model a case names (or AGENT_EVAL_JUDGE_MODEL) must be allowed and configured, before anything is
    stored (errors.InvalidRequest)."""
    named = {check.spec.get("model") for case in cases for check in case.checks if check.type == "judge"}
    for one in sorted(named, key=str):
        judge_model(one, provider, model)


EVAL_USER_PREFIX = "eval-"


def _case_user():
    """A fresh, inactive user per case: memory cases cannot see each other's facts."""
    return get_user_model().objects.create_user(f"{EVAL_USER_PREFIX}{uuid.uuid4().hex[:12]}", is_active=False)


def eval_users(path: str = "") -> Q:
    """The users eval cases run as (`_case_user`: inactive, named eval-…), as a filter on users; `path` leads to the
    user from another model ("owner__" for runs). An active user who happens to be named eval-… is not one."""
    return Q(**{f"{path}username__startswith": EVAL_USER_PREFIX, f"{path}is_active": False})


def _run_case(eval_run: EvalRun, item: tuple[Case, str, int], config: EvalConfig, model: str) -> EvalResult:
    case, protocol, attempt = item
    user = _case_user()
    book = FixtureBook(case.fixtures or ()) if config.replay else None
    cost = 0
    for goal in case.setup:
        cost += _execute(user, goal, protocol, config, model, case, book).cost_nanos or 0
    started = time.perf_counter()
    run = _execute(user, case.input, protocol, config, model, case, book)
    latency_ms = (time.perf_counter() - started) * 1000
    evidence = evidence_of(run, latency_ms)
    cost += evidence.cost_nanos or 0
    reason = book.problem if book is not None and book.problem else _stopped(run)
    passed, score = False, 0.0
    outcomes: tuple[Outcome, ...] = ()
    if not reason:
        error_steps = run.steps.filter(kind="error").count()
        graded = case.grade(evidence, graders_for(user, config.provider, model), error_steps)
        passed, score, reason, outcomes = graded.passed, graded.score, graded.reason, graded.outcomes
        cost += graded.cost_nanos
    return EvalResult.objects.create(
        eval_run=eval_run,
        case_id=case.id,
        protocol=protocol,
        attempt=attempt,
        run=run,
        passed=passed,
        score=score,
        checks=[o.as_dict() for o in outcomes],
        reason=reason or "",
        output=run.output,
        turns=run.turns,
        latency_ms=latency_ms,
        tokens=run.total_tokens,
        cost_nanos=cost,
    )


def _execute(
    user, goal: str, protocol: str, config: EvalConfig, model: str, case: Case, book: FixtureBook | None = None
) -> Run:
    options = submit.RunOptions(
        input=goal,
        protocol=protocol,
        provider=config.provider,
        model=model,
        max_turns=case.max_turns,
        timeout_s=case.timeout_s,
        tools=list(case.tools) if case.tools is not None else None,
        max_reflections=config.max_reflections,
        agent=config.agent,
    )
    if book is not None:
        return execute_replay(owner=user, options=options, book=book)
    run = submit.start_run(owner=user, options=options)
    return drive.execute(run_id=run.pk)


def _stopped(run: Run) -> str:
    """Why a case's run gave no final answer to check ("" when it gave one)."""
    if run.status == RunStatus.AWAITING_APPROVAL:
        return "paused for approval (evals run no sensitive tool)"
    if run.stop_reason != "final_answer":
        return f"stopped: {run.stop_reason}" + (f" ({run.error})" if run.error else "")
    return ""


def _summarise(eval_run: EvalRun, results: list[EvalResult]) -> EvalRun:
    latencies = sorted(r.latency_ms for r in results)
    eval_run.total = len(results)
    eval_run.passed = sum(r.passed for r in results)
    eval_run.pass_rate = eval_run.passed / eval_run.total if results else 0.0
    eval_run.score = statistics.fmean(r.score for r in results) if results else 0.0
    eval_run.cost_nanos = sum(r.cost_nanos for r in results)
    eval_run.mean_turns = statistics.fmean(r.turns for r in results) if results else 0.0
    eval_run.p50_latency_ms, eval_run.p95_latency_ms = _p50_p95(latencies)
    eval_run.tokens = sum(r.tokens for r in results)
    eval_run.finished_at = timezone.now()
    eval_run.save()
    return eval_run


def _p50_p95(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    if len(values) == 1:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[94]


def hold_gate(eval_run: EvalRun, *, min_pass_rate: float | None = None, max_drop: float = 0.0) -> gates.Verdict:
    """The release gate on a finished eval run (`run_evals --min-pass-rate`, `--baseline` and `--max-drop`), stored
    on it. `min_pass_rate` defaults to 1.0 without a baseline and to 0 with one (the baseline's floor decides)."""
    baseline = eval_run.baseline
    if min_pass_rate is None:
        min_pass_rate = 0.0 if baseline is not None else 1.0
    gate = gates.Gate(
        min_pass_rate=min_pass_rate,
        max_drop=max_drop,
        baseline_id=baseline.pk if baseline is not None else None,
        baseline_pass_rate=baseline.pass_rate if baseline is not None else None,
    )
    verdict = gates.hold(list(eval_run.results.all()), gate, list(baseline.results.all()) if baseline else None)
    eval_run.gate = verdict.as_dict()
    eval_run.save(update_fields=["gate"])
    return verdict
