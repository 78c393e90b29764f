"""Issue 39, item 5: parallel runs near the daily quota overshoot it by at most one call's worth, whatever the calls'
sizes (agents.usage.quotas.Admission). Reserving each call in flight at the largest call seen so far let 20 parallel
runs whose calls grew from 25 to 100 tokens use 975 tokens of a 300-token quota on PostgreSQL, 875 on SQLite.

Real threads against the API (each a sync run, as 20 clients at once) and the scripted OpenAI stub, which holds each
reply a little so that calls really overlap; on both databases (the suite's PostgreSQL run covers the other one).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from rest_framework.test import APIClient

from agents.models import DailyUsage, QuotaReservation, Run
from tests.integration._support import in_threads, quick_user, token_key
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

QUOTA = 300
GATHER_S = 10.0
HOLD_S = 0.1  # each model reply is held this long: the parallel calls overlap


class Model:
    """The stub's model: a run calls the calculator `calls - 1` times, then answers; every reply reports `size`
    tokens (4/5 prompt, 1/5 completion), whatever the request (as a provider may: estimates can be wrong). Counts
    the calls in flight at once."""

    def __init__(self, stub) -> None:
        self.calls, self.size = 2, 0
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        # gather > 0: replies wait until that many calls are in flight at once (for at most GATHER_S from the first
        # call), so a test of parallelism does not depend on how fast a loaded host starts its threads
        self.gather, self.gathered, self.first_at = 0, threading.Event(), None
        stub.add("POST", OPENAI_PATH, handler=self.reply, repeat=True)

    def reply(self, request):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.first_at = self.first_at or time.monotonic()
            if self.gather and self.in_flight >= self.gather:
                self.gathered.set()
        try:
            if self.gather:
                self.gathered.wait(max(0.0, self.first_at + GATHER_S - time.monotonic()))
            time.sleep(HOLD_S)
            body = json.loads(request.body)
            seen = sum(m["role"] == "tool" for m in body["messages"])
            usage = llm.openai_usage(self.size - self.size // 5, self.size // 5)
            if seen + 1 >= self.calls:
                reply = llm.openai_text("4", usage)
            else:
                reply = llm.openai_tool_calls([(f"c{seen}", "calculator", {"expression": "2+2"})], usage=usage)
            return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture
def model(settings, stub):
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_RATE_LIMIT = "100000/m"
    return Model(stub)


def runner(user, **fields):
    key = token_key(user)

    def run(i: int) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        body = {"input": "What is 2+2?", "provider": "openai", **fields}
        return client.post("/api/v1/runs", body, format="json").status_code

    return run


CASES = {
    # quota, the first run (calls, tokens each; none: nothing counted today yet), then every parallel call's tokens
    "growing-calls": (QUOTA, (3, 25), 100),  # the reproduction: reserved at 25, they cost 100
    "same-size-calls": (QUOTA, (3, 25), 25),
    "shrinking-calls": (QUOTA, (1, 75), 25),
    # A bound (~1.8k-4k tokens here: the request's bytes plus its cap) leaves room for a few calls at once.
    "growing-calls-with-room": (10_075, (3, 25), 1500),
    # A provider reporting more than the bound: the first call goes alone, and the rest reserve what it cost.
    "calls-past-their-bound": (20_500, (0, 0), 5000),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("quota", "first", "size"), list(CASES.values()), ids=list(CASES))
@pytest.mark.parametrize("max_output_tokens", [None, 50], ids=["no-output-cap", "output-cap"])
def test_twenty_parallel_runs_overshoot_by_at_most_one_call(settings, model, quota, first, size, max_output_tokens):
    """One run first (75 tokens, its largest call 25 or 75), then 20 runs at once, two calls each, every call
    reporting `size` tokens. The quota is reached, and passed by less than one of those calls."""
    user = quick_user("spender")
    fields = {} if max_output_tokens is None else {"max_output_tokens": max_output_tokens}
    run = runner(user, **fields)
    calls, tokens = first
    if calls:
        model.calls, model.size = calls, tokens
        assert run(0) == 201
        assert DailyUsage.objects.get(owner=user).total_tokens == calls * tokens
    settings.AGENT_DAILY_TOKEN_QUOTA = quota
    model.calls, model.size = 2, size

    statuses = in_threads(20, run)

    assert set(statuses) <= {201, 429}, statuses
    used = DailyUsage.objects.get(owner=user).total_tokens
    assert quota <= used <= quota + size, (used, model.most_in_flight)
    stopped = Run.objects.filter(owner=user, stop_reason="quota_exceeded").count()
    assert stopped + statuses.count(429) >= 10  # most were stopped by the quota
    assert QuotaReservation.objects.count() == 0  # every reservation was given back


@pytest.mark.django_db(transaction=True)
def test_calls_that_fit_under_the_quota_still_run_in_parallel(settings, model):
    """Reserving each call's upper bound costs no parallelism far from the quota: with room for all of them, the
    20 runs' calls are in flight together (and the quota is not reached, so none stops)."""
    user = quick_user("roomy")
    run = runner(user, max_output_tokens=50)
    model.size = 25
    assert run(0) == 201  # a call has been counted today: calls no longer go one at a time
    settings.AGENT_DAILY_TOKEN_QUOTA = 1_000_000
    model.gather, model.first_at = 10, None  # had they gone one at a time, no 10 would ever be in flight together
    statuses = in_threads(20, run)
    assert statuses == [201] * 20
    assert model.most_in_flight >= 10, model.most_in_flight
    assert not Run.objects.filter(owner=user, stop_reason="quota_exceeded").exists()
    assert DailyUsage.objects.get(owner=user).total_tokens == 21 * 2 * 25
