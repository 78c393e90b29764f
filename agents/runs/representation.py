"""The run and the step as clients see them: one representation, shared by the HTTP API, the event stream and the
webhooks (the API's serializers declare the same fields for the schema and answer with these).

Built directly rather than through DRF's field machinery: the run object answers every run request, and building it
field by field cost more than the rest of the response (docs/performance.md). Times are written as DRF writes them:
ISO 8601 in the current time zone, UTC as `Z`.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from agents.models import Run, RunScore, Step
from agents.runs import selectors
from agents.usage.prices import cost_text

# The fields each kind of step shows, from its stored data (API reference, "Steps").
STEP_FIELDS = {
    "model": ("thought", "text", "tool_calls", "final_answer", "usage", "cost"),
    "tool": ("call_id", "name", "arguments", "output", "is_error"),
    "approval": ("call_id", "name", "original_arguments", "arguments", "approved", "reviewer", "reason"),
    "error": ("message",),
    "summary": ("summary", "runs", "condensed", "extended", "usage", "cost"),
}
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def when(moment: datetime | None) -> str | None:
    """A time as the API writes it (DRF's ISO 8601 format), or None."""
    if moment is None:
        return None
    if timezone.is_aware(moment):
        moment = timezone.localtime(moment)
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def usage_json(run: Run) -> dict:
    return {
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "total_tokens": run.total_tokens,
    }


def pending_actions_json(run: Run) -> list[dict]:
    """The calls waiting for a decision, first first (empty unless the run is awaiting approval)."""
    return [{**a, "expires_at": when(a["expires_at"])} for a in selectors.pending_actions(run)]


def run_input(run: Run) -> str | list:
    """The run's input as it was given: a string, or its list of parts (text and images)."""
    return run.input if run.input_parts is None else run.input_parts


def run_json(run: Run) -> dict:
    """The run object (without its steps)."""
    thread_id = run.thread_id
    actions = pending_actions_json(run)
    data = {
        "id": str(run.id), "status": run.status, "stop_reason": run.stop_reason, "ok": run.ok,
        "output": run.output, "output_json": run.output_json, "turns": run.turns, "input": run_input(run),
        "thread_id": str(thread_id) if thread_id is not None else None, "agent": run.agent,
        "agent_version": run.agent_version, "mode": run.mode,
        "protocol": run.protocol,
        "provider": run.provider, "model": run.model, "max_turns": run.max_turns,
        "max_reflections": run.max_reflections, "timeout_s": float(run.timeout_s), "tools": run.tools,
        "sensitive_tools": run.sensitive_tools, "pending_action": actions[0] if actions else None,
        "pending_actions": actions, "error": run.error,
        "usage": usage_json(run), "cost": cost_text(run.cost_nanos), "max_total_tokens": run.max_total_tokens,
        "max_tool_calls": run.max_tool_calls, "tool_limits": run.tool_limits, "guardrails": run.guardrails,
        "fallback_models": run.fallback_models, "prompt_cache": run.prompt_cache, "history": run.history_mode,
        "metadata": run.metadata, "parent": parent_json(run),
        "forked_from": forked_from_json(run),
        "created_at": when(run.created_at), "updated_at": when(run.updated_at),
    }  # fmt: skip
    if not run.max_reflections:
        data.pop("max_reflections")  # shown only when used: the run object stays as it was before reflections
    return data


def parent_json(run: Run) -> dict | None:
    """A child run's parent and the model step whose call started it (null for a run a client started)."""
    if run.parent_id is None:
        return None
    return {"run": str(run.parent_id), "step": run.parent_step}


def forked_from_json(run: Run) -> dict | None:
    """A fork's original run and the step it continues after (null for a run that is not a fork)."""
    if run.forked_from_run is None:
        return None
    return {"run": str(run.forked_from_run), "step": run.forked_from_step}


def children_ids(run: Run) -> list[str]:
    """The run's child runs, oldest first (one query; none for a run that cannot call sub-agents)."""
    if not run.subagents:
        return []
    return [str(pk) for pk in Run.objects.filter(parent_id=run.pk).order_by("created_at").values_list("pk", flat=True)]


def step_json(step: Step) -> dict:
    """One step: its index, kind, time and latency, and the fields of its kind."""
    data = {"index": step.index, "kind": step.kind, "created_at": when(step.created_at), "latency_ms": step.latency_ms}
    for name in STEP_FIELDS.get(step.kind, ()):
        data[name] = step.data.get(name)
    if step.kind in ("model", "summary"):
        data["cost"] = cost_text(step.data.get("cost_nanos"))  # stored in billionths, shown as a decimal string
        if "model" in step.data:
            data["model"] = step.data["model"]  # a fallback model answered
    if step.kind == "summary" and "error" in step.data:
        data["error"] = step.data["error"]  # the summary call failed: the run went on without it
    for mark in ("limit", "guardrail"):  # a limit or a guardrail answered the call, or stopped the run
        if mark in step.data:
            data[mark] = step.data[mark]
    if step.data.get("reflection"):
        data["reflection"] = True  # a critique between attempts (max_reflections)
    if "finish" in step.data:
        data["finish"] = step.data["finish"]  # a reply that did not end the ordinary way (cut off, refused, paused)
    return data


def run_detail_json(run: Run) -> dict:
    """The run object with its steps, in order, and its scores, oldest first."""
    return {
        **run_json(run),
        "children": children_ids(run),
        "steps": [step_json(step) for step in run.steps.all()],
        "scores": [score_json(score) for score in run.scores.all()],
    }


def score_json(score: RunScore) -> dict:
    """A score on a run: an online evaluator's (`passed` true or false) or a person's feedback (`passed` null)."""
    return {
        "name": score.name,
        "score": score.score,
        "passed": score.passed,
        "reason": score.reason,
        "comment": score.comment,
        "source": score.source,
        "created_at": when(score.created_at),
    }
