"""The price table over HTTP (docs/cost.md, "The price table over HTTP"): `GET /api/v1/prices` lists the price each
model is charged at and the table it comes from; staff set (`POST`) and remove (`DELETE /api/v1/prices/{id}`) the
console's prices, bad input is a 400 naming the field with nothing stored, and a run is charged at a price set so."""

from __future__ import annotations

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from agents.models import ModelPrice, Run
from agents.usage import prices
from tests.conftest import client_for, make_user
from tests.cost.test_spend import CALL_NANOS, openai_run, scripted
from tests.providers import stub_llm as llm

pytestmark = pytest.mark.django_db

PRICES = "/api/v1/prices"
ENTRY_FIELDS = {"id", "provider", "model", "input", "output", "cached_input", "currency", "source"}


@pytest.fixture(autouse=True)
def _usd_and_no_settings_prices(settings):
    settings.AGENT_CURRENCY = "USD"
    settings.AGENT_PRICES = {}


@pytest.fixture
def staff_api(db):
    return client_for(make_user("sam", staff=True))


def table(client) -> list[dict]:
    """Every entry of the list, on one page."""
    body = client.get(PRICES, {"limit": 200}).json()
    assert body["count"] == len(body["results"])
    return body["results"]


def entry(client, provider: str, model: str) -> dict | None:
    return next((e for e in table(client) if (e["provider"], e["model"]) == (provider, model)), None)


def body(**fields) -> dict:
    return {"provider": "openai", "model": "gpt-4o-mini", "input": "0.2", "output": "0.8", **fields}


# --- the list ---------------------------------------------------------------------------------------------------


def test_the_list_is_the_repository_table_by_default(api):
    entries = table(api)
    _, repository = prices.repository_table()
    assert {f"{e['provider']}/{e['model']}" for e in entries} == set(repository)
    assert all(set(e) == ENTRY_FIELDS for e in entries)
    assert {(e["source"], e["currency"], e["id"]) for e in entries} == {("repository", "USD", None)}
    assert entry(api, "openai", "gpt-4o-mini") == {
        "id": None,
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input": "0.15",
        "output": "0.6",
        "cached_input": "0.075",
        "currency": "USD",
        "source": "repository",
    }
    assert entry(api, "openrouter", "openai/gpt-4o-mini")["input"] == "0.15"  # the model keeps its own "/"
    assert [(e["provider"], e["model"]) for e in entries] == sorted((e["provider"], e["model"]) for e in entries)


def test_settings_win_over_the_repository_and_the_console_over_both(api, settings):
    settings.AGENT_PRICES = {
        "openai/gpt-4o-mini": {"input": "1", "output": "2"},
        "openai/gpt-4o": {"input": 3, "output": "4.50"},
        "demo/demo-1": {"input": "0.1", "output": "0.2"},  # the demo: priced only here
    }
    row = ModelPrice.objects.create(provider="openai", model="gpt-4o", input="5", output="6", cached_input="0.5")
    new = ModelPrice.objects.create(provider="anthropic", model="claude-new", input="7", output="8")

    found = {(e["provider"], e["model"]): e for e in table(api)}

    def shown(provider: str, model: str) -> tuple:
        e = found[provider, model]
        return e["source"], e["id"], e["input"], e["output"], e["cached_input"]

    assert shown("openai", "gpt-4o-mini") == ("settings", None, "1", "2", None)
    assert shown("openai", "gpt-4o") == ("console", row.pk, "5", "6", "0.5")
    assert shown("anthropic", "claude-new") == ("console", new.pk, "7", "8", None)
    assert shown("demo", "demo-1") == ("settings", None, "0.1", "0.2", None)
    assert shown("openai", "gpt-4.1") == ("repository", None, "2", "8", "0.5")


