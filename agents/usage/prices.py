"""Prices of models and the cost of their calls (docs/cost.md).

A model's price, per million tokens in AGENT_CURRENCY, is looked up by "provider/model" in three tables, each over the
one before: the repository's (prices.json, in USD: used only when AGENT_CURRENCY is USD), AGENT_PRICES, and the
console's ModelPrice rows. A model in none of them has no price: its calls cost None (unknown), never 0.

`priced` runs after every model call, so a look-up is a few dict reads: the repository's table is read once per
process, AGENT_PRICES only for the one entry, and the console's rows at most once every `Rows.ttl_s` (and again at once
after a save or delete in this process): a price changed in the console reaches the other processes within seconds.
A provider that needs no key (the offline demo) bills nothing unless AGENT_PRICES gives it a price (to try costs and
the spend quota offline): its calls read no table of the database.

Costs are integer billionths ("nanos") of the currency: exact sums in the database, shown as decimal strings.

`price_table` is the whole table as `price_of` resolves it (GET /api/v1/prices); `set_price` is the console's price
set over HTTP (POST /api/v1/prices).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from functools import cache
from pathlib import Path
from typing import Any, Literal

from django.conf import settings
from django.core import checks

from agents.engine import ModelReply, Usage
from agents.models import ModelPrice
from agents.providers import KEY_SETTINGS

TABLE = Path(__file__).with_name("prices.json")
NANOS = 10**9  # billionths in a unit of the currency
PER = 10**6  # prices are per million tokens
FIELDS = ("input", "output", "cached_input")
# Prompt-cache writes (Anthropic's cache_creation_input_tokens, 5-minute TTL) cost this times the input price, as
# Anthropic documents (docs/cost.md#prompt-caching); no other provider reports cache writes.
CACHE_WRITE_MULTIPLIER = Decimal("1.25")
CHECK_HINT = (
    'A JSON object of "provider/model" to prices per million tokens in AGENT_CURRENCY, e.g. '
    '{"openai/gpt-4o-mini": {"input": "0.15", "output": "0.60", "cached_input": "0.075"}} (docs/cost.md).'
)


class PriceError(ValueError):
    """A price or an amount that is not a number of at least 0; the message names where it was found."""


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price per million tokens; cached input tokens at `cached_input`, or at `input` without one; tokens
    written to the prompt cache at `cache_write`: CACHE_WRITE_MULTIPLIER times `input`."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None

    @property
    def cache_write(self) -> Decimal:
        return self.input * CACHE_WRITE_MULTIPLIER

    def cost_nanos(self, usage: Usage) -> int:
        """What a call with `usage` cost, in billionths rounded half up: the prompt's uncached tokens at the input
        price, its cached ones at the cached price, those written to the cache at the cache-write price, the
        completion at the output price."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        written = min(usage.cache_write_tokens, usage.prompt_tokens - cached)
        cached_price = self.input if self.cached_input is None else self.cached_input
        with localcontext() as exact:
            exact.prec = 60  # token counts times prices of a dozen digits stay far below: no rounding until ours
            total = (usage.prompt_tokens - cached - written) * self.input + cached * cached_price
            total += written * self.cache_write + usage.completion_tokens * self.output
            return int((total * NANOS / PER).to_integral_value(rounding=ROUND_HALF_UP))


def priced(reply: ModelReply, provider: str, model: str) -> ModelReply:
    """The reply with `cost_nanos` set when a price is known for provider/model (else as it is)."""
    price = price_of(provider, model)
    return reply if price is None else replace(reply, cost_nanos=price.cost_nanos(reply.usage))


def price_of(provider: str, model: str) -> Price | None:
    """The price of provider/model: the console's, else AGENT_PRICES', else the repository's; None without one."""
    key = f"{provider}/{model}"
    if provider not in KEY_SETTINGS:  # the offline demo: only a price AGENT_PRICES gives it (no query on its calls)
        return configured(key)
    found = ROWS.get(key)
    if found is None:
        found = configured(key)
    if found is None and settings.AGENT_CURRENCY == repository_table()[0]:
        found = repository_table()[1].get(key)
    return found


def configured(key: str) -> Price | None:
    """AGENT_PRICES' price for `key`; None without one, or with one the system check refuses (check_prices)."""
    table = settings.AGENT_PRICES
    entry = table.get(key) if isinstance(table, dict) else None
    if entry is None:
        return None
    try:
        return parse_price(entry, key)
    except PriceError:
        return None


@cache
def repository_table() -> tuple[str, dict[str, Price]]:
    """prices.json: its currency and its prices (read once per process)."""
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    return data["currency"], {key: parse_price(entry, key) for key, entry in data["prices"].items()}


class Rows:
    """The console's prices (ModelPrice), read at most once every `ttl_s` and again after `forget`."""

    ttl_s = 5.0
    clock = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self.table: dict[str, Price] | None = None
        self.read_at = 0.0

    def get(self, key: str) -> Price | None:
        now = self.clock()
        if self.table is None or now - self.read_at >= self.ttl_s:
            rows = ModelPrice.objects.values_list("provider", "model", "input", "output", "cached_input")
            self.table = {f"{p}/{m}": Price(i, o, c) for p, m, i, o, c in rows}
            self.read_at = now
        return self.table.get(key)

    def forget(self, **kwargs: Any) -> None:
        """A receiver of ModelPrice's post_save and post_delete: this process reads the rows again on its next call."""
        self.table = None


ROWS = Rows()

Source = Literal["repository", "settings", "console"]
SOURCES: tuple[Source, ...] = ("repository", "settings", "console")


