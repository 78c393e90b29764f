"""The agent runtime: approvals, rate limits, leases, live runs, per-run limits, quotas, spend, retention, threads,
sub-agents and images (docs/configuration.md#runs says what each setting means)."""

from reactsite.settings.base import env

AGENT_DEFAULT_PROTOCOL = env("AGENT_DEFAULT_PROTOCOL", default="tools")
# A thread's runs past the history budget: dropped (truncate) or condensed by the model (summarize).
AGENT_DEFAULT_HISTORY = env("AGENT_DEFAULT_HISTORY", default="truncate")
AGENT_SENSITIVE_TOOLS = env.list("AGENT_SENSITIVE_TOOLS", default=["search"])
AGENT_SELF_APPROVAL = env.bool("AGENT_SELF_APPROVAL", default=False)
AGENT_RATE_LIMIT = env("AGENT_RATE_LIMIT", default="30/m")
AGENT_MAX_INPUT_CHARS = env.int("AGENT_MAX_INPUT_CHARS", default=8000)
AGENT_MAX_TOOL_OUTPUT_CHARS = env.int("AGENT_MAX_TOOL_OUTPUT_CHARS", default=4000)
# A run's lease: short, renewed by the process working on it; a dead worker's runs are taken over this fast.
AGENT_LEASE_S = env.float("AGENT_LEASE_S", default=15.0)
# How event streams learn of new steps: auto (Redis pub/sub with REDIS_URL, else PostgreSQL LISTEN/NOTIFY on
# PostgreSQL, else polling), or redis, postgres, poll.
AGENT_DOORBELL = env.str("AGENT_DOORBELL", default="auto")
# Live runs: models stream their replies and the text as it is written, and tool calls as they start and end, go to
# the run's event streams (over the doorbell's channel; on the embedded default, Unix sockets in AGENT_LIVE_DIR, by
# default a directory of the temporary directory named after the database). Off: plain model calls, steps only.
AGENT_LIVE = env.bool("AGENT_LIVE", default=True)
AGENT_LIVE_DIR = env.str("AGENT_LIVE_DIR", default="")
# The offline demo model writes a streamed reply word by word with this pause between words (0: all at once).
AGENT_DEMO_WORD_PAUSE_S = env.float("AGENT_DEMO_WORD_PAUSE_S", default=0.03)
AGENT_DEFAULT_MAX_TURNS = 8
# A server or worker process builds what its first runs need before it serves (SDKs, tables, the embedding model:
# about a second of CPU). Off: it starts that much faster and its first runs pay instead (a test suite's processes).
AGENT_WARM_UP = env.bool("AGENT_WARM_UP", default=True)
AGENT_DEFAULT_TIMEOUT_S = 60.0
# Approvals: how long a paused call waits for a human before the system denies it (reason "expired").
AGENT_APPROVAL_TTL_S = env.int("AGENT_APPROVAL_TTL_S", default=86400)

