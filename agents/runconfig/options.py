"""The one list of a run's options: each option's name, type, bounds, where its default comes from, who may set it
and its help. Every door (the API's run body and its schema, schedules, the console, forks, child runs, the CLI)
reads this list rather than restating it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations

# The bounds of the integer columns options are stored in (the same on every database Django supports).
_RANGES = BaseDatabaseOperations.integer_field_ranges
SMALL_COLUMN_MAX = _RANGES["PositiveSmallIntegerField"][1]
COLUMN_MAX = _RANGES["PositiveIntegerField"][1]
# The most any per-run limit (or per-tool limit) may be: its column's bound, so more is a 400, never a 500.
LIMIT_MAX = COLUMN_MAX


class RunProtocol(models.TextChoices):  # type: ignore[misc]  # Django is untyped here
    TOOLS = "tools"
    REACT = "react"


class HistoryMode(models.TextChoices):  # type: ignore[misc]  # Django is untyped here
    """What a run on a thread does with the turns past the history budget (docs/threads.md#long-threads)."""

    TRUNCATE = "truncate"  # dropped, oldest first
    SUMMARIZE = "summarize"  # condensed by the model into the thread's summary, extended by later runs


INTEGER = (int,)
NUMBER = (int, float)
BOOLEAN = (bool,)


@dataclass(frozen=True)
class Option:
    """One run option. `low`/`high`: its bounds (a request's 400 and an agent's form say the same); `setting`: the
    setting its default comes from when neither the request nor the agent gives it (else `default`); `ceiling`: the
    setting that caps it (0 there: none). `agent`: an agent may set it (its value is the default of its runs);
    `schedule`: a schedule may carry it; `fork`: a fork may change it. `limit`: a per-run limit, whose bound is the
    column's and whose message says so."""

    name: str
    types: tuple[type, ...]
    described: str = ""  # what `Expected …` says for a value of another type (schedules' stored options)
    low: float | None = None
    high: float | None = None
    default: object = None
    setting: str | None = None
    ceiling: str | None = None
    agent: bool = True
    request: bool = True
    schedule: bool = True
    fork: bool = False
    limit: bool = False
    max_length: int | None = None  # a string's, or a list's items (each a string this long at most)
    max_items: int | None = None
    items: type | None = None  # a list's items, or an object's values
    choices: tuple[tuple[str, str], ...] = ()  # (value, label) pairs
    blank: bool = False  # a string may be empty
    help: str = ""  # "{default}": the default's value, from its setting

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None


_TOKENS_HELP = (
    "Tokens all its model calls may use: it stops (usage_limit) before a call that would exceed them. Default: the "
    "agent's, else the server's (AGENT_DEFAULT_MAX_TOTAL_TOKENS); never above the server's ceiling."
)
_CALLS_HELP = (
    "Tool calls it may make: it stops (usage_limit) before one more. Default: the agent's, else the server's "
    "(AGENT_DEFAULT_MAX_TOOL_CALLS); never above the server's ceiling."
)

# In the order the run body declares them (the served schema's order).
OPTIONS: tuple[Option, ...] = (
    Option("protocol", (str,), setting="AGENT_DEFAULT_PROTOCOL", choices=tuple(RunProtocol.choices)),
    Option("provider", (str,), setting="AGENT_DEFAULT_PROVIDER", fork=True, max_length=32),
    Option("model", (str,), default="", fork=True, max_length=200),
    Option(
        "max_turns",
        INTEGER,
        low=1,
        high=50,
        setting="AGENT_DEFAULT_MAX_TURNS",
        fork=True,
        help="Default: the agent's, or {default}.",
    ),
    Option("max_reflections", INTEGER, low=0, high=5, default=0, agent=False, schedule=False),
    Option(
        "timeout_s",
        NUMBER,
        low=1,
        high=600,
        setting="AGENT_DEFAULT_TIMEOUT_S",
        fork=True,
        help="Default: the agent's, or {default}.",
    ),
    Option("tools", (list,), "a list of tool names", items=str, max_length=64, max_items=64),
    Option("sensitive_tools", (list,), default=(), schedule=False, items=str, max_length=64, max_items=64),
    Option(
        "approval_ttl_s",
        INTEGER,
        low=60,
        high=604800,
        setting="AGENT_APPROVAL_TTL_S",
        agent=False,
        schedule=False,
        help="Seconds a paused call waits before it expires.",
    ),
    Option("instructions", (str,), default="", fork=True, max_length=8000, blank=True),
    Option("temperature", NUMBER, low=0, high=2, fork=True),
    Option("max_output_tokens", INTEGER, low=1, high=32000, fork=True),
    Option(
        "output_schema",
        (dict,),
        help="A JSON Schema the final answer must satisfy: any JSON object, with no NUL character in a key or string "
        "inside it (else 400).",
    ),
    Option("agents", (list,), request=False, schedule=False, items=str),
    Option(
        "max_total_tokens",
        INTEGER,
        low=1,
        high=LIMIT_MAX,
        setting="AGENT_DEFAULT_MAX_TOTAL_TOKENS",
        ceiling="AGENT_MAX_TOTAL_TOKENS_CEILING",
        limit=True,
        help=_TOKENS_HELP,
    ),
    Option(
        "max_tool_calls",
        INTEGER,
        low=1,
        high=LIMIT_MAX,
        setting="AGENT_DEFAULT_MAX_TOOL_CALLS",
        ceiling="AGENT_MAX_TOOL_CALLS_CEILING",
        limit=True,
        help=_CALLS_HELP,
    ),
    Option(
        "tool_limits",
        (dict,),
        setting="AGENT_DEFAULT_TOOL_LIMITS",
        items=int,
        low=1,
        high=LIMIT_MAX,
        help='Calls per tool, e.g. {"search": 3}: a call past it is answered "exhausted" and the model goes on.',
    ),
    Option(
        "guardrails",
        (list,),
        "a list of objects",
        items=dict,
        max_items=20,
        help="Checks of the input, the final answer and tool calls, added to the agent's (docs/guardrails.md).",
    ),
    Option(
        "fallback_models",
        (list,),
        "a list of names",
        items=str,
        max_length=250,
        max_items=5,
        help='"provider/model" tried in order when its model fails with a retryable error or is rate-limited.',
    ),
    Option(
        "prompt_cache",
        BOOLEAN,
        "true or false",
        help="Mark the stable prefix (instructions, tool definitions) for the provider's prompt cache (Anthropic "
        "cache_control breakpoints). Default: the agent's, else on for Anthropic (OpenAI caches a stable prefix by "
        "itself).",
    ),
    Option(
        "history",
        (str,),
        setting="AGENT_DEFAULT_HISTORY",
        choices=tuple(HistoryMode.choices),
        help="With thread_id: the turns past the history budget are dropped (truncate) or condensed by the model into "
        "the thread's summary (summarize), which later runs extend. Default: the agent's, or {default}.",
    ),
)

BY_NAME = {option.name: option for option in OPTIONS}
NAMES = tuple(BY_NAME)
AGENT_OPTIONS = tuple(o.name for o in OPTIONS if o.agent)
REQUEST_OPTIONS = tuple(o.name for o in OPTIONS if o.request)
FORK_OPTIONS = tuple(o.name for o in OPTIONS if o.fork)
# The bounds of a run's settings: for a request (the served schema and its 400s) and an agent alike.
REQUEST_LIMITS: dict[str, tuple[Any, Any]] = {
    o.name: (o.low, o.high) for o in OPTIONS if o.bounded and not o.limit and o.types != (dict,)
}
RUN_LIMITS = {name: bounds for name, bounds in REQUEST_LIMITS.items() if BY_NAME[name].agent}
LIMITS = tuple(o for o in OPTIONS if o.limit)


def schedule_options() -> tuple[str, ...]:
    """What a schedule's options may hold, in order: the agent to start from, then the options a schedule carries."""
    return ("agent", *(o.name for o in OPTIONS if o.schedule and o.request))
