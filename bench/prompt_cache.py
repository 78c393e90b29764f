"""`manage.py bench --only prompt_cache`: what a 10-turn Anthropic run costs with and without the prompt cache
(the `prompt_cache` option, docs/cost.md#prompt-caching), at Anthropic's documented prices. Offline, in-process,
well under a second; it stores nothing.

The engine drives the same run twice, `prompt_cache` on and off: an agent with long instructions (~3,000 tokens)
and eight tools (~1,000 tokens), nine tool calls each answered with ~200 tokens, then the answer: ten model calls.
Its model builds each request exactly as the Anthropic provider sends it (`anthropic_provider.build_kwargs`) and
bills it as Anthropic's cache does: the request's blocks in Anthropic's order (tools, then system, then messages) up
to a cache breakpoint are a prefix; a prefix sent before (the same bytes) is read from the cache, the longest one
sent for the first time (of at least MIN_CACHEABLE tokens) is written to it, the rest of the prompt is plain input.
Turn 1 writes the prefix, turns 2-10 read it (a read refreshes its 5 minutes); a prefix that changed between turns
would be written again and show here. Tokens are estimated at 4 characters of a block's JSON each. Every reply's
usage is read by `anthropic_provider.parse_usage` and priced by `Price.cost_nanos` (agents/usage/prices.py) at
prices.json's price of PRICED (cache writes at CACHE_WRITE_MULTIPLIER times the input price), the engine summing
each run's cost as it sums a real run's.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from agents.engine import ModelReply, ModelRequest, RunState, ToolCall, Toolset, advance
from agents.providers.anthropic_provider import build_kwargs, parse_usage
from agents.tools import Tool
from agents.usage.prices import NANOS, Price, money_text, repository_table, to_nanos
from bench.support import Row

PRICED = "anthropic/claude-sonnet-4-0"
TURNS = 10
OUTPUT_TOKENS = 150  # each reply's output tokens (a tool call or the answer)
MIN_CACHEABLE = 1024  # Anthropic caches no shorter prefix (Claude Sonnet 4's minimum)
CHARS_PER_TOKEN = 4

# The agent: long standing instructions and eight tools, what a prompt cache is for.
INSTRUCTIONS = "\n".join(
    f"Rule {n}: when a customer asks about topic {n}, check the knowledge base first, quote the article you used, "
    f"keep the answer under five sentences, never promise a refund, and escalate to a human after two failed tries."
    for n in range(1, 61)
)
TOOL_NAMES = ("kb_search", "kb_article", "order_status", "refund_policy", "shipping", "account", "escalate", "notes")


def _tool(name: str) -> Tool:
    description = (
        f"The {name.replace('_', ' ')} service of the support desk: give it the customer's question in plain words "
        "and, when known, the order number; it answers with what it found, the article ids it used and how sure it "
        "is. Call it before answering from memory, at most once per question, and quote its article ids."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "the customer's question, in plain words"},
            "order": {"type": "string", "description": "the order number, when the customer gave one"},
        },
        "required": ["query"],
    }
    result = f"{name}: " + " ".join(f"Article {name}-{n} says the usual steps apply to this case." for n in range(12))
    return Tool(name, description, parameters, lambda arguments, context: result, inline=True, instant=True)


def tokens(block: dict[str, Any]) -> int:
    """A block's tokens, estimated from its JSON (without its cache breakpoint: the same with the cache or not)."""
    plain = {key: value for key, value in block.items() if key != "cache_control"}
    return math.ceil(len(json.dumps(plain, separators=(",", ":"))) / CHARS_PER_TOKEN)


