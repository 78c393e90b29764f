"""How run options are stored: two abstract models, one per shape. An agent's columns are "unset means inherit"
(empty: the run takes the request's, else the server's default); a run's are the resolved values it ran with
(`RunConfig`), so editing an agent never changes the record of a run that already happened.

`Agent` and `Run` (agents/models.py) inherit them: the tables' columns are these, and `.config` reads them through
the option list."""

from __future__ import annotations

from typing import Any

from django.db import models

from agents.runconfig.config import RunConfig, config_of
from agents.runconfig.options import AGENT_OPTIONS, HistoryMode, RunProtocol
from agents.runconfig.resolve import limit_defaults, resolve


class AgentColumns(models.Model):
    """An agent's options: each empty (null, "" or absent) means a run of it takes the request's or the default."""

    instructions = models.TextField(blank=True, default="", help_text="added to the system prompt after the rules")
    provider = models.CharField(max_length=32, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    protocol = models.CharField(max_length=8, blank=True, default="", choices=[("tools", "tools"), ("react", "react")])
    tools = models.JSONField(null=True, blank=True, help_text="tool names; empty: every enabled tool")
    # Other agents this one may hand a task to: each is a tool `agent_<name>` whose call starts a child run.
    agents = models.JSONField(
        null=True, blank=True, help_text="names of agents it may call as tools (agent_<name>), each a child run"
    )
    sensitive_tools = models.JSONField(default=list, blank=True, help_text="widens the approval gate")
    max_turns = models.PositiveSmallIntegerField(null=True, blank=True)
    timeout_s = models.FloatField(null=True, blank=True)
    temperature = models.FloatField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_schema = models.JSONField(null=True, blank=True, help_text="a JSON Schema the final answer must satisfy")
    # Safety and cost (docs/safety-and-cost.md): per-run limits, guardrails, fallback models.
    max_total_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="tokens of all its model calls; the run stops (usage_limit) before more"
    )
    max_tool_calls = models.PositiveIntegerField(
        null=True, blank=True, help_text="tool calls a run may make; the run stops (usage_limit) before more"
    )
    tool_limits = models.JSONField(
        null=True, blank=True, help_text='calls per tool, e.g. {"search": 3}: then the model is told it is exhausted'
    )
    guardrails = models.JSONField(
        null=True, blank=True, help_text="checks of the input, the final answer and tool calls (a list of objects)"
    )
    fallback_models = models.JSONField(
        null=True, blank=True, help_text='"provider/model" tried in order when the model fails or is rate-limited'
    )
    prompt_cache = models.BooleanField(
        null=True,
        blank=True,
        help_text="mark instructions and tool definitions for the prompt cache; unknown: on for Anthropic",
    )
    history = models.CharField(
        max_length=16, blank=True, default="", choices=HistoryMode.choices,
        help_text="on a thread, past the history budget: truncate (drop) or summarize",
    )  # fmt: skip

    class Meta:
        abstract = True

    def option_values(self) -> dict[str, Any]:
        """Its options by name, as stored (empty ones included): what a run of it starts from."""
        return {name: getattr(self, name) for name in AGENT_OPTIONS}

    @property
    def config(self) -> RunConfig:
        """What a run of it that gives nothing runs with: its options over the server's defaults (the model: its
        own, else "" for the provider's default)."""
        given = {name: value for name, value in self.option_values().items() if value not in (None, "")}
        return resolve({**given, **limit_defaults(given)})


class RunColumns(models.Model):
    """The options a run ran with, resolved: its agent's and the request's over the server's defaults."""

    instructions = models.TextField(blank=True, default="")
    temperature = models.FloatField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_schema = models.JSONField(null=True, blank=True)
    # The agents this run may call (tools `agent_<name>`).
    subagents = models.JSONField(default=list, blank=True)
    # Safety and cost: the limits, guardrails and fallback models it ran with (its agent's and the request's).
    max_total_tokens = models.PositiveIntegerField(null=True, blank=True)
    max_tool_calls = models.PositiveIntegerField(null=True, blank=True)
    tool_limits = models.JSONField(default=dict, blank=True)
    guardrails = models.JSONField(default=list, blank=True)
    fallback_models = models.JSONField(default=list, blank=True)
    protocol = models.CharField(max_length=8, choices=RunProtocol.choices, default=RunProtocol.TOOLS)
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=200)
    max_turns = models.PositiveSmallIntegerField(default=8)
    timeout_s = models.FloatField(default=60.0)
    tools = models.JSONField(default=list)
    sensitive_tools = models.JSONField(default=list)
    max_reflections = models.PositiveSmallIntegerField(default=0)
    # Approvals: how long a paused call may wait for a human (seconds).
    approval_ttl_s = models.PositiveIntegerField(default=86400)
    prompt_cache = models.BooleanField(default=False)
    history_mode = models.CharField(max_length=16, choices=HistoryMode.choices, default=HistoryMode.TRUNCATE)

    class Meta:
        abstract = True

    @property
    def config(self) -> RunConfig:
        """What it runs with, as one value (a fork or a child copies this)."""
        return config_of(self)
