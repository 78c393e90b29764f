"""Running eval cases through the same services as any run, and storing the results."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from agents import services
from agents.evals.cases import Case, check_output
from agents.evals.fixtures import FixtureBook
from agents.evals.replay import execute as execute_replay
from agents.models import EvalResult, EvalRun, Run, RunStatus


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


def plan(cases: list[Case], protocol: str | None, replay: bool = False) -> list[tuple[Case, str]]:
    """Every (case, protocol) pair to run. A replay in a given protocol runs every case in it: a run recorded in
    one protocol is checked in the other."""
    if replay and protocol is not None:
        return [(c, protocol) for c in cases]
    return [(c, p) for c in cases for p in c.protocols if protocol is None or p == protocol]


def validate(config: EvalConfig) -> str:
    """Check provider and model before anything runs; returns the model. Raises services.InvalidRequest."""
    from agents.providers import ProviderConfigError, validate_choice

    try:
        return validate_choice(config.provider, config.model)
    except ProviderConfigError as exc:
        raise services.InvalidRequest({"provider": [str(exc)]}) from None


def run_evals(
    *, cases: list[Case], config: EvalConfig, created_by=None, progress: Callable[[EvalResult], None] | None = None
) -> EvalRun:
    """Run every case (in parallel up to `config.concurrency`), store each result, then the summary."""
    model = validate(config)
    _check_tools(cases)
    eval_run = EvalRun.objects.create(
        created_by=created_by,
        provider=config.provider,
        model=model,
        protocol=config.protocol or "per case",
        max_reflections=config.max_reflections,
        cases_file=f"{config.cases_file} (replay)"[:300] if config.replay else config.cases_file,
        only=config.only,
        agent=config.agent or "",
    )
    work = plan(cases, config.protocol, config.replay)

    def one(item: tuple[Case, str]) -> EvalResult:
        try:
            result = _run_case(eval_run, item[0], item[1], config, model)
        finally:
            if config.concurrency > 1:
                connection.close()  # each worker thread has its own connection
        if progress:
            progress(result)
        return result

    if config.concurrency > 1:
        with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
            results = list(pool.map(one, work))
    else:
        results = [one(item) for item in work]
    return _summarise(eval_run, results)


def _check_tools(cases: list[Case]) -> None:
    """Every tool a case names must exist, before anything is stored."""
    from agents.runtime import tool_registry

    known = set(tool_registry().names())
    for case in cases:
        unknown = sorted(set(case.tools or ()) - known)
        if unknown:
            raise services.InvalidRequest({"cases": [f"case '{case.id}' names unknown tool(s): {', '.join(unknown)}"]})


def _case_user():
    """A fresh, inactive user per case: memory cases cannot see each other's facts."""
    return get_user_model().objects.create_user(f"eval-{uuid.uuid4().hex[:12]}", is_active=False)


def _run_case(eval_run: EvalRun, case: Case, protocol: str, config: EvalConfig, model: str) -> EvalResult:
    user = _case_user()
    book = FixtureBook(case.fixtures or ()) if config.replay else None
    for goal in case.setup:
        _execute(user, goal, protocol, config, model, case, book)
    started = time.perf_counter()
    run = _execute(user, case.input, protocol, config, model, case, book)
    latency_ms = (time.perf_counter() - started) * 1000
    errors = run.steps.filter(kind="error").count()
    reason = book.problem if book is not None and book.problem else _reason(case, run, errors)
    return EvalResult.objects.create(
        eval_run=eval_run,
        case_id=case.id,
        protocol=protocol,
        run=run,
        passed=reason is None,
        reason=reason or "",
        output=run.output,
        turns=run.turns,
        latency_ms=latency_ms,
        tokens=run.total_tokens,
    )


def _execute(
    user, goal: str, protocol: str, config: EvalConfig, model: str, case: Case, book: FixtureBook | None = None
) -> Run:
    options = services.RunOptions(
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
    run = services.start_run(owner=user, options=options)
    return services.execute(run_id=run.pk)


def _reason(case: Case, run: Run, errors: int) -> str | None:
    if run.status == RunStatus.AWAITING_APPROVAL:
        return "paused for approval (evals run no sensitive tool)"
    if run.stop_reason != "final_answer":
        return f"stopped: {run.stop_reason}" + (f" ({run.error})" if run.error else "")
    return check_output(case, run.output, errors)


def _summarise(eval_run: EvalRun, results: list[EvalResult]) -> EvalRun:
    latencies = sorted(r.latency_ms for r in results)
    eval_run.total = len(results)
    eval_run.passed = sum(r.passed for r in results)
    eval_run.pass_rate = eval_run.passed / eval_run.total if results else 0.0
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
