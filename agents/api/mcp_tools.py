"""The tools of `/mcp` (agents/api/mcp_server.py, docs/mcp-server.md): each `Agent` as an MCP tool, and a run as the
result of a call to it.

`agent_tool` is an agent as `tools/list` lists it: its name, what it is good for, an input schema of
`{"input": "<the task>"}` and an output schema of the run's facts. The view checks a call's arguments with
`input_problem`, submits the run through the service layer and answers with `run_result`: the final answer, why there
is none, or the tool calls a paused run waits for and how to decide them. A call that started no run is `failed`: an
error result the calling model reads and can correct, not a JSON-RPC error.

As in the view, the SDK's types (`mcp.types`) are imported where a result is made: a worker that never serves `/mcp`
never loads the SDK.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.urls import NoReverseMatch, reverse
from django.utils.text import Truncator

from agents.models import Agent, RunStatus, StopReason
from agents.permissions import can_decide
from agents.runs import selectors

if TYPE_CHECKING:
    from mcp import types

DESCRIPTION_CHARS = 300
ARGUMENTS_SHOWN = 500  # characters of a waiting call's arguments in the text of a paused run's answer
INPUT_SCHEMA_DESCRIPTION = "The task for the agent, complete: it sees nothing else of this conversation."
OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string", "description": "The run's id: GET /api/v1/runs/{id} has it with its steps."},
        "status": {
            "type": "string",
            "description": "done; awaiting_approval; queued or running once handed to a worker",
        },
        "stop_reason": {"type": ["string", "null"], "description": "Why it ended (docs/api.md, stop reasons)."},
        "output": {"type": ["string", "null"], "description": "The final answer; null without one."},
        "output_json": {"description": "With the agent's output schema: the final answer, parsed."},
        "error": {"type": ["string", "null"], "description": "Why a run that failed failed, when it says."},
        "turns": {"type": "integer"},
        "url": {"type": "string", "description": "The run in the API."},
        "pending_actions": {
            "type": "array",
            "description": "The tool calls waiting for a decision (call_id, tool, arguments, expires_at).",
            "items": {"type": "object"},
        },
    },
    "required": ["run_id", "status", "stop_reason", "output", "url"],
}


def agent_tool(agent: Agent) -> types.Tool:
    """The agent as `tools/list` lists it: a tool of its name that takes `{"input": "…"}`."""
    from mcp import types

    schema = {
        "type": "object",
        "properties": {
            "input": {
                "type": "string",
                "minLength": 1,
                "maxLength": settings.AGENT_MAX_INPUT_CHARS,
                "description": INPUT_SCHEMA_DESCRIPTION,
            }
        },
        "required": ["input"],
        "additionalProperties": False,
    }
    return types.Tool(
        name=agent.name, description=_description(agent), input_schema=schema, output_schema=OUTPUT_SCHEMA
    )


def _description(agent: Agent) -> str:
    """What the agent is good for, where it says (a `description`); else the first line of its instructions; else
    what any agent does."""
    said = (getattr(agent, "description", "") or "").strip()
    if said:
        return Truncator(said).chars(DESCRIPTION_CHARS)
    first = next((line.strip() for line in (agent.instructions or "").splitlines() if line.strip()), "")
    if first:
        return Truncator(f"Agent {agent.name!r}: {first}").chars(DESCRIPTION_CHARS)
    return (
        f"Agent {agent.name!r}: works on the task given as `input` with its tools, step by step, and answers with its "
        "final answer."
    )


def input_problem(arguments: dict[str, Any]) -> str | None:
    """Why the arguments are not `{"input": "<a task>"}` as the tool's input schema says, or None (a tool error the
    calling model can correct, not a protocol error)."""
    extra = sorted(k for k in arguments if k != "input")
    if extra:
        return f"Unknown argument(s): {', '.join(extra)}. The only argument is `input`, the task as a string."
    value = arguments.get("input")
    if not isinstance(value, str) or not value.strip():
        return "The argument `input` is required: the task for the agent, as a non-empty string."
    if "\x00" in value:
        return "The argument `input` may not contain a NUL character."
    if len(value) > settings.AGENT_MAX_INPUT_CHARS:
        return f"The argument `input` is longer than {settings.AGENT_MAX_INPUT_CHARS} characters."
    return None


def run_result(request, run) -> types.CallToolResult:
    """A run as the call's result: its answer, why it has none (an error), or what it waits for."""
    url = request.build_absolute_uri(f"/api/v1/runs/{run.pk}")
    facts: dict[str, Any] = {
        "run_id": str(run.pk),
        "status": run.status,
        "stop_reason": run.stop_reason,
        "output": run.output,
        "error": run.error,
        "turns": run.turns,
        "url": url,
    }
    if run.status == RunStatus.DONE and run.stop_reason == StopReason.FINAL_ANSWER:
        if run.output_json is not None:
            facts["output_json"] = run.output_json
        line = f"Run {run.pk}: final answer after {run.turns} turn(s); GET {url} has its steps."
        return _result([run.output or "", line], facts)
    if run.status == RunStatus.DONE:
        why = f"The agent stopped without an answer: {run.stop_reason}" + (f" ({run.error})" if run.error else "")
        return _result([f"{why}.", f"Run {run.pk}; GET {url} has its steps."], facts, is_error=True)
    if run.status == RunStatus.AWAITING_APPROVAL:
        pending = [
            {**action, "expires_at": action["expires_at"].isoformat() if action["expires_at"] else None}
            for action in selectors.pending_actions(run)
        ]
        facts["pending_actions"] = pending
        return _result([_paused_text(request, run, url, pending)], facts)
    # Queued or running: handed to a worker (this process is stopping); the run goes on in the background.
    return _result(
        [f"Run {run.pk} goes on in the background ({run.status}); GET {url} has its answer once it is done."], facts
    )