@dataclass(frozen=True, slots=True)
class Entry:
    """A model's price and the table it comes from; `id` is the console's row's (None for the other tables)."""

    provider: str
    model: str
    price: Price
    source: Source
    id: int | None = None


def price_table() -> list[Entry]:
    """Every provider/model some table prices, at the price `price_of` finds for it, by provider then model. The
    console's rows are read afresh (not through ROWS): a price just set shows at once, in every process."""
    currency, repository = repository_table()
    table = settings.AGENT_PRICES if isinstance(settings.AGENT_PRICES, dict) else {}
    entries = [
        *keyed("repository", repository if settings.AGENT_CURRENCY == currency else {}),
        *keyed("settings", {str(key): configured(key) for key in table}),
        *map(console_entry, ModelPrice.objects.all()),
    ]
    # Each over the one before, as in price_of; the demo has only AGENT_PRICES' price (price_of reads no other).
    found = {(e.provider, e.model): e for e in entries if e.provider in KEY_SETTINGS or e.source == "settings"}
    return sorted(found.values(), key=lambda entry: (entry.provider, entry.model))


def keyed(source: Source, table: Mapping[str, Price | None]) -> list[Entry]:
    """The entries of a table by "provider/model"; a key without both parts, or a price the check refuses, is none."""
    split = ((key.partition("/"), price) for key, price in table.items())
    return [
        Entry(provider, model, price, source)
        for (provider, _, model), price in split
        if provider and model and price is not None
    ]


def console_entry(row: ModelPrice) -> Entry:
    """A console's price as an entry of the table."""
    return Entry(row.provider, row.model, Price(row.input, row.output, row.cached_input), "console", row.pk)


def set_price(*, provider: str, model: str, price: Price) -> tuple[Entry, bool]:
    """The console's price of provider/model, made or replaced (True when made). Its post_save signal makes this
    process price its next call with it (agents/apps.py); the others read it within `Rows.ttl_s`."""
    values = {"input": price.input, "output": price.output, "cached_input": price.cached_input}
    row, created = ModelPrice.objects.update_or_create(provider=provider, model=model, defaults=values)
    return console_entry(row), created


def price_text(value: Decimal) -> str:
    """A price or a cost as the API writes it: a decimal string without trailing zeros ("0.15", "10")."""
    return format(abs(value).normalize(), "f")  # abs: "-0", a price of at least 0 too, is written "0"


def parse_price(entry: Any, name: str) -> Price:
    """A price from {"input", "output", "cached_input"?} of numbers or decimal strings; PriceError naming the entry."""
    if not isinstance(entry, dict) or entry.get("input") is None or entry.get("output") is None:
        raise PriceError(f"{name}: expected an object with an input and an output price, got {entry!r}.")
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise PriceError(f"{name}: unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}.")
    values = {field: amount(entry[field], f"{name}: {field}") for field in FIELDS if entry.get(field) is not None}
    return Price(**values)


def amount(raw: Any, name: str) -> Decimal:
    """A number of at least 0 from a number or a decimal string; PriceError naming `name` otherwise."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str | Decimal):
        raise PriceError(f"{name} must be a number or a decimal string, got {raw!r}.")
    try:
        value = Decimal(str(raw))  # str() first: the float 0.15 is "0.15", not its binary expansion
    except InvalidOperation:
        raise PriceError(f"{name} is not a number: {raw!r}.") from None
    if not value.is_finite() or value < 0:
        raise PriceError(f"{name} must be a number of at least 0, got {raw!r}.")
    return value


def to_nanos(value: Decimal) -> int:
    """An amount of the currency in billionths, rounded half up."""
    return int((value * NANOS).to_integral_value(rounding=ROUND_HALF_UP))


def cost_text(nanos: int | None) -> str | None:
    """A cost in billionths as the API writes it: a decimal string in AGENT_CURRENCY ("0.000123"), or None."""
    return None if nanos is None else price_text(Decimal(nanos).scaleb(-9))


def money_text(nanos: int) -> str:
    """An amount in billionths as people read money: at least two decimals, more when it has them ("5.00",
    "5.0123")."""
    value = Decimal(nanos).scaleb(-9)
    cents = value.quantize(Decimal("0.01"))
    return format(cents if cents == value else value.normalize(), "f")


def check_prices(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every AGENT_PRICES entry is "provider/model" with prices of at least 0, and AGENT_DAILY_COST_QUOTA an amount
    of at least 0: a bad price would leave its model's calls unpriced, and a bad quota would fail every run."""
    errors: list[checks.CheckMessage] = []
    table = settings.AGENT_PRICES
    if not isinstance(table, dict):
        return [checks.Error("AGENT_PRICES must be a JSON object.", hint=CHECK_HINT, id="prices.E001")]
    for key, entry in table.items():
        provider, _, model = str(key).partition("/")
        problem = None if provider and model else f'AGENT_PRICES["{key}"]: the key must be "provider/model".'
        try:
            parse_price(entry, f'AGENT_PRICES["{key}"]')
        except PriceError as exc:
            problem = str(exc)
        if problem:
            errors.append(checks.Error(problem, hint=CHECK_HINT, id="prices.E001"))
    try:
        amount(settings.AGENT_DAILY_COST_QUOTA, "AGENT_DAILY_COST_QUOTA")
    except PriceError as exc:
        errors.append(checks.Error(str(exc), hint='A decimal such as "5.00"; "0": no spend quota.', id="prices.E002"))
    return errors
