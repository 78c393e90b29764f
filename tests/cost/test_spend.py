"""Spend end to end (docs/cost.md): runs through `POST /api/v1/runs` against the OpenAI stub, priced by AGENT_PRICES;
the run's cost and the day's spend (kept by the database trigger: these tests run on whatever DATABASE_URL names,
SQLite or PostgreSQL); the daily spend quota refusing a run (429) and stopping one before its next model call; and
`GET /api/v1/usage`."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

import pytest

from agents.models import DailyUsage, Run, Step, TokenQuota
from agents.usage import quotas
from agents.usage.owners import OwnerFacts
from tests.api.conftest import create_run, run_url
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

USAGE = "/api/v1/usage"
# Per million tokens of the openai provider's default model, priced far above its list price so that one call costs
# a readable amount: 600 uncached prompt tokens at 1000, 400 cached at 250, 50 completion tokens at 4000 = 0.90.
PRICE = {"openai/gpt-4.1-mini": {"input": "1000", "cached_input": "250", "output": "4000"}}
CALL_NANOS = 900_000_000
CALL_USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 50,
    "total_tokens": 1050,
    "prompt_tokens_details": {"cached_tokens": 400},
}


def scripted(stub) -> None:
    """A model that calls the calculator once, then answers: two calls a run, each 0.90 at PRICE."""

    def handler(request):
        seen_tool = any(m["role"] == "tool" for m in json.loads(request.body)["messages"])
        reply = (
            llm.openai_text("4", CALL_USAGE)
            if seen_tool
            else llm.openai_tool_calls([("c1", "calculator", {"expression": "2+2"})], usage=CALL_USAGE)
        )
        return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()

    stub.add("POST", OPENAI_PATH, handler=handler, repeat=True)


@pytest.fixture
def model(settings, stub):
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_RATE_LIMIT = "100000/m"
    settings.AGENT_PRICES = PRICE
    scripted(stub)
    return stub


def openai_run(client, **fields):
    return create_run(client, input="What is 2+2?", provider="openai", **fields)


def model_calls(stub) -> int:
    return stub.count("POST", OPENAI_PATH)


def spent_today(user) -> int:
    return DailyUsage.objects.get(owner=user, day=quotas.today()).cost_nanos


# --- cost of runs and days --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_runs_cost_is_its_calls_at_the_price_and_the_day_adds_them_up(api, alice, bob, model):
    body = openai_run(api).json()
    assert (body["output"], body["cost"]) == ("4", "1.8")
    run = Run.objects.get(pk=body["id"])
    assert run.cost_nanos == 2 * CALL_NANOS
    steps = Step.objects.filter(run=run, kind="model").order_by("index")
    assert [s.data["cost_nanos"] for s in steps] == [CALL_NANOS, CALL_NANOS]
    assert [s["cost"] for s in api.get(run_url(run.pk)).json()["steps"] if s["kind"] == "model"] == ["0.9", "0.9"]
    assert spent_today(alice) == 2 * CALL_NANOS

    openai_run(api)
    assert spent_today(alice) == 4 * CALL_NANOS  # the trigger adds each run's cost to its owner's day
    assert sum(Run.objects.filter(owner=alice).values_list("cost_nanos", flat=True)) == spent_today(alice)
    assert not DailyUsage.objects.filter(owner=bob).exists()


@pytest.mark.django_db
def test_a_model_without_a_price_costs_null_and_adds_nothing(api, alice, model, settings):
    settings.AGENT_PRICES = {}
    body = openai_run(api, model="gpt-unlisted").json()
    assert (body["output"], body["cost"]) == ("4", None)
    assert Run.objects.get(pk=body["id"]).cost_nanos is None
    row = DailyUsage.objects.get(owner=alice)
    assert (row.total_tokens, row.cost_nanos) == (2 * 1050, 0)  # the tokens count; the spend does not grow


@pytest.mark.django_db
def test_the_repository_price_applies_without_any_setting(api, alice, model, settings):
    settings.AGENT_PRICES = {}
    body = openai_run(api).json()  # gpt-4.1-mini: 0.40 input, 0.10 cached, 1.60 output per million (prices.json)
    per_call = 600 * 400 + 400 * 100 + 50 * 1600
    assert Run.objects.get(pk=body["id"]).cost_nanos == 2 * per_call == spent_today(alice)
    assert body["cost"] == "0.00072"


# --- the usage route --------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_usage_shows_todays_spend_without_a_spend_quota(api, model):
    assert api.get(USAGE).json() == {
        "day": quotas.today().isoformat(),
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "quota": None,
        "remaining": None,
        "cost": "0",
        "cost_quota": None,
        "cost_remaining": None,
        "currency": "USD",
    }
    openai_run(api)
    body = api.get(USAGE).json()
    assert (body["total_tokens"], body["cost"], body["cost_quota"], body["cost_remaining"]) == (2100, "1.8", None, None)


@pytest.mark.django_db
def test_usage_shows_the_spend_quota_and_what_remains_in_the_currency(api, model, settings):
    settings.AGENT_DAILY_COST_QUOTA = "5.00"
    settings.AGENT_CURRENCY = "EUR"  # prices are whatever AGENT_PRICES says, in the currency named here
    openai_run(api)
    body = api.get(USAGE).json()
    assert (body["cost"], body["cost_quota"], body["cost_remaining"], body["currency"]) == ("1.8", "5", "3.2", "EUR")


@pytest.mark.django_db
def test_usage_shows_a_users_own_spend_quota(api, alice, model, settings):
    settings.AGENT_DAILY_COST_QUOTA = "5.00"
    TokenQuota.objects.create(user=alice, daily_cost=Decimal("1.25"))  # daily_tokens empty: the token default
    openai_run(api)
    body = api.get(USAGE).json()
    assert (body["quota"], body["cost_quota"], body["cost_remaining"]) == (None, "1.25", "0")


# --- the spend quota --------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_over_the_spend_quota_a_new_run_is_429_before_any_model_call(api, model, settings):
    settings.AGENT_DAILY_COST_QUOTA = "1.50"
    assert openai_run(api).json()["output"] == "4"  # 0 spent: it starts, and costs 1.80
    calls, runs = model_calls(model), Run.objects.count()
    response = openai_run(api)
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 86401
    assert response.json()["detail"] == (
        "The daily spend quota of 1.50 USD is used up (1.80 USD spent today, UTC); it resets at 00:00 UTC."
    )
    assert (model_calls(model), Run.objects.count()) == (calls, runs)  # nothing called, nothing stored
    assert openai_run(api, mode="background").status_code == 429


@pytest.mark.django_db
def test_a_run_that_crosses_the_spend_quota_stops_before_its_next_model_call(api, model, settings):
    settings.AGENT_DAILY_COST_QUOTA = "0.50"
    body = openai_run(api).json()  # 0 spent: it starts; its first call costs 0.90; the second is refused
    assert (body["status"], body["stop_reason"], body["turns"], body["output"]) == ("done", "quota_exceeded", 1, None)
    assert model_calls(model) == 1
    detail = api.get(run_url(body["id"])).json()
    assert [s["kind"] for s in detail["steps"]] == ["model", "tool", "error"]
    assert detail["steps"][-1]["message"].endswith(
        "the daily spend quota of 0.50 USD is used up (0.90 USD spent today, UTC)"
    )
    assert Run.objects.get(pk=body["id"]).cost_nanos == CALL_NANOS


@pytest.mark.django_db
def test_a_users_override_wins_over_the_default_spend_quota(api, alice, model, settings):
    settings.AGENT_DAILY_COST_QUOTA = "0.50"
    TokenQuota.objects.create(user=alice, daily_cost=Decimal("0"))  # 0: no spend quota for alice
    assert openai_run(api).json()["output"] == "4"
    assert openai_run(api).json()["output"] == "4"
    settings.AGENT_DAILY_COST_QUOTA = "0"
    TokenQuota.objects.filter(user=alice).update(daily_cost=Decimal("3.60"))  # a spend quota for alice alone
    assert openai_run(api).status_code == 429


@pytest.mark.django_db
def test_a_worker_applies_the_owners_spend_override(api, alice, model):
    """A background run's worker reads the owner's spend override itself: set after the run was queued, it still
    stops the run before its first model call."""
    from agents.runs import drive

    run = openai_run(api, mode="background").json()
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=10, cost_nanos=2 * 10**9)
    TokenQuota.objects.create(user=alice, daily_cost=Decimal("2"))

    assert drive.run_background(run_id=run["id"]) == "done"
    stored = Run.objects.get(pk=run["id"])
    assert (stored.stop_reason, stored.turns, model_calls(model)) == ("quota_exceeded", 0, 0)


# --- what the check reads ---------------------------------------------------------------------------------------


def facts(user, *, cost_override: Decimal | None, spent: int, day: date | None = None) -> OwnerFacts:
    today = quotas.today()
    return OwnerFacts(
        user.pk, None, False, (today, 0), cost_read=True, cost_override=cost_override, spent_today=(day or today, spent)
    )


@pytest.mark.django_db
def test_facts_that_hold_the_spend_override_and_todays_spend_cost_no_query(alice, settings, django_assert_num_queries):
    settings.AGENT_DAILY_COST_QUOTA = "0"
    with django_assert_num_queries(0):
        quotas.check_can_start(alice.pk, facts(alice, cost_override=None, spent=10**12))  # no quota: nothing binds
        quotas.check_can_start(alice.pk, facts(alice, cost_override=Decimal("2"), spent=1_999_999_999))
        with pytest.raises(quotas.SpendQuotaExceeded) as refused:
            quotas.check_can_start(alice.pk, facts(alice, cost_override=Decimal("2"), spent=2 * 10**9))
    assert (refused.value.quota, refused.value.used) == (2 * 10**9, 2 * 10**9)
    assert str(refused.value).startswith("The daily spend quota of 2.00 USD is used up (2.00 USD spent today, UTC)")


@pytest.mark.django_db
def test_yesterdays_spend_in_the_facts_is_read_again(alice, django_assert_num_queries):
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=1, cost_nanos=10**9)
    stale = facts(alice, cost_override=Decimal("1"), spent=0, day=date(2020, 1, 1))
    with django_assert_num_queries(1), pytest.raises(quotas.SpendQuotaExceeded):
        quotas.check_can_start(alice.pk, stale)


@pytest.mark.django_db
def test_without_the_spend_facts_the_override_is_read(alice, settings, django_assert_num_queries):
    settings.AGENT_DAILY_COST_QUOTA = "0"
    token_facts = OwnerFacts(alice.pk, None, False, (quotas.today(), 0))  # what a reader of token facts only gives
    with django_assert_num_queries(1):  # the override: none, and no default: nothing more
        quotas.check_can_start(alice.pk, token_facts)
    assert quotas.Admission.for_run(alice.pk, deadline=0.0, facts=token_facts) is None
