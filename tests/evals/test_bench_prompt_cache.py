"""`manage.py bench --only prompt_cache` (issue 51): a 10-turn Anthropic-shaped run's cost with and without the
prompt cache, at prices.json's documented prices: the figures it names, that turn 1 writes the prefix and turns 2-10
read it, and that its costs are the project's pricing of those tokens."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal

import pytest

from agents.engine import ModelRequest
from agents.providers import anthropic_provider
from agents.usage.prices import NANOS, PER, repository_table
from bench import prompt_cache as bench
from tests.evals.conftest import command

FIGURES = [
    "prompt cache off, 10-turn run",
    "prompt cache on, 10-turn run",
    "prompt cache saving",
    "prompt cache, tokens written",
    "prompt cache, tokens read",
]


@pytest.fixture
def price():
    return repository_table()[1][bench.PRICED]


def test_the_section_names_its_figures_and_states_the_prices_it_used():
    data = json.loads(command("bench", "--only", "prompt_cache", "--json"))

    rows = {r["figure"]: r for r in data["rows"]}
    assert list(rows) == FIGURES
    assert [r["unit"] for r in data["rows"]] == ["USD", "USD", "%", "tokens", "tokens"]
    assert rows["prompt cache on, 10-turn run"]["value"] < rows["prompt cache off, 10-turn run"]["value"]
    for figure in FIGURES[:2]:  # Claude Sonnet 4 as Anthropic documents it, from prices.json
        assert (
            "claude-sonnet-4-0 at prices.json's $3.00/MTok input, $15.00/MTok output, $3.75/MTok cache write, "
            "$0.30/MTok cache read" in rows[figure]["work"]
        )
    assert "turn 1 writes the prefix, turns 2-10 read it" in rows["prompt cache on, 10-turn run"]["work"]


def test_the_text_table_has_the_rows():
    lines = command("bench", "--only", "prompt_cache").splitlines()
    assert [line.split("  ")[0] for line in lines[3:]] == FIGURES


def test_turn_one_writes_the_prefix_and_turns_two_to_ten_read_it(price):
    on = bench.drive(price, prompt_cache=True)

    assert on.turns == len(on.usages) == 10
    prefix = on.usages[0]["cache_write_tokens"]
    assert prefix >= bench.MIN_CACHEABLE and "cached_tokens" not in on.usages[0]
    assert [(u.get("cache_write_tokens", 0), u["cached_tokens"]) for u in on.usages[1:]] == [(0, prefix)] * 9
    assert (on.written, on.read) == (prefix, 9 * prefix)


def test_without_the_prompt_cache_nothing_is_written_or_read(price, monkeypatch):
    bodies = []
    real = anthropic_provider.build_kwargs
    monkeypatch.setattr(bench, "build_kwargs", lambda *args: bodies.append(real(*args)) or bodies[-1])
    off = bench.drive(price, prompt_cache=False)

    assert len(bodies) == 10 and "cache_control" not in json.dumps(bodies)
    assert (off.written, off.read) == (0, 0)
    assert all(set(u) == {"prompt_tokens", "completion_tokens", "total_tokens"} for u in off.usages)


def test_both_runs_send_the_same_prompt_and_cost_its_tokens_at_the_documented_prices(price):
    off, on = bench.drive(price, prompt_cache=False), bench.drive(price, prompt_cache=True)
    output = 10 * bench.OUTPUT_TOKENS

    assert off.prompt == on.prompt
    assert off.cost_nanos == (off.prompt * Decimal("3.00") + output * Decimal("15.00")) * NANOS / PER
    plain = on.prompt - on.written - on.read
    expected = plain * Decimal("3.00") + on.written * Decimal("3.75") + on.read * Decimal("0.30")
    assert on.cost_nanos == round((expected + output * Decimal("15.00")) * NANOS / PER)


def test_a_prefix_that_changes_between_calls_is_written_again_not_read(price):
    """The bench's cache reads only bytes it saw before: a prompt that changed turn to turn would show as writes."""
    cache = bench.AnthropicCache(price)
    request = ModelRequest([{"role": "system", "content": bench.INSTRUCTIONS}, {"role": "user", "content": "Hi"}],
                           [], "tools", 60.0, prompt_cache=True)  # fmt: skip
    body = anthropic_provider.build_kwargs("claude-sonnet-4-0", 2048, request)
    first = cache.usage(body)
    again = cache.usage(body)
    changed = [{**request.messages[0], "content": bench.INSTRUCTIONS + " (turn 2)"}, request.messages[1]]
    other = cache.usage(anthropic_provider.build_kwargs("claude-sonnet-4-0", 2048, replace(request, messages=changed)))

    assert first["cache_creation_input_tokens"] > bench.MIN_CACHEABLE and first["cache_read_input_tokens"] == 0
    assert (again["cache_creation_input_tokens"], again["cache_read_input_tokens"]) == (
        0,
        first["cache_creation_input_tokens"],
    )
    assert other["cache_creation_input_tokens"] > bench.MIN_CACHEABLE and other["cache_read_input_tokens"] == 0


def test_a_prefix_under_the_minimum_is_not_cached(price):
    cache = bench.AnthropicCache(price)
    request = ModelRequest([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], [],
                           "tools", 60.0, prompt_cache=True)  # fmt: skip
    body = anthropic_provider.build_kwargs("claude-sonnet-4-0", 2048, request)
    assert [cache.usage(body)["cache_creation_input_tokens"] for _ in range(2)] == [0, 0]
    assert cache.usage(body)["cache_read_input_tokens"] == 0
