"""The price table (the repository's file < AGENT_PRICES < the console's rows), the cost of a call in billionths, the
rows kept in the process for seconds, and the system check of AGENT_PRICES and AGENT_DAILY_COST_QUOTA."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core import checks

from agents.engine import ModelReply, Usage
from agents.models import ModelPrice
from agents.providers import provider_class
from agents.usage import prices
from agents.usage.prices import Price, check_prices

FILE_PRICE = Price(Decimal("0.15"), Decimal("0.60"), Decimal("0.075"))  # openai/gpt-4o-mini in prices.json


def price(input: str, output: str, cached_input: str | None = None) -> Price:
    return Price(Decimal(input), Decimal(output), None if cached_input is None else Decimal(cached_input))


# --- the tables -------------------------------------------------------------------------------------------------


def test_the_repository_table_is_in_usd_and_every_entry_is_a_price():
    data = json.loads(prices.TABLE.read_text(encoding="utf-8"))
    currency, table = prices.repository_table()
    assert currency == data["currency"] == "USD"
    assert set(table) == set(data["prices"]) and len(table) >= 10
    assert all(p.input >= 0 and p.output >= 0 and p.cached_input is not None for p in table.values())
    assert all(p.cached_input <= p.input for p in table.values())  # a cache read is never dearer than a read


@pytest.mark.parametrize("provider", ["openai", "anthropic", "xai", "openrouter"])
def test_the_default_model_of_each_billing_provider_has_a_price(provider, db):
    assert prices.price_of(provider, provider_class(provider).default_model) is not None


@pytest.mark.django_db
def test_the_file_is_the_default(settings):
    settings.AGENT_PRICES = {}
    assert prices.price_of("openai", "gpt-4o-mini") == FILE_PRICE


@pytest.mark.django_db
def test_settings_override_the_file_and_the_console_overrides_both(settings):
    settings.AGENT_PRICES = {"openai/gpt-4o-mini": {"input": "1", "output": "2"}}
    assert prices.price_of("openai", "gpt-4o-mini") == price("1", "2")
    ModelPrice.objects.create(provider="openai", model="gpt-4o-mini", input="3", output="4", cached_input="0.5")
    assert prices.price_of("openai", "gpt-4o-mini") == price("3", "4", "0.5")
    assert prices.price_of("openai", "gpt-4o") == prices.repository_table()[1]["openai/gpt-4o"]  # others: as they were


@pytest.mark.django_db
def test_settings_price_models_the_file_does_not_know(settings):
    settings.AGENT_PRICES = {"openrouter/meta-llama/llama-3.3-70b-instruct": {"input": 0.12, "output": "0.3"}}
    assert prices.price_of("openrouter", "meta-llama/llama-3.3-70b-instruct") == price("0.12", "0.3")


@pytest.mark.django_db
def test_in_another_currency_the_usd_file_is_left_out(settings):
    settings.AGENT_CURRENCY = "EUR"
    settings.AGENT_PRICES = {"openai/gpt-4.1": {"input": "1.8", "output": "7.2"}}
    assert prices.price_of("openai", "gpt-4o-mini") is None
    assert prices.price_of("openai", "gpt-4.1") == price("1.8", "7.2")


@pytest.mark.django_db
def test_a_model_without_a_price_leaves_the_reply_as_it_is(settings):
    settings.AGENT_PRICES = {}
    reply = ModelReply(text="hi", usage=Usage(10, 2))
    assert prices.priced(reply, "openai", "gpt-unknown") is reply
    assert prices.priced(reply, "openai", "gpt-4o-mini").cost_nanos == 10 * 150 + 2 * 600


def test_a_provider_without_a_key_is_priced_only_by_the_settings_and_looks_nothing_up(
    settings, django_assert_num_queries, db
):
    settings.AGENT_PRICES = {}
    with django_assert_num_queries(0):
        assert prices.priced(ModelReply(usage=Usage(10, 2)), "demo", "demo-1").cost_nanos is None
    settings.AGENT_PRICES = {"demo/demo-1": {"input": "1", "output": "2"}}  # to try costs offline
    with django_assert_num_queries(0):
        assert prices.priced(ModelReply(usage=Usage(10, 2)), "demo", "demo-1").cost_nanos == (10 * 1 + 2 * 2) * 1000


@pytest.mark.django_db
def test_an_entry_the_check_refuses_prices_nothing_at_run_time(settings):
    settings.AGENT_PRICES = {"openai/gpt-4o-mini": {"input": "-1", "output": "1"}}
    assert prices.price_of("openai", "gpt-4o-mini") == FILE_PRICE  # the entry is skipped; the file still answers


# --- the cost of a call -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (Usage(1000, 100), 1000 * 150 + 100 * 600),  # 0.15 and 0.60 per million: 150 and 600 billionths a token
        (Usage(1000, 100, cached_tokens=400), 600 * 150 + 400 * 75 + 100 * 600),
        (Usage(1000, 0, cached_tokens=1000), 1000 * 75),
        (Usage(0, 0), 0),
        (Usage(3_000_000_000, 7_000_000), 3_000_000_000 * 150 + 7_000_000 * 600),  # past 2**53 in billionths
    ],
)
def test_cost_in_billionths_with_cached_tokens_at_their_price(usage, expected):
    assert FILE_PRICE.cost_nanos(usage) == expected


def test_cached_tokens_without_a_cached_price_cost_the_input_price():
    assert price("0.40", "1.60").cost_nanos(Usage(1000, 10, cached_tokens=600)) == 1000 * 400 + 10 * 1600


def test_more_cached_tokens_than_the_prompt_count_as_the_whole_prompt_cached():
    assert FILE_PRICE.cost_nanos(Usage(100, 0, cached_tokens=500)) == 100 * 75


@pytest.mark.parametrize(
    ("per_million", "tokens", "expected"),
    [
        ("0.0025", 1, 3),  # 2.5 billionths: half up (banker's rounding would give 2)
        ("0.0035", 1, 4),
        ("0.0024999", 1, 2),
        ("0.000333333333333333333", 3, 1),  # 0.999999...: exact arithmetic, then one rounding
        ("0.1", 3, 300),  # 0.1 * 3 is 0.3 exactly (as a float it is 0.30000000000000004)
    ],
)
def test_a_cost_is_rounded_once_half_up_to_whole_billionths(per_million, tokens, expected):
    assert price(per_million, "0").cost_nanos(Usage(tokens, 0)) == expected


def test_cost_text_and_money_text():
    assert prices.cost_text(None) is None
    assert [prices.cost_text(n) for n in (0, 1, 123_000, 5_012_300_000, 10 * 10**9)] == [
        "0", "0.000000001", "0.000123", "5.0123", "10",
    ]  # fmt: skip
    assert [prices.money_text(n) for n in (0, 5 * 10**9, 5_012_300_000, 1, 10 * 10**9)] == [
        "0.00", "5.00", "5.0123", "0.000000001", "10.00",
    ]  # fmt: skip


# --- the console's rows, kept for seconds -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.django_db
def test_the_rows_are_read_once_per_ttl_and_at_once_after_a_save(monkeypatch, django_assert_num_queries):
    clock = Clock()
    monkeypatch.setattr(prices.Rows, "clock", staticmethod(clock))
    row = ModelPrice.objects.create(provider="openai", model="gpt-x", input="1", output="2")
    with django_assert_num_queries(1):
        for _ in range(50):
            assert prices.price_of("openai", "gpt-x") == price("1", "2")
    ModelPrice.objects.filter(pk=row.pk).update(input="5")  # as another process's save: this one gets no signal
    clock.now += prices.Rows.ttl_s - 0.1
    assert prices.price_of("openai", "gpt-x") == price("1", "2")
    clock.now += 0.2
    assert prices.price_of("openai", "gpt-x") == price("5", "2")  # read again once the rows are ttl_s old
    row.refresh_from_db()
    row.output = Decimal("9")
    row.save()  # this process's save: its signal makes the next call read the rows again
    assert prices.price_of("openai", "gpt-x") == price("5", "9")
    row.delete()
    assert prices.price_of("openai", "gpt-x") is None


# --- the system check -------------------------------------------------------------------------------------------


def messages(settings_errors: list[checks.CheckMessage]) -> list[tuple[str, str]]:
    return [(error.id, error.msg) for error in settings_errors]


def registered_price_errors() -> list[tuple[str, str]]:
    """The price errors of the check, which is registered (`manage.py check` runs it); run alone: Django's model
    checks read the database, which these tests do not use."""
    registered = checks.registry.registry.get_checks()
    assert check_prices in registered
    return [(e.id, e.msg) for e in check_prices() if (e.id or "").startswith("prices.")]


def test_good_prices_pass_the_check(settings):
    settings.AGENT_PRICES = {"openai/gpt-4o-mini": {"input": "0.2", "output": 1, "cached_input": None}}
    settings.AGENT_DAILY_COST_QUOTA = "5.00"
    assert registered_price_errors() == []


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"input": "-0.15", "output": "0.60"},
            'AGENT_PRICES["openai/gpt-4o-mini"]: input must be a number of at least 0',
        ),
        ({"input": "0.15", "output": -1}, 'AGENT_PRICES["openai/gpt-4o-mini"]: output must be a number of at least 0'),
        ({"input": "0.15", "output": "1", "cached_input": "-0.01"}, "cached_input must be a number of at least 0"),
        ({"input": "cheap", "output": "0.60"}, 'AGENT_PRICES["openai/gpt-4o-mini"]: input is not a number'),
        ({"input": "NaN", "output": "0.60"}, "input must be a number of at least 0"),
        ({"input": True, "output": "0.60"}, "input must be a number or a decimal string"),
        ({"input": "0.15"}, "expected an object with an input and an output price"),
        ({"input": "0.15", "output": "1", "cache": "1"}, "unknown field(s) cache"),
        ("0.15", "expected an object"),
    ],
)
def test_a_bad_price_is_a_check_error_naming_its_entry(settings, entry, message):
    settings.AGENT_PRICES = {"openai/gpt-4o-mini": entry}
    errors = registered_price_errors()
    assert len(errors) == 1 and errors[0][0] == "prices.E001"
    assert message in errors[0][1]


def test_a_key_that_is_not_provider_slash_model_is_a_check_error(settings):
    settings.AGENT_PRICES = {"gpt-4o-mini": {"input": "0.15", "output": "0.60"}}
    assert messages(prices.check_prices()) == [
        ("prices.E001", 'AGENT_PRICES["gpt-4o-mini"]: the key must be "provider/model".')
    ]


def test_prices_that_are_not_an_object_are_a_check_error(settings):
    settings.AGENT_PRICES = ["openai/gpt-4o-mini"]
    assert messages(prices.check_prices()) == [("prices.E001", "AGENT_PRICES must be a JSON object.")]


@pytest.mark.parametrize("quota", ["-5", "five", ""])
def test_a_bad_spend_quota_is_a_check_error(settings, quota):
    settings.AGENT_DAILY_COST_QUOTA = quota
    errors = registered_price_errors()
    assert [e[0] for e in errors] == ["prices.E002"] and "AGENT_DAILY_COST_QUOTA" in errors[0][1]
