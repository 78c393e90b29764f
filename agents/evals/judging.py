"""A `judge` check's judge: a rubric graded by a model, as an ordinary run.

The judge is asked, in a run of its own (stored, traced, priced, with the fallback models and the spend quota of any
run), to answer a JSON object `{"score", "reason"}`: the run's output schema is VERDICT_SCHEMA, so a malformed
verdict goes back to the model with the validator's message while its turns last (JUDGE_TURNS), and a run that still
gives none is tried once more (ATTEMPTS). After that the check counts as an error, never as a pass. Its runs belong
to the user the case runs as (an inactive eval user), and what they cost counts towards the case's cost.

The judge model: the check's `model` ("provider/model"), else AGENT_EVAL_JUDGE_MODEL, else the model under test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents import errors
from agents.engine import react
from agents.engine.prompts import JUDGE, VERDICT_SCHEMA
from agents.evals.checks import Judge, JudgeError, Verdict
from agents.models import Run, StopReason
from agents.providers import ProviderConfigError, validate_choice
from agents.runs import drive, submit
from agents.usage import quotas

JUDGE_TURNS = 3
ATTEMPTS = 2
ANSWER_CHARS = 20_000  # of the answer under judgement; a longer one is cut (the judge reads its start)


@dataclass(frozen=True)
class JudgeModel:
    provider: str
    model: str


def judge_model(named: str | None, provider: str, model: str) -> JudgeModel:
    """The model a judge check uses: its own "provider/model", else AGENT_EVAL_JUDGE_MODEL, else `provider`/`model`
    (the model under test). Checked like any run's choice: errors.InvalidRequest naming the judge."""
    named = named or settings.AGENT_EVAL_JUDGE_MODEL or None
    if named:
        provider, _, model = named.partition("/")
    try:
        return JudgeModel(provider, validate_choice(provider, model or None))
    except ProviderConfigError as exc:
        raise errors.InvalidRequest({"judge": [f"judge model {provider}/{model}: {exc}"]}) from None


def judge_for(owner: Any, provider: str, model: str) -> Judge:
    """A `Judge` (agents.evals.checks) whose runs belong to `owner`; `provider`/`model` is the model under test."""

    def judge(rubric: str, task: str, answer: str, named: str | None) -> Verdict:
        try:  # an online evaluator's judge model is checked nowhere before (run_evals checks its cases' first)
            chosen = judge_model(named, provider, model)
        except errors.InvalidRequest as exc:
            raise JudgeError(" ".join(m for msgs in exc.detail.values() for m in msgs)) from None
        prompt = JUDGE.format(rubric=rubric.strip(), task=task.strip() or "(none given)", answer=answer[:ANSWER_CHARS])
        cost, problem = 0, ""
        for _ in range(ATTEMPTS):
            try:
                run = _judge_run(owner, chosen, prompt)
            except errors.InvalidRequest as exc:  # refused before any call (a guardrail)
                raise JudgeError(" ".join(m for msgs in exc.detail.values() for m in msgs), cost) from None
            except quotas.QuotaExceeded as exc:  # the owner's daily token or spend quota is used up
                raise JudgeError(str(exc), cost) from None
            cost += run.cost_nanos or 0
            verdict, problem = _verdict(run)
            if verdict is not None:
                return Verdict(verdict[0], verdict[1], cost)
        raise JudgeError(problem, cost)

    return judge


def _judge_run(owner: Any, chosen: JudgeModel, prompt: str) -> Run:
    options = submit.RunOptions(
        input=prompt,
        provider=chosen.provider,
        model=chosen.model,
        tools=[],
        output_schema=VERDICT_SCHEMA,
        max_turns=JUDGE_TURNS,
        timeout_s=120,
        metadata={"eval": "judge"},
    )
    run = submit.start_run(owner=owner, options=options)
    return drive.execute(run_id=run.pk)


def _verdict(run: Run) -> tuple[tuple[float, str] | None, str]:
    """(score, reason) from a judge run, or None and why not."""
    if run.stop_reason != StopReason.FINAL_ANSWER:
        return None, f"the judge run {run.pk} stopped: {run.stop_reason}" + (f" ({run.error})" if run.error else "")
    value = run.output_json
    if value is None:
        try:
            value = json.loads(react.unfence(run.output or ""))
        except json.JSONDecodeError:
            return None, f"the judge run {run.pk} answered no JSON verdict"
    score = value.get("score") if isinstance(value, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        return None, f"the judge run {run.pk} gave no score from 0 to 1"
    return (float(score), str(value.get("reason") or "")[:500]), ""
