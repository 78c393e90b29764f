"""The moderation guardrail through the real OpenAI SDK against the local stub (agents/providers/moderation.py)."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from agents.engine.types import ModelError, Verdict
from agents.guardrails import guard_for
from agents.providers import moderation
from tests.providers import stub_llm as llm

PATH = "/v1/moderations"


def result(flagged: bool, **categories: bool) -> dict:
    """A moderation reply as OpenAI's API reference shows it (one result)."""
    names = {"harassment": False, "hate": False, "violence": False, "self-harm": False, **categories}
    scores = {name: 0.9 if on else 0.01 for name, on in names.items()}
    return {
        "id": "modr-test",
        "model": "omni-moderation-latest",
        "results": [{"flagged": flagged, "categories": names, "category_scores": scores}],
    }


@pytest.fixture
def openai(settings, stub):
    return llm.point_sdks_at(settings, stub, retries=0)


def guard(**fields):
    return guard_for(SimpleNamespace(guardrails=[{"type": "moderation", **fields}], deadline=None))


def test_a_flagged_text_trips_naming_the_categories(openai, settings):
    settings.AGENT_MODERATION_MODEL = "omni-moderation-test"
    openai.add("POST", PATH, json=result(True, violence=True, harassment=True))
    verdict = guard().check("input", "something violent")
    assert verdict == Verdict("moderation", "the moderation model flagged it (harassment, violence)", "stop")
    sent = openai.requests[-1]
    assert sent.json() == {"model": "omni-moderation-test", "input": "something violent"}
    assert sent.headers["authorization"] == "Bearer " + llm.fake_key()


def test_a_text_it_does_not_flag_passes(openai):
    openai.add("POST", PATH, json=result(False))
    assert guard(model="omni-moderation-2024-09-26", action="correct").check("output", "Hello") is None
    assert openai.requests[-1].json()["model"] == "omni-moderation-2024-09-26"


def test_categories_restrict_what_trips(openai):
    openai.add("POST", PATH, json=result(True, harassment=True))
    openai.add("POST", PATH, json=result(True, harassment=True, violence=True))
    g = guard(categories=["violence", "self-harm"], action="correct")
    assert g.check("output", "rude") is None
    assert g.check("output", "rude and violent") == Verdict(
        "moderation", "the moderation model flagged it (violence)", "correct"
    )


def test_an_empty_text_is_not_sent(openai):
    assert guard().check("output", "  ") is None
    assert openai.requests == []


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ({"status": 500, "json": llm.openai_error()}, "openai moderation: server error (HTTP 500)"),
        ({"status": 401, "json": llm.openai_error("bad key")}, "openai moderation: authentication failed (HTTP 401)"),
        ({"json": {"id": "modr-x", "results": []}}, "openai moderation: unexpected reply shape (no result)"),
    ],
)
def test_a_check_that_cannot_be_made_stops_the_run(openai, reply, why):
    """Fail closed: whatever the guardrail's action, a failed moderation call stops the run, saying why."""
    openai.add("POST", PATH, repeat=True, **reply)
    verdict = guard(action="correct").check("input", "hello")
    assert verdict == Verdict("moderation", f"the check could not be made ({why})", "stop")


def test_a_key_gone_since_the_run_was_made_fails_closed(openai, settings):
    g = guard()
    settings.OPENAI_API_KEY = ""
    verdict = g.check("input", "hello")
    assert verdict.action == "stop" and "OPENAI_API_KEY is not set" in verdict.reason
    assert openai.requests == []


def test_the_reply_is_parsed_into_the_flagged_categories():
    assert moderation.parse(result(True, hate=True)) == moderation.Moderation(True, ("hate",))
    with pytest.raises(ModelError, match="no categories"):
        moderation.parse({"results": [{"flagged": False}]})


def test_the_call_keeps_to_the_runs_deadline(openai):
    """A run with no time left is not checked past its deadline: the call is not made, and the run stops."""
    run = SimpleNamespace(guardrails=[{"type": "moderation"}], deadline=timezone.now() - timedelta(seconds=1))
    verdict = guard_for(run).check("input", "hello")
    assert verdict.reason == (
        "the check could not be made (openai moderation: timed out (no time left in the run budget))"
    )
    assert openai.requests == []
