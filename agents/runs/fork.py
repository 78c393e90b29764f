"""Fork a run from any step: a new run whose state is the original's after step k (its steps up to k, copied),
optionally with an edited input, an edited tool result or other settings, which then continues in any mode.

The fork is a run of the one who asked (the original may be another user's, for a reviewer), outside any thread, with
`forked_from = {"run", "step"}`. Its turns count the copied model replies (its turn budget goes on from there); its
usage counts only the model calls it makes itself. A sub-agent call whose result is not among the copied steps starts
a child of the fork when the fork runs it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.errors import InvalidRequest
from agents.guardrails import guard_for, redact_input
from agents.limits import quotas
from agents.limits.owners import OwnerFacts
from agents.models import Run, RunMode, RunStatus, Step
from agents.providers import ProviderConfigError, validate_choice
from agents.runs import drive, rows, telemetry

# What a fork may change besides its start (the API's fork body; `input` and `tool_output` are edits of the record).
SETTINGS = ("provider", "model", "max_turns", "timeout_s", "instructions", "temperature", "max_output_tokens")


def fork_run(*, run_id, actor, from_step: int, overrides: dict[str, Any], facts: OwnerFacts | None = None) -> Run:
    """Create the fork of `run_id` after step `from_step` and continue it as `overrides["mode"]` says (sync by
    default: until it stops or pauses; step: one unit; background: queued). InvalidRequest names the field at fault.
    """
    quotas.check_can_start(actor.pk, facts)
    original = Run.objects.get(pk=run_id)
    steps = list(original.steps.filter(index__lte=from_step).order_by("index"))
    count = original.steps.count()
    if from_step < 0 or from_step >= count:
        where = f"steps 0 to {count - 1}" if count else "no steps yet"
        raise InvalidRequest({"from_step": [f"Out of range: this run has {where}."]})
    last = steps[-1]
    if last.kind == "model" and last.data.get("final_answer") is not None and "tool_output" not in overrides:
        final = f"Step {from_step} is the run's final answer: nothing follows it. Fork from an earlier step."
        raise InvalidRequest({"from_step": [final]})
    events = [s.as_event() for s in steps]
    if "tool_output" in overrides:
        if last.kind != "tool":
            raise InvalidRequest({"tool_output": [f"Step {from_step} is a {last.kind} step, not a tool's result."]})
        events[-1] = {**events[-1], "output": overrides["tool_output"], "is_error": False, "edited": True}
    run = _new_fork(original, actor, from_step, overrides, events)
    _guard_edits(run, overrides, events)
    background = run.mode == RunMode.BACKGROUND
    with transaction.atomic():
        run.save(force_insert=True)
        Step.objects.bulk_create(rows.step_rows(run, events))
        if background:
            drive.enqueue(run)
    telemetry.run_created(run)
    if background:
        return run
    return drive.execute(run_id=run.pk, units=drive.ONE_STEP if run.mode == RunMode.STEP else drive.UNTIL_STOPPED)


def _guard_edits(run: Run, overrides: dict, events: list[dict]) -> None:
    """An edited input or tool result meets the run's guardrails as the original did when it was made: the input is
    checked here (the fork has had its first model call: the engine would not check it again), the result redacted
    and checked as a tool's. A trip is a 400 naming the field (nothing is stored)."""
    guard = guard_for(run) if run.guardrails else None
    if guard is None:
        return
    if "input" in overrides:
        verdict = guard.check("input", run.input)
        if verdict is not None:
            raise InvalidRequest({"input": [f"Guardrail '{verdict.guardrail}' refused this input: {verdict.reason}."]})
    if "tool_output" in overrides:
        text = guard.redact("tool_output", events[-1]["output"])
        events[-1] = {**events[-1], "output": text}
        verdict = guard.check("tool_output", text, tool=events[-1].get("name"))
        if verdict is not None:
            message = f"Guardrail '{verdict.guardrail}' refused this tool output: {verdict.reason}."
            raise InvalidRequest({"tool_output": [message]})


def _new_fork(original: Run, actor, from_step: int, overrides: dict, events: list[dict]) -> Run:
    """The fork's row: the original's settings under the overrides, its counters as of step `from_step`."""
    values = {name: overrides.get(name, getattr(original, name)) for name in SETTINGS}
    if "provider" in overrides and "model" not in overrides:
        values["model"] = None  # another provider: its default model
    try:
        values["model"] = validate_choice(values["provider"], values["model"])
    except ProviderConfigError as exc:
        raise InvalidRequest({"model" if "Model" in str(exc) else "provider": [str(exc)]}) from None
    mode = overrides.get("mode", RunMode.SYNC)
    model_steps = [e for e in events if e["kind"] == "model"]
    reflections = [i for i, e in enumerate(model_steps) if e.get("reflection")]
    now = timezone.now()
    return Run(
        owner=actor,
        history=original.history,
        agent=original.agent,
        output_schema=original.output_schema,
        metadata=original.metadata,
        trace_context=telemetry.carrier(),
        input=redact_input(original.guardrails, overrides["input"]) if "input" in overrides else original.input,
        input_parts=None if "input" in overrides else original.input_parts,
        mode=mode,
        protocol=original.protocol,
        tools=original.tools,
        sensitive_tools=original.sensitive_tools,
        subagents=original.subagents,
        max_total_tokens=original.max_total_tokens,
        max_tool_calls=original.max_tool_calls,
        tool_limits=original.tool_limits,
        guardrails=original.guardrails,
        fallback_models=original.fallback_models,
        max_reflections=original.max_reflections,
        approval_ttl_s=original.approval_ttl_s,
        forked_from_run=original.pk,
        forked_from_step=from_step,
        turns=len(model_steps),
        reflections=len(reflections),
        attempt_start_turn=(reflections[-1] + 1) if reflections else 0,
        status=RunStatus.QUEUED if mode == RunMode.BACKGROUND else RunStatus.RUNNING,
        deadline=now + timedelta(seconds=values["timeout_s"]),
        version=1,  # it has steps: a take reads them
        created_at=now,
        updated_at=now,
        **values,
    )
