"""Sub-agents as child runs: an agent that lists other agents (`Agent.agents`) calls each as a tool `agent_<name>`;
the call starts a child run of that agent, stored and linked to its parent run, step and call, and its final answer
(or why it stopped) is the call's observation.

How a child is driven follows how its parent is. A background parent is let go while its child runs as a background
run of its own (a worker takes it; waiting costs nothing, a crashed worker loses nothing); when the child is done the
parent goes back on the queue, and the repeated call finds the child's answer. A parent driven in a request (a sync
run, or a step run's advance) drives its child there and then, as it would wait for any slow tool. A child that
stops for a human decision pauses its parent too (agents/runs/tree.py shows the pause on the ancestors); once the
child goes on and is done, its settle step takes the parent up again (agents/runs/settle.py `resume_parent`: a sync
parent, whose caller has had its answer, continues as a background run; a step parent waits for its client's next
advance).

Budgets hold across the tree: a child's deadline is at most its parent's, its turns at most what its parent has left,
and a tree is at most AGENT_MAX_DEPTH deep. A cancel of a parent cancels its children (agents/runs/drive.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from agents.engine import ToolWaits
from agents.errors import InvalidRequest, RunBusy, RunFinished
from agents.models import Agent, Run, RunMode, RunStatus, Step, StopReason
from agents.runs import drive, runtime, submit, tree
from agents.tools import Tool, ToolContext
from agents.tools.registry import ToolError
from agents.usage.quotas import QuotaExceeded

log = logging.getLogger(__name__)

PARAMETERS = {
    "type": "object",
    "properties": {
        "input": {
            "type": "string",
            "minLength": 1,
            "description": "The task, complete: the agent sees nothing else of this conversation.",
        }
    },
    "required": ["input"],
    "additionalProperties": False,
}


def tools_of(run: Run) -> dict[str, Tool]:
    """The run's sub-agents as tools (a tool source of agents/runs/runtime.py)."""
    if not run.subagents:
        return {}
    described = dict(Agent.objects.filter(name__in=run.subagents).values_list("name", "description"))
    return {tree.tool_name(name): _tool(name, described.get(name) or "") for name in run.subagents}


def _tool(agent: str, description: str) -> Tool:
    text = description or f"Hand a task to the agent '{agent}'."
    return Tool(
        name=tree.tool_name(agent),
        description=f"{text} It works on it as a run of its own and answers with its final answer.",
        parameters=PARAMETERS,
        func=lambda arguments, context: call(agent, arguments, context),
        # Runs in the caller's thread: it shares the connection, and its bound is the child's own deadline.
        inline=True,
        timeout_s=float(submit.RUN_LIMITS["timeout_s"][1]),
    )


def call(agent: str, arguments: dict, context: ToolContext) -> str:
    """The call of a sub-agent: its child's answer, or ToolWaits while the child works or waits for a decision."""
    parent = Run.objects.select_related("owner").filter(pk=context.run_id).first()
    if parent is None or context.call_id is None:
        raise ToolError("A sub-agent can only be called from within a run.")
    child = Run.objects.filter(parent_id=parent.pk, parent_call_id=context.call_id).first()
    if child is None:
        child = _start(parent, agent, arguments["input"], context.call_id)
    if child.status in (RunStatus.QUEUED, RunStatus.RUNNING) and parent.mode != RunMode.BACKGROUND:
        try:
            child = drive.execute(run_id=child.pk)  # driven here, as its parent is: until it stops or pauses
        except (RunBusy, RunFinished):
            child = Run.objects.get(pk=child.pk)
    if child.status == RunStatus.DONE:
        return answer(agent, child)
    raise ToolWaits(str(child.pk), f"the agent {agent!r} is working on it (run {child.pk})")


def answer(agent: str, child: Run) -> str:
    """The observation a finished child gives its parent: its answer, or (an error) why it has none."""
    if child.stop_reason == StopReason.FINAL_ANSWER:
        if child.output_json is not None:
            return json.dumps(child.output_json)
        return child.output or ""
    why = f": {child.error}" if child.error else ""
    raise ToolError(f"The agent {agent!r} stopped without an answer ({child.stop_reason}){why} (run {child.pk}).")


def _start(parent: Run, agent: str, text: str, call_id: str) -> Run:
    """Store the child run of this call (a background parent's is queued in the same transaction), within the
    parent's budgets. A refusal (depth, no time left, quota, an agent gone) is the call's error observation."""
    depth = parent.depth + 1
    if depth > settings.AGENT_MAX_DEPTH:
        raise ToolError(f"Sub-agents may nest {settings.AGENT_MAX_DEPTH} deep; this call would be deeper.")
    left_s = (parent.deadline - timezone.now()).total_seconds()
    if left_s < 1:
        raise ToolError("No time is left in this run's budget for a sub-agent.")
    turns_left = max(1, parent.max_turns - (parent.turns - parent.attempt_start_turn))
    background = parent.mode == RunMode.BACKGROUND
    step = Step.objects.filter(run_id=parent.pk, kind="model").aggregate(last=Max("index"))["last"]
    options = submit.RunOptions(
        input=text,
        agent=agent,
        mode=RunMode.BACKGROUND if background else RunMode.SYNC,
        child_of=submit.ChildLink(parent_id=parent.pk, step=step, call_id=call_id, depth=depth),
    )
    try:
        options = submit.with_agent(options)
        budget: dict[str, Any] = {
            "max_turns": min(options.max_turns or settings.AGENT_DEFAULT_MAX_TURNS, turns_left),
            "timeout_s": min(options.timeout_s or settings.AGENT_DEFAULT_TIMEOUT_S, left_s),
            "sensitive_tools": tuple(sorted({*options.sensitive_tools, *parent.sensitive_tools})),
        }
        options = replace(options, **budget)
        with transaction.atomic():
            child = submit.start_run(owner=parent.owner, options=options)
            if child.deadline > parent.deadline:  # `left_s` was measured a moment before the child's start
                child.deadline = parent.deadline
                Run.objects.filter(pk=child.pk).update(deadline=child.deadline)
            if background:
                drive.enqueue(child)
    except IntegrityError:  # another process started this call's child first
        return Run.objects.get(parent_id=parent.pk, parent_call_id=call_id)
    except (InvalidRequest, QuotaExceeded) as exc:
        raise ToolError(f"The agent {agent!r} could not start: {_message(exc)}") from None
    log.info("child run started", extra={"run_id": str(child.pk), "parent_id": str(parent.pk), "agent": agent})
    return child


def _message(exc: Exception) -> str:
    detail = getattr(exc, "detail", None)
    if isinstance(detail, dict):
        return " ".join(f"{field}: {' '.join(map(str, msgs))}" for field, msgs in detail.items())
    return str(exc)


def install() -> None:
    """Give runs their sub-agents' tools (called when the app is ready)."""
    runtime.add_tool_source(tools_of)