def _paused_text(request, run, url: str, pending: list[dict]) -> str:
    calls = (
        "\n".join(
            f"- {a['tool']} with {Truncator(json.dumps(a['arguments'], ensure_ascii=False)).chars(ARGUMENTS_SHOWN)} "
            f"(call {a['call_id']}" + (f", expires {a['expires_at']})" if a["expires_at"] else ")")
            for a in pending
        )
        or f"- GET {url} shows the call that waits."
    )
    who = (
        "You may decide it yourself."
        if can_decide(request.user, run)
        else "A reviewer decides it (a user with the permission agents.review_run)."
    )
    lines = [
        f"Run {run.pk} is paused: it waits for a human to approve a tool call before it goes on.",
        calls,
        f'{who} To approve: POST {url}/advance with {{"approval": true}} (to deny: {{"approval": false}}).',
    ]
    console = _console_url(request, run)
    if console:
        lines.append(f"Or decide it in the console: {console}")
    lines.append(f"The run then goes on; GET {url} has its answer once it is done.")
    return "\n".join(line for line in lines if line)


def _console_url(request, run) -> str | None:
    try:
        return request.build_absolute_uri(reverse("admin:agents_run_change", args=[run.pk]))
    except NoReverseMatch:
        return None


def _result(texts: list[str], facts: dict[str, Any] | None = None, *, is_error: bool = False) -> types.CallToolResult:
    from mcp import types

    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text) for text in texts],
        structured_content=facts,
        is_error=is_error,
    )


def failed(message: str) -> types.CallToolResult:
    """A call that started no run: an error result the calling model reads."""
    return _result([message], is_error=True)


def detail_text(detail: Any) -> str:
    """A service error's detail (a string, a list, or messages by field) as one line."""
    if isinstance(detail, dict):
        return "; ".join(f"{field}: {detail_text(value)}" for field, value in detail.items())
    if isinstance(detail, list | tuple):
        return " ".join(detail_text(value) for value in detail)
    return str(detail)
