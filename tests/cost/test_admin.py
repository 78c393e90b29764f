"""Spend in the console: model prices (list, add, edit; a negative price refused on its field, and used by the next
call once saved), the quota override's daily spend, and the day's spend per user on the usage page."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.test import Client

from agents.models import DailyUsage, ModelPrice, TokenQuota
from agents.usage import prices, quotas
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

PRICES = "/admin/agents/modelprice/"
QUOTAS = "/admin/agents/tokenquota/"
USAGE = "/admin/agents/dailyusage/"


@pytest.fixture
def console(db) -> Client:
    client = Client()
    client.force_login(make_user("root", staff=True, superuser=True))
    return client


def price_form(**fields) -> dict:
    return {"provider": "openai", "model": "gpt-4o-mini", "input": "0.2", "cached_input": "", "output": "0.8", **fields}


def form_errors(response) -> dict:
    return {name: list(errors) for name, errors in response.context["adminform"].form.errors.items()}


# --- model prices -----------------------------------------------------------------------------------------------


def test_a_price_added_in_the_console_is_used_by_the_next_call(console):
    form = console.get(f"{PRICES}add/").content.decode()
    assert "Per million input tokens, in USD." in form
    offered = re.findall(r'<option value="([a-z]+)"', form)
    assert set(offered) == {"openai", "xai", "huggingface", "openrouter", "anthropic"}  # not the offline demo

    assert prices.price_of("openai", "gpt-4o-mini").input == Decimal("0.15")  # the repository's
    response = console.post(f"{PRICES}add/", price_form())
    assert response.status_code == 302, form_errors(response)
    assert prices.price_of("openai", "gpt-4o-mini") == prices.Price(Decimal("0.2"), Decimal("0.8"))

    row = ModelPrice.objects.get()
    response = console.post(f"{PRICES}{row.pk}/change/", price_form(cached_input="0.05"))
    assert response.status_code == 302, form_errors(response)
    assert prices.price_of("openai", "gpt-4o-mini").cached_input == Decimal("0.05")

    listing = console.get(PRICES).content.decode()
    assert re.findall(r'class="field-model">([^<]*)<', listing) == ["gpt-4o-mini"]


@pytest.mark.parametrize("field", ["input", "cached_input", "output"])
def test_a_negative_price_is_refused_on_its_field(console, field):
    response = console.post(f"{PRICES}add/", price_form(**{field: "-0.01"}))
    assert response.status_code == 200
    assert form_errors(response) == {field: ["Ensure this value is greater than or equal to 0."]}
    assert not ModelPrice.objects.exists()


def test_a_second_price_for_the_same_model_is_refused(console):
    assert console.post(f"{PRICES}add/", price_form()).status_code == 302
    response = console.post(f"{PRICES}add/", price_form(input="9"))
    assert response.status_code == 200 and "already exists" in str(response.context["adminform"].form.errors)
    assert ModelPrice.objects.count() == 1


# --- the quota override's daily spend ---------------------------------------------------------------------------


def test_a_users_daily_spend_is_set_beside_their_token_quota(console, settings):
    settings.AGENT_DAILY_COST_QUOTA = "5"
    alice = make_user("alice")
    form = console.get(f"{QUOTAS}add/").content.decode()
    assert "0 means no spend quota for this user" in form and "AGENT_DAILY_COST_QUOTA (5.00 USD)" in form

    response = console.post(f"{QUOTAS}add/", {"user": alice.pk, "daily_tokens": "", "daily_cost": "2.5"})
    assert response.status_code == 302, form_errors(response)
    assert quotas.quotas_for(alice.pk) == (0, 2_500_000_000)  # the token quota: the default (none)

    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=10, cost_nanos=1_234_500_000)
    listing = console.get(QUOTAS).content.decode()
    assert re.findall(r'class="field-quota">([^<]*)<', listing) == ["default"]
    assert re.findall(r'class="field-spend_quota">([^<]*)<', listing) == ["2.50 USD"]
    assert re.findall(r'class="field-spent_today">([^<]*)<', listing) == ["1.2345 USD"]


def test_a_negative_daily_spend_is_refused_on_its_field(console):
    alice = make_user("alice")
    response = console.post(f"{QUOTAS}add/", {"user": alice.pk, "daily_tokens": "", "daily_cost": "-1"})
    assert response.status_code == 200
    assert form_errors(response) == {"daily_cost": ["Ensure this value is greater than or equal to 0."]}
    assert not TokenQuota.objects.exists()


# --- spend per user per day -------------------------------------------------------------------------------------


def test_the_usage_page_shows_each_days_spend_in_the_currency(console, settings):
    settings.AGENT_CURRENCY = "EUR"
    alice, bob = make_user("alice"), make_user("bob")
    row = DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=9, cost_nanos=1_800_000_000)
    DailyUsage.objects.create(owner=bob, day=quotas.today(), prompt_tokens=1, cost_nanos=123_000)
    html = console.get(USAGE).content.decode()  # today's rows, by username
    assert re.findall(r'class="field-spend">([^<]*)<', html) == ["1.80 EUR", "0.000123 EUR"]
    assert "1.80 EUR" in console.get(f"{USAGE}{row.pk}/change/").content.decode()