def test_each_entry_is_the_price_runs_are_charged(api, settings):
    settings.AGENT_PRICES = {
        "openai/gpt-4o-mini": {"input": "1", "output": "2"},
        "demo/demo-1": {"input": 0, "output": 1},
    }
    ModelPrice.objects.create(provider="openai", model="gpt-4.1", input="5", output="6", cached_input="0.5")
    ModelPrice.objects.create(provider="demo", model="demo-1", input="9", output="9")  # price_of never reads it

    for e in table(api):
        charged = prices.price_of(e["provider"], e["model"])
        shown = [Decimal(e[k]) if e[k] is not None else None for k in ("input", "output", "cached_input")]
        assert shown == [charged.input, charged.output, charged.cached_input], e


def test_the_repository_table_applies_only_in_its_currency(api, settings):
    settings.AGENT_CURRENCY = "EUR"
    settings.AGENT_PRICES = {"openai/gpt-4o-mini": {"input": "0.14", "output": "0.55"}}
    entries = table(api)
    assert [(e["model"], e["source"], e["currency"]) for e in entries] == [("gpt-4o-mini", "settings", "EUR")]


def test_entries_the_check_refuses_are_not_listed(api, settings):
    settings.AGENT_PRICES = {
        "openai/gpt-4o-mini": {"input": "-1", "output": "2"},  # refused: the repository's price applies
        "no-slash": {"input": "1", "output": "2"},
        "xai/": {"input": "1", "output": "2"},
    }
    entries = table(api)
    assert entry(api, "openai", "gpt-4o-mini")["source"] == "repository"
    assert {e["source"] for e in entries} == {"repository"}


def test_the_list_is_paginated(api):
    first = api.get(PRICES, {"limit": 2}).json()
    second = api.get(PRICES, {"limit": 2, "offset": 2}).json()
    assert len(first["results"]) == len(second["results"]) == 2
    assert first["count"] == len(prices.repository_table()[1]) and first["next"] and first["previous"] is None
    assert first["results"] + second["results"] == table(api)[:4]
    assert api.get(PRICES, {"limit": 0}).status_code == 400


def test_the_list_needs_credentials():
    assert APIClient().get(PRICES).status_code == 401


# --- setting a price --------------------------------------------------------------------------------------------


def test_staff_make_a_price_then_replace_it(staff_api, api):
    made = staff_api.post(PRICES, body(cached_input=0.05), format="json")
    assert made.status_code == 201, made.content
    row = ModelPrice.objects.get()
    assert made.json() == {
        "id": row.pk,
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input": "0.2",
        "output": "0.8",
        "cached_input": "0.05",
        "currency": "USD",
        "source": "console",
    }
    assert entry(api, "openai", "gpt-4o-mini") == made.json()  # every user sees it at once

    replaced = staff_api.post(PRICES, body(input="0.3", output=1), format="json")
    assert replaced.status_code == 200, replaced.content
    assert (replaced.json()["id"], replaced.json()["input"], replaced.json()["cached_input"]) == (row.pk, "0.3", None)
    row = ModelPrice.objects.get()  # still one row
    assert (row.input, row.output, row.cached_input) == (Decimal("0.3"), Decimal("1"), None)
    assert prices.price_of("openai", "gpt-4o-mini") == prices.Price(Decimal("0.3"), Decimal("1"))


def test_a_model_with_a_slash_and_the_largest_price_are_stored(staff_api):
    response = staff_api.post(
        PRICES, body(provider="openrouter", model="meta-llama/llama-3.1-8b", input="999999.999999"), format="json"
    )
    assert response.status_code == 201, response.content
    assert prices.price_of("openrouter", "meta-llama/llama-3.1-8b").input == Decimal("999999.999999")


@pytest.mark.parametrize("method", ["post", "delete"])
def test_others_than_staff_may_not_change_prices(api, method):
    row = ModelPrice.objects.create(provider="openai", model="gpt-4o", input="5", output="6")
    path = PRICES if method == "post" else f"{PRICES}/{row.pk}"
    response = getattr(api, method)(path, body(), format="json")
    assert response.status_code == 403
    assert list(ModelPrice.objects.values_list("model", flat=True)) == ["gpt-4o"]


