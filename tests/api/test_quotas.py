"""Daily token quotas and usage (API.md v1.1, "Quotas and usage"): the counter kept by the commit's trigger, the 429
on create and advance, the stop mid-run, overrides, the usage route, and the bound under concurrency."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import DailyUsage, QuotaReservation, Run, Step, TokenQuota
from agents.usage import quotas
from tests.api.conftest import create_run, run_url
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

USAGE = "/api/v1/usage"
PER_CALL = 12  # 10 prompt + 2 completion tokens per model reply


def scripted(stub, *, gate: threading.Event | None = None) -> None:
    """A model that calls the calculator once, then answers; each reply reports 10 + 2 tokens."""

    def handler(request):
        if gate is not None:
            gate.wait(10)
        body = json.loads(request.body)
        seen_tool = any(m["role"] == "tool" for m in body["messages"])
        reply = (
            llm.openai_text("4", llm.openai_usage(10, 2))
            if seen_tool
            else llm.openai_tool_calls([("c1", "calculator", {"expression": "2+2"})], usage=llm.openai_usage(10, 2))
        )
        return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()

    stub.add("POST", OPENAI_PATH, handler=handler, repeat=True)


@pytest.fixture
def model(settings, stub):
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_RATE_LIMIT = "100000/m"
    scripted(stub)
    return stub


def openai_run(client, **fields):
    return create_run(client, input="What is 2+2?", provider="openai", **fields)


def model_calls(stub) -> int:
    return stub.count("POST", OPENAI_PATH)


@pytest.mark.django_db
def test_usage_is_counted_per_user_per_day_by_the_commit(api, alice, bob, model):
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
    for _ in range(2):
        assert openai_run(api).json()["output"] == "4"
    row = DailyUsage.objects.get(owner=alice)
    assert (row.day, row.prompt_tokens, row.completion_tokens, row.max_unit) == (quotas.today(), 40, 8, PER_CALL)
    runs = Run.objects.filter(owner=alice)
    assert sum(r.total_tokens for r in runs) == row.total_tokens  # the counter agrees with the runs
    assert not DailyUsage.objects.filter(owner=bob).exists()
    body = api.get(USAGE).json()
    assert (body["prompt_tokens"], body["completion_tokens"], body["total_tokens"]) == (40, 8, 48)


@pytest.mark.django_db
def test_the_demo_model_reports_estimated_tokens_and_they_count(api, alice):
    """Offline, usage and quotas work too: the demo model estimates its tokens from text length."""
    body = create_run(api).json()
    assert body["output"] == "85" and body["usage"]["total_tokens"] > 0
    assert DailyUsage.objects.get(owner=alice).total_tokens == body["usage"]["total_tokens"]
    assert api.get(USAGE).json()["total_tokens"] == body["usage"]["total_tokens"]


@pytest.mark.django_db
def test_usage_route_shows_the_quota_and_what_remains(api, model, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 100
    openai_run(api)
    body = api.get(USAGE).json()
    assert (body["total_tokens"], body["quota"], body["remaining"]) == (24, 100, 76)
    assert APIClient().get(USAGE).status_code == 401


@pytest.mark.django_db
def test_over_quota_create_is_429_before_any_model_call(api, model, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 24
    openai_run(api)
    calls, runs = model_calls(model), Run.objects.count()
    response = openai_run(api)
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 86401
    assert "24 tokens" in response.json()["detail"]
    assert (model_calls(model), Run.objects.count()) == (calls, runs)  # nothing called, nothing stored
    # Background runs too, and the seed route.
    assert openai_run(api, mode="background").status_code == 429
    assert api.post("/v1/agent/runs", {"input": "What is 2+2?"}, format="json").status_code == 429
    assert Run.objects.count() == runs


@pytest.mark.django_db
def test_over_quota_advance_is_429_and_records_nothing(api, model, settings):
    run = openai_run(api, mode="step").json()
    assert run["status"] == "running"
    settings.AGENT_DAILY_TOKEN_QUOTA = 12  # the first reply used 12
    calls, steps = model_calls(model), Step.objects.filter(run_id=run["id"]).count()
    response = api.post(run_url(run["id"], "advance"), {}, format="json")
    assert response.status_code == 429 and "Retry-After" in response
    assert (model_calls(model), Step.objects.filter(run_id=run["id"]).count()) == (calls, steps)
    assert Run.objects.get(pk=run["id"]).lease_owner == ""


@pytest.mark.django_db
def test_a_run_that_crosses_the_quota_stops_after_its_unit(api, model, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 30
    openai_run(api)  # 24 used
    body = openai_run(api).json()  # 24 < 30: starts; its first reply makes 36; the second call is refused
    assert (body["status"], body["stop_reason"], body["turns"], body["output"]) == ("done", "quota_exceeded", 1, None)
    detail = api.get(run_url(body["id"])).json()
    assert [s["kind"] for s in detail["steps"]] == ["model", "tool", "error"]
    assert "30 tokens" in detail["steps"][-1]["message"]
    assert model_calls(model) == 3
    assert QuotaReservation.objects.count() == 0  # every reservation was given back


@pytest.mark.django_db
def test_a_reservation_names_its_run(alice, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 100
    run_id = uuid.uuid4()
    admission = quotas.Admission.for_run(alice.pk, time.time() + 10, run_id=run_id)
    admission.enter(5)
    assert list(QuotaReservation.objects.values_list("owner_id", "run_id")) == [(alice.pk, run_id)]
    admission.leave()
    assert not QuotaReservation.objects.exists()


@pytest.mark.django_db
def test_a_dead_workers_reservation_goes_when_its_run_is_taken_again(api, alice, model, settings):
    """A worker killed mid-call never gives its reservation back. The run's next holder drops it before its own first
    call, instead of waiting (or stopping) until that call's timeout; another run's call in flight is left alone."""
    run = openai_run(api, mode="step", timeout_s=3).json()  # its first unit used 12 tokens
    settings.AGENT_DAILY_TOKEN_QUOTA = 10_000
    far = timezone.now() + timedelta(minutes=10)
    other = QuotaReservation.objects.create(owner=alice, tokens=12, expires_at=far, run_id=uuid.uuid4())
    QuotaReservation.objects.create(owner=alice, tokens=9_000, expires_at=far, run_id=run["id"])  # the dead worker's
    calls = model_calls(model)
    # 12 used + 12 + 9,000 reserved + the call's own reservation (its bound, ~4k tokens: its request's bytes and the
    # 2,048-token output default) would pass 10,000: with the dead reservation kept, the advance waits until the
    # run's deadline and stops with "timeout".
    body = api.post(run_url(run["id"], "advance"), {}, format="json").json()
    assert (body["status"], body["stop_reason"], body["output"]) == ("done", "final_answer", "4")
    assert model_calls(model) == calls + 1
    assert list(QuotaReservation.objects.values_list("pk", flat=True)) == [other.pk]


@pytest.mark.django_db
def test_a_worker_applies_the_owners_override_read_with_the_run(api, alice, model):
    """A background run's worker has no API request (whose token look-up brings the override): it reads the override
    with the run itself. Set after the run was queued, it still stops the run before its first model call."""
    from agents.runs import drive

    run = openai_run(api, mode="background").json()
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=40, completion_tokens=10)
    TokenQuota.objects.update_or_create(user=alice, defaults={"daily_tokens": 50})  # the only quota that binds

    assert drive.run_background(run_id=run["id"]) == "done"
    stored = Run.objects.get(pk=run["id"])
    assert (stored.stop_reason, stored.turns, model_calls(model)) == ("quota_exceeded", 0, 0)


@pytest.mark.django_db
def test_a_users_override_wins_over_the_default(api, alice, model, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 5
    TokenQuota.objects.create(user=alice, daily_tokens=0)  # no quota for alice
    assert openai_run(api).json()["output"] == "4"
    assert openai_run(api).json()["output"] == "4"
    assert api.get(USAGE).json()["quota"] is None
    settings.AGENT_DAILY_TOKEN_QUOTA = 0
    TokenQuota.objects.filter(user=alice).update(daily_tokens=40)  # a quota for alice alone
    assert openai_run(api).status_code == 429
    assert api.get(USAGE).json()["remaining"] == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "near-the-quota"])
def test_twenty_parallel_runs_never_spend_more_than_one_call_past_the_quota(settings, stub, warm):
    """20 runs of one user at once, each wanting two calls. Cold: nothing known about the size of a call yet (one
    call at a time until one is). Warm: 24 tokens used already, the quota a few calls away."""
    from tests.conftest import make_user
    from tests.integration._support import in_threads, token_key

    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_RATE_LIMIT = "100000/m"
    scripted(stub)
    user = make_user("spender")
    key = token_key(user)

    def run(i: int) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client.post("/api/v1/runs", {"input": "What is 2+2?", "provider": "openai"}, format="json").status_code

    if warm:
        assert run(0) == 201
    quota = (24 if warm else 0) + 5 * PER_CALL + 3  # room for five calls and a bit
    settings.AGENT_DAILY_TOKEN_QUOTA = quota

    statuses = in_threads(20, run)

    assert set(statuses) <= {201, 429}, statuses
    used = DailyUsage.objects.get(owner=user).total_tokens
    assert quota <= used <= quota + PER_CALL, (used, quota)
    stopped = Run.objects.filter(owner=user, stop_reason="quota_exceeded").count()
    assert stopped + statuses.count(429) >= 15  # most were stopped by the quota, not let through
    assert QuotaReservation.objects.count() == 0


@pytest.mark.django_db
def test_the_cli_refuses_a_run_over_quota_and_stores_nothing(alice, model, settings):
    from django.core.management import CommandError, call_command

    settings.AGENT_DAILY_TOKEN_QUOTA = 10
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=8, completion_tokens=2)
    with pytest.raises(CommandError, match="10 tokens") as error:
        call_command("agent", "What is 2+2?", "--provider", "openai", "--user", "alice", "--new-thread")
    assert error.value.returncode == 2
    assert (Run.objects.count(), model_calls(model)) == (0, 0)
    from agents.models import Thread

    assert not Thread.objects.exists()  # the new thread went with the refused run


def quota_request(content: str = "What is 2+2?", max_output_tokens: int | None = None):
    from agents.engine.types import ModelRequest

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]
    return ModelRequest(messages, [llm.CALC], "tools", 5.0, max_output_tokens=max_output_tokens)


def test_a_calls_bound_is_a_token_per_byte_of_its_request_plus_its_output_cap(settings):
    settings.AGENT_QUOTA_OUTPUT_ESTIMATE = 1000
    capped, uncapped = quota_request(max_output_tokens=50), quota_request()
    assert quotas.call_bound(capped) == quotas.call_bound(uncapped) - 1000 + 50
    request_bytes = quotas.call_bound(capped) - 50
    assert request_bytes > len("Be brief.What is 2+2?") + len(json.dumps(llm.CALC.parameters))  # tool specs count too
    # Non-ASCII text counts its UTF-8 bytes (a byte-level token is at least one byte): 3 per character here.
    assert quotas.call_bound(quota_request("\u56db" * 100, 50)) - quotas.call_bound(quota_request("", 50)) == 300


@pytest.mark.django_db
@pytest.mark.parametrize("largest_call", [25, 5000], ids=["bound-is-larger", "a-larger-call-was-seen"])
def test_a_call_reserves_its_bound_or_the_largest_call_counted_today(alice, settings, largest_call):
    """A call that cost more than its own bound (a provider past its cap) makes later calls reserve what it cost."""
    settings.AGENT_DAILY_TOKEN_QUOTA = 100_000
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=75, max_unit=largest_call)
    request = quota_request(max_output_tokens=50)
    admission = quotas.Admission.for_run(alice.pk, time.time() + 10, run_id=uuid.uuid4())
    admission.enter(5, request=request)
    assert QuotaReservation.objects.get().tokens == max(quotas.call_bound(request), largest_call)
    admission.leave()


@pytest.mark.django_db
def test_a_call_that_does_not_fit_starts_only_alone(alice, settings):
    """Room for less than one call's bound: a call still starts when none of the user's calls is in flight (the one
    call that may overshoot), and a second waits for it, here until its run's deadline."""
    from agents.engine import HostStop, StopReason

    request = quota_request(max_output_tokens=50)
    settings.AGENT_DAILY_TOKEN_QUOTA = 75 + quotas.call_bound(request) - 1
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=75, max_unit=25)
    first = quotas.Admission.for_run(alice.pk, time.time() + 10, run_id=uuid.uuid4())
    first.enter(5, request=request)
    second = quotas.Admission.for_run(alice.pk, time.time() + 0.5, run_id=uuid.uuid4())
    with pytest.raises(HostStop) as stop:
        second.enter(5, request=request)
    assert stop.value.reason == StopReason.TIMEOUT
    first.leave()
    second.deadline = time.time() + 10
    second.enter(5, request=request)  # alone now
    assert QuotaReservation.objects.count() == 1
    second.leave()


@pytest.mark.django_db
def test_a_reviewers_advance_checks_the_owners_quota_not_the_reviewers(api, alice, reviewer, model):
    """The facts the reviewer's token look-up read are the reviewer's (no override, nothing used): they must not
    stand in for the owner's. Alice's override is used up, so the reviewer's step of her run is 429; the reviewer's
    own runs are unaffected."""
    from tests.conftest import client_for

    run = openai_run(api, mode="step").json()  # alice has used 12
    TokenQuota.objects.create(user=alice, daily_tokens=12)
    reviewer_api = client_for(reviewer)
    calls = model_calls(model)

    response = reviewer_api.post(run_url(run["id"], "advance"), {}, format="json")
    assert response.status_code == 429 and "12 tokens" in response.json()["detail"]
    assert model_calls(model) == calls
    assert openai_run(reviewer_api).json()["output"] == "4"  # the reviewer's own quota is the default: none