# Quotas: tokens per user per UTC day (0: none); a user's own override is set in the admin (TokenQuota).
AGENT_DAILY_TOKEN_QUOTA = env.int("AGENT_DAILY_TOKEN_QUOTA", default=0)
# The output a model call without max_output_tokens is reserved for under a quota (the Anthropic provider's own cap).
AGENT_QUOTA_OUTPUT_ESTIMATE = env.int("AGENT_QUOTA_OUTPUT_ESTIMATE", default=2048)
# Safety and cost (docs/limits.md, docs/guardrails.md, docs/fallback-models.md, docs/cost.md). Per-run limits: a
# default for runs that give none (0: none) and a ceiling no agent or run may exceed (0: none; with a ceiling and no
# default, the ceiling is the default). Per-tool limits by tool name as JSON, e.g. {"search": 5}.
AGENT_DEFAULT_MAX_TOTAL_TOKENS = env.int("AGENT_DEFAULT_MAX_TOTAL_TOKENS", default=0)
AGENT_MAX_TOTAL_TOKENS_CEILING = env.int("AGENT_MAX_TOTAL_TOKENS_CEILING", default=0)
AGENT_DEFAULT_MAX_TOOL_CALLS = env.int("AGENT_DEFAULT_MAX_TOOL_CALLS", default=0)
AGENT_MAX_TOOL_CALLS_CEILING = env.int("AGENT_MAX_TOOL_CALLS_CEILING", default=0)
AGENT_DEFAULT_TOOL_LIMITS = env.json("AGENT_DEFAULT_TOOL_LIMITS", default={})
# Guardrails: a team's own checks, by the name an agent's guardrail {"type": "hook", "name": ...} gives, as dotted
# paths, e.g. {"no_competitors": "myteam.checks.no_competitors"}; the moderation endpoint's model (OpenAI's).
AGENT_GUARDRAIL_HOOKS = env.json("AGENT_GUARDRAIL_HOOKS", default={})
AGENT_MODERATION_MODEL = env.str("AGENT_MODERATION_MODEL", default="omni-moderation-latest")
# Spend: the currency costs are shown in; prices per million tokens over the repository's table (agents/usage/
# prices.json, in USD: used only when the currency is USD), as JSON, e.g.
# {"openai/gpt-4o-mini": {"input": "0.15", "output": "0.60", "cached_input": "0.075"}}; staff add more in the admin.
AGENT_CURRENCY = env.str("AGENT_CURRENCY", default="USD")
AGENT_PRICES = env.json("AGENT_PRICES", default={})
# A daily spend quota per user in AGENT_CURRENCY (a decimal, 0: none); a user's own override in the admin.
AGENT_DAILY_COST_QUOTA = env.str("AGENT_DAILY_COST_QUOTA", default="0")

# Retention: finished runs older than this many days are pruned hourly by the worker (0: keep forever).
AGENT_RETENTION_DAYS = env.int("AGENT_RETENTION_DAYS", default=0)
# Threads: how much of a conversation's past a new run's model sees (the oldest runs are left out first).
AGENT_THREAD_HISTORY_RUNS = env.int("AGENT_THREAD_HISTORY_RUNS", default=20)
AGENT_THREAD_HISTORY_CHARS = env.int("AGENT_THREAD_HISTORY_CHARS", default=24000)
# Sub-agents (an agent's `agents`): how deep a tree of child runs may go (a run a client starts is depth 0).
AGENT_MAX_DEPTH = env.int("AGENT_MAX_DEPTH", default=3)
# Images in a run's input (docs/api.md#images-on-a-run): at most this many per input (0: `input` is a string only),
# each at most this many bytes decoded. The request body's own bound (AGENT_MAX_RUN_BODY_BYTES) comes first.
AGENT_MAX_IMAGES = env.int("AGENT_MAX_IMAGES", default=8)
AGENT_MAX_IMAGE_BYTES = env.int("AGENT_MAX_IMAGE_BYTES", default=5 * 1024 * 1024)
# Documents in a run's input (docs/documents.md): PDF and plain text, at most this many per input (0: none), each at
# most this many bytes (decoded, or fetched from a URL within the fetch's timeout). Stored once per owner and content
# (agents.models.Document) and referenced by the runs that use them.
AGENT_MAX_DOCUMENTS = env.int("AGENT_MAX_DOCUMENTS", default=4)
AGENT_MAX_DOCUMENT_BYTES = env.int("AGENT_MAX_DOCUMENT_BYTES", default=5 * 1024 * 1024)
AGENT_DOCUMENT_FETCH_TIMEOUT_S = env.float("AGENT_DOCUMENT_FETCH_TIMEOUT_S", default=10.0)
# Evals (docs/evals.md): the judge model of `judge` checks without a model of their own ("provider/model"; empty: the
# model under test), and how many cases an eval runs at once by default (0: 4 on PostgreSQL, 1 on SQLite, whose one
# writer at a time would have the cases wait on each other's locks).
AGENT_EVAL_JUDGE_MODEL = env.str("AGENT_EVAL_JUDGE_MODEL", default="")
AGENT_EVAL_CONCURRENCY = env.int("AGENT_EVAL_CONCURRENCY", default=0)
