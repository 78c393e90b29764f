"""Reads shared by the API, the admin and the CLI (selectors: no writes, no transactions)."""

from __future__ import annotations

from agents.engine import RunState
from agents.engine import pending_action as engine_pending_action
from agents.models import Run


def pending_action(run: Run) -> dict | None:
    """The call a paused run waits on (`{"call_id", "tool", "arguments"}`), by the engine's own rule.

    Uses steps a caller prefetched (`paused_steps`, or a `steps` prefetch) when present; else reads only the steps
    since the last model reply.
    """
    if run.status != "awaiting_approval":
        return None
    state = getattr(run, "engine_state", None)  # a run a service just drove: its state is still in memory
    if state is not None:
        return engine_pending_action(state)
    steps = getattr(run, "paused_steps", None)
    if steps is None:
        steps = getattr(run, "_prefetched_objects_cache", {}).get("steps")
    if steps is None:
        last_model = run.steps.filter(kind="model").order_by("-index").values_list("index", flat=True).first()
        steps = run.steps.filter(index__gte=last_model or 0).order_by("index")
    return engine_pending_action(RunState(input="", status=run.status, steps=[s.as_event() for s in steps]))
