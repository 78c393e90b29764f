"""Scores on production runs: an agent's online evaluators, and people's feedback (docs/evals.md#scores-on-runs).

An agent's `evaluators` are `[{"name", "check", "sample"}]`: a check of a type that needs no expected answer
(`judge`, `json`, `tools`, `cost`, `latency`, `turns`) and the fraction (0-1) of the agent's finished runs it scores.
When a run of the agent settles, agents/runs/scoring.py draws which evaluators score it and queues the task
`agents.tasks.score_run`, whose body is `score_run` here: on a worker, never in the request. Each evaluator's
outcome is a RunScore (`source` online); a judge's runs belong to the inactive user ONLINE_USER, so they appear in no
one's run list, and what they cost is the deployment's.

Feedback (`POST /api/v1/runs/{id}/feedback`) is a RunScore with `source` human, by the run's owner or a reviewer.
Every stored score is told to the telemetry observers (the Prometheus counter `reactsite_run_scores`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model

from agents.evals.checks import CaseError, Check, Outcome, parse_check
from agents.evals.evidence import evidence_of, graders_for
from agents.evals.runner import EVAL_USER_PREFIX
from agents.models import Agent, Run, RunScore, RunStatus, ScoreSource
from agents.runs import telemetry

log = logging.getLogger(__name__)
ONLINE_USER = (
    f"{EVAL_USER_PREFIX}online"  # inactive: its judge runs are no one's to see (agents.evals.runner.eval_users)
)
MAX_EVALUATORS = 10
FEEDBACK = "feedback"


@dataclass(frozen=True)
class Evaluator:
    name: str
    check: Check
    sample: float


def parse_evaluators(value: Any) -> list[Evaluator]:
    """An agent's `evaluators`, checked: CaseError naming the evaluator and the field."""
    if value in (None, ""):
        return []
    if not isinstance(value, list):
        raise CaseError('evaluators must be a list of {"name", "check", "sample"}.')
    if len(value) > MAX_EVALUATORS:
        raise CaseError(f"at most {MAX_EVALUATORS} evaluators.")
    out: list[Evaluator] = []
    for n, item in enumerate(value, 1):
        where = f"evaluator #{n}"
        if not isinstance(item, dict):
            raise CaseError(f'{where} must be a mapping {{"name", "check", "sample"}}.')
        unknown = sorted(set(item) - {"name", "check", "sample"})
        if unknown:
            raise CaseError(f"{where}: unknown field(s) {', '.join(unknown)}; known: check, name, sample.")
        name = item.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= 64 or name == FEEDBACK:
            raise CaseError(f"{where}: 'name' must be a string of 1 to 64 characters, not {FEEDBACK!r}.")
        where = f"evaluator '{name}'"
        if any(e.name == name for e in out):
            raise CaseError(f"{where}: the name is used twice.")
        sample = item.get("sample", 1)
        if isinstance(sample, bool) or not isinstance(sample, int | float) or not 0 <= sample <= 1:
            raise CaseError(f"{where}: 'sample' must be a number from 0 to 1, not {sample!r}.")
        out.append(Evaluator(name, parse_check(item.get("check"), f"{where}: check", online=True), float(sample)))
    return out


def evaluator_problems(value: Any) -> list[str]:
    """What is wrong with an agent's `evaluators` (the admin's and the API's check), else []."""
    try:
        parse_evaluators(value)
    except CaseError as exc:
        return [str(exc)]
    return []


def online_user() -> Any:
    user, _ = get_user_model().objects.get_or_create(username=ONLINE_USER, defaults={"is_active": False})
    return user


def score_run(*, run_id: str, evaluators: list[str]) -> str:
    """The task's body: the named evaluators of the run's agent score the run, each a RunScore; "n scored", or
    "skipped" when the run (or its agent, or those evaluators) is gone or it is not done."""
    run = Run.objects.filter(pk=run_id, status=RunStatus.DONE).first()
    agent = Agent.objects.filter(name=run.agent).first() if run is not None and run.agent else None
    if run is None or agent is None:
        return "skipped"
    try:
        chosen = [e for e in parse_evaluators(agent.evaluators) if e.name in evaluators]
    except CaseError:  # edited into something invalid since (the admin checks it): nothing to score with
        log.warning("agent %s: evaluators unusable; run %s not scored", agent.name, run.pk, exc_info=True)
        return "skipped"
    if not chosen:
        return "skipped"
    evidence = evidence_of(run)
    graders = graders_for(online_user(), run.provider, run.model)
    for evaluator in chosen:
        outcome = evaluator.check.grade(evidence, graders)
        _store(run, evaluator.name, outcome)
    return f"{len(chosen)} scored"


def _store(run: Run, name: str, outcome: Outcome) -> RunScore:
    score = RunScore.objects.create(
        run=run,
        name=name,
        score=outcome.score,
        passed=outcome.passed,
        reason=outcome.reason[:2000],
        source=ScoreSource.ONLINE,
    )
    telemetry.run_scored(score)
    return score


def add_feedback(*, run: Run, user: Any, score: float, name: str = FEEDBACK, comment: str = "") -> RunScore:
    """A person's score on a run they may see (the caller checked that: the API's 404 otherwise)."""
    stored = RunScore.objects.create(
        run=run, name=name, score=score, passed=None, comment=comment, source=ScoreSource.HUMAN, created_by=user
    )
    telemetry.run_scored(stored)
    return stored
