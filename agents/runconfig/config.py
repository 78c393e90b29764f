"""`RunConfig`: the options a run runs with, resolved (the request's over its agent's over the server's defaults),
as one typed value. A run row stores it in its columns (agents/runconfig/storage.py) and gives it back as
`run.config`; a fork or a child copies it whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.runconfig.options import NAMES

# The run column of an option stored under another name (`agent` names the agent a run started from; `history` holds
# the earlier turns of its thread as its model saw them).
RUN_COLUMNS = {"agents": "subagents", "history": "history_mode"}


@dataclass(frozen=True)
class RunConfig:
    """What a run runs with: every option of agents/runconfig/options.py, resolved. Lists and objects are the
    stored JSON values: treat them as read-only."""

    protocol: str
    provider: str
    model: str
    max_turns: int
    max_reflections: int
    timeout_s: float
    tools: list[str]
    sensitive_tools: list[str]
    approval_ttl_s: int
    instructions: str
    temperature: float | None
    max_output_tokens: int | None
    output_schema: dict[str, Any] | None
    agents: list[str]
    max_total_tokens: int | None
    max_tool_calls: int | None
    tool_limits: dict[str, int]
    guardrails: list[dict[str, Any]]
    fallback_models: list[str]
    prompt_cache: bool
    history: str

    def columns(self) -> dict[str, Any]:
        """The run-row columns that store it (fresh lists and objects: the row never shares them)."""
        return {RUN_COLUMNS.get(name, name): _fresh(getattr(self, name)) for name in NAMES}

    def values(self) -> dict[str, Any]:
        """Its options by name."""
        return {name: getattr(self, name) for name in NAMES}


def _fresh(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def config_of(row: Any) -> RunConfig:
    """The config a run row stores (its columns, by the option list)."""
    return RunConfig(**{name: getattr(row, RUN_COLUMNS.get(name, name)) for name in NAMES})
