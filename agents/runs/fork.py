"""Fork a run from any step: a new run whose state is the original's after step k (its steps up to k, copied),
optionally with an edited input, an edited tool result or other settings, which then continues in any mode.

The fork is a run of the one who asked (the original may be another user's, for a reviewer), outside any thread, with
`forked_from = {"run", "step"}`. Its turns count the copied model replies (its turn budget goes on from there); its
usage counts only the model calls it makes itself. A sub-agent call whose result is not among the copied steps starts
a child of the fork when the fork runs it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.errors import InvalidRequest
from agents.guardrails import guard_for, redact_input
from agents.models import Run, RunMode, RunStatus, Step
from agents.runconfig import validate
from agents.runconfig.config import RunConfig
from agents.runconfig.options import FORK_OPTIONS
from agents.runs import documents, drive, rows, telemetry
from agents.usage import quotas
from agents.usage.owners import OwnerFacts


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
        if actor.pk != original.owner_id:  # its documents: the fork's owner reads only their own
            _rehome(run)
        run.save(force_insert=True)
        Step.objects.bulk_create(rows.step_rows(run, events))
        if background:
            drive.enqueue(run)
    telemetry.run_created(run)
    if background:
        return run
    return drive.execute(run_id=run.pk, units=drive.ONE_STEP if run.mode == RunMode.STEP else drive.UNTIL_STOPPED)


def _rehome(run: Run) -> None:
    """A fork by someone else: the documents its input and history reference, copied to its owner."""
    run.input_parts = documents.rehomed(run.owner_id, run.input_parts)
    run.history = [
        {**turn, "input_parts": documents.rehomed(run.owner_id, turn["input_parts"])} if "input_parts" in turn else turn
        for turn in run.history
    ]


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
    """The fork's row: the original's config under the overrides, its counters as of step `from_step`."""
    config = _fork_config(original.config, overrides)
    mode = overrides.get("mode", RunMode.SYNC)
    model_steps = [e for e in events if e["kind"] == "model"]
    reflections = [i for i, e in enumerate(model_steps) if e.get("reflection")]
    now = timezone.now()
    return Run(
        **config.columns(),
        owner=actor,
        history=original.history,
        agent=original.agent,
        agent_version=original.agent_version,
        metadata=original.metadata,
        trace_context=telemetry.carrier(),
        input=redact_input(config.guardrails, overrides["input"]) if "input" in overrides else original.input,
        input_parts=None if "input" in overrides else original.input_parts,
        mode=mode,
        forked_from_run=original.pk,
        forked_from_step=from_step,
        turns=len(model_steps),
        reflections=len(reflections),
        attempt_start_turn=(reflections[-1] + 1) if reflections else 0,
        status=RunStatus.QUEUED if mode == RunMode.BACKGROUND else RunStatus.RUNNING,
        deadline=now + timedelta(seconds=config.timeout_s),
        version=1,  # it has steps: a take reads them
        created_at=now,
        updated_at=now,
    )


def _fork_config(config: RunConfig, overrides: dict) -> RunConfig:
    """The original's config with the options a fork may change (FORK_OPTIONS) as the overrides give them; another
    provider without a model: that provider's default model, checked."""
    changes = {name: overrides[name] for name in FORK_OPTIONS if name in overrides}
    model = changes.get("model", None if "provider" in changes else config.model)
    changes["provider"], changes["model"] = validate.checked_model(changes.get("provider", config.provider), model)
    return replace(config, **changes)