def rendered(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's blocks in the order Anthropic reads them for its cache: tools, system, then the messages'."""
    system = body.get("system") or []
    blocks = [*body.get("tools", []), *([{"type": "text", "text": system}] if isinstance(system, str) else system)]
    for message in body["messages"]:
        content = message["content"]
        blocks += [{"type": "text", "text": content}] if isinstance(content, str) else content
    return blocks


@dataclass
class AnthropicCache:
    """A scripted Anthropic model billing each call as Anthropic's prompt cache would (the module's docstring)."""

    price: Price
    cached: set[str] = field(default_factory=set)
    calls: int = 0

    def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        usage = parse_usage(self.usage(build_kwargs(PRICED.split("/")[1], 2048, request)))
        if self.calls < TURNS:
            calls = (ToolCall(f"toolu_{self.calls}", TOOL_NAMES[self.calls % len(TOOL_NAMES)], {"query": "where?"}),)
            return ModelReply(tool_calls=calls, usage=usage, cost_nanos=self.price.cost_nanos(usage))
        return ModelReply(text="Your order ships on Monday.", usage=usage, cost_nanos=self.price.cost_nanos(usage))

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        """The call's usage as Anthropic reports it: input, cache writes, cache reads and output tokens."""
        blocks = rendered(body)
        sizes = [tokens(block) for block in blocks]
        prefixes = [  # (key, tokens) of the prefix up to each breakpoint, shortest first
            (json.dumps(blocks[: i + 1], sort_keys=True), sum(sizes[: i + 1]))
            for i, block in enumerate(blocks)
            if "cache_control" in block
        ]
        prefixes = [(key, size) for key, size in prefixes if size >= MIN_CACHEABLE]
        read = max((size for key, size in prefixes if key in self.cached), default=0)
        written = max([0, *(size - read for key, size in prefixes if key not in self.cached)])
        self.cached.update(key for key, _ in prefixes)
        return {
            "input_tokens": sum(sizes) - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": OUTPUT_TOKENS,
        }


@dataclass
class Result:
    """One run's figures: its cost (billionths of a dollar) and tokens, summed over its calls' steps."""

    cost_nanos: int
    prompt: int
    written: int
    read: int
    turns: int
    usages: list[dict[str, int]]  # each model step's usage, as the step stores it


def drive(price: Price, prompt_cache: bool) -> Result:
    """The 10-turn run through the engine, with the prompt cache or without."""
    toolset = Toolset({name: _tool(name) for name in TOOL_NAMES})
    state = RunState(
        input="Where is my order 1234, and can I still change the address?",
        tools=list(TOOL_NAMES),
        max_turns=TURNS,
        instructions=INSTRUCTIONS,
        prompt_cache=prompt_cache,
    )
    model = AnthropicCache(price)
    while not state.done:
        state, _events = advance(state, model, toolset, time.time)
    usages = [step["usage"] for step in state.steps if step["kind"] == "model"]
    return Result(
        cost_nanos=state.cost_nanos or 0,
        prompt=sum(u["prompt_tokens"] for u in usages),
        written=sum(u.get("cache_write_tokens", 0) for u in usages),
        read=sum(u.get("cached_tokens", 0) for u in usages),
        turns=state.turns,
        usages=usages,
    )


def measure() -> list[Row]:
    price = repository_table()[1][PRICED]
    off, on = drive(price, prompt_cache=False), drive(price, prompt_cache=True)
    model = PRICED.split("/")[1]
    cached = price.input if price.cached_input is None else price.cached_input
    usd = lambda value: "$" + money_text(to_nanos(value))  # noqa: E731
    prices = (
        f"{model} at prices.json's {usd(price.input)}/MTok input, {usd(price.output)}/MTok output, "
        f"{usd(price.cache_write)}/MTok cache write, {usd(cached)}/MTok cache read"
    )
    run = f"{on.turns}-turn Anthropic-shaped run ({off.prompt:,} prompt tokens, {OUTPUT_TOKENS} output a turn)"
    return [
        Row("prompt cache off, 10-turn run", off.cost_nanos / NANOS, "USD", f"{run}, no cache_control; {prices}"),
        Row(
            "prompt cache on, 10-turn run",
            on.cost_nanos / NANOS,
            "USD",
            f"{run}, cache_control on the system prompt and the last tool: turn 1 writes the prefix, "
            f"turns 2-{on.turns} read it; {prices}",
        ),
        Row("prompt cache saving", 100 * (1 - on.cost_nanos / off.cost_nanos), "%", "of the run's cost without it"),
        Row("prompt cache, tokens written", float(on.written), "tokens", "cache_write_tokens over the run's steps"),
        Row("prompt cache, tokens read", float(on.read), "tokens", "cached_tokens over the run's steps"),
    ]