@pytest.mark.parametrize("field", ["input", "output", "cached_input"])
@pytest.mark.parametrize("value", ["-1", -0.5, "-0", -0.0, "abc", "", "1e3", " 1", "NaN", True, [], {}])
def test_a_negative_or_non_numeric_price_is_400_naming_its_field(staff_api, field, value):
    response = staff_api.post(PRICES, body(**{field: value}), format="json")
    assert response.status_code == 400
    assert set(response.json()) == {field}, response.json()
    assert not ModelPrice.objects.exists()


def test_a_negative_price_says_so(staff_api):
    response = staff_api.post(PRICES, body(output="-0.5"), format="json")
    assert response.json() == {"output": ["Ensure this value is greater than or equal to 0."]}


@pytest.mark.parametrize("value", ["1000000", 1000000, "0.0000001", 1e-7, "1.1234567"])
def test_a_price_beyond_the_columns_digits_is_400(staff_api, value):
    response = staff_api.post(PRICES, body(input=value), format="json")
    assert response.status_code == 400 and set(response.json()) == {"input"}, response.json()
    assert not ModelPrice.objects.exists()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"provider": "demo"}, "provider"),  # priced only through AGENT_PRICES
        ({"provider": "nope"}, "provider"),
        ({"provider": 1}, "provider"),
        ({"model": ""}, "model"),
        ({"model": "   "}, "model"),
        ({"model": "m" * 201}, "model"),
        ({"model": "gpt\x00"}, "model"),
        ({"model": None}, "model"),
    ],
)
def test_a_bad_provider_or_model_is_400_naming_it(staff_api, fields, named):
    response = staff_api.post(PRICES, body(**fields), format="json")
    assert response.status_code == 400
    assert set(response.json()) == {named}, response.json()
    assert not ModelPrice.objects.exists()


@pytest.mark.parametrize("missing", ["provider", "model", "input", "output"])
def test_each_field_but_the_cached_price_is_required(staff_api, missing):
    fields = body()
    del fields[missing]
    response = staff_api.post(PRICES, fields, format="json")
    assert response.status_code == 400 and set(response.json()) == {missing}


# --- removing a price -------------------------------------------------------------------------------------------


def test_staff_remove_a_price_and_the_next_table_applies(staff_api, api):
    made = staff_api.post(PRICES, body(input="9"), format="json").json()
    assert prices.price_of("openai", "gpt-4o-mini").input == Decimal("9")

    assert staff_api.delete(f"{PRICES}/{made['id']}").status_code == 204
    assert not ModelPrice.objects.exists()
    assert entry(api, "openai", "gpt-4o-mini")["source"] == "repository"
    assert prices.price_of("openai", "gpt-4o-mini").input == Decimal("0.15")  # this process forgot it at once
    assert staff_api.delete(f"{PRICES}/{made['id']}").status_code == 404


@pytest.mark.parametrize("id", ["12345", "abc", str(2**70)])
def test_removing_an_unknown_price_is_404(staff_api, id):
    assert staff_api.delete(f"{PRICES}/{id}").status_code == 404


# --- a run charged at it ----------------------------------------------------------------------------------------


def test_a_run_is_charged_at_a_price_set_over_http(staff_api, api, settings, stub):
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    scripted(stub)  # two calls, each 600 uncached, 400 cached and 50 completion tokens
    assert openai_run(api).json()["cost"] == "0.00072"  # gpt-4.1-mini at the repository's price

    price = {"provider": "openai", "model": "gpt-4.1-mini", "input": "1000", "cached_input": "250", "output": "4000"}
    assert staff_api.post(PRICES, price, format="json").status_code == 201

    run = openai_run(api).json()
    assert run["cost"] == "1.8"  # two calls at 0.90
    assert Run.objects.get(pk=run["id"]).cost_nanos == 2 * CALL_NANOS
