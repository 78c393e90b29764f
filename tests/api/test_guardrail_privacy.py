"""What a pii guardrail keeps out of sight (issue 38): the input is redacted before it is stored or sent (a list
input's text parts too, a fork's edited input too), and a run with a guardrail on its output streams no words live:
a follower would read them before they are redacted or refused."""

from __future__ import annotations

import pytest

from agents.models import Run, Step
from agents.runs import live
from tests.api.conftest import create_run, run_url
from tests.fallback.test_fallback_runs import Heard
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

pytestmark = pytest.mark.django_db

PII = [{"type": "pii"}]
EMAIL = "ann.lee@example.com"


@pytest.fixture(autouse=True)
def _no_rate_limit(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"


def test_the_input_is_redacted_before_it_is_stored_or_sent(api):
    body = create_run(api, f"Remember that my email is {EMAIL}", guardrails=PII).json()
    assert body["input"] == "Remember that my email is [email]", body
    stored = Run.objects.get(pk=body["id"])
    assert EMAIL not in stored.input
    assert all(EMAIL not in str(data) for data in Step.objects.filter(run=stored).values_list("data", flat=True))


def test_without_the_guardrail_the_input_is_kept_as_given(api):
    body = create_run(api, f"Remember that my email is {EMAIL}").json()
    assert EMAIL in body["input"]


def test_a_list_inputs_text_parts_are_redacted(api):
    parts = [{"type": "text", "text": f"Write to {EMAIL}"}, {"type": "text", "text": "What is 2+3?"}]
    body = create_run(api, parts, guardrails=PII).json()
    assert body["input"][0] == {"type": "text", "text": "Write to [email]"}
    assert EMAIL not in Run.objects.get(pk=body["id"]).input


def test_a_forks_edited_input_is_redacted_as_its_originals_was(api):
    original = create_run(api, "What is 2+3?", guardrails=PII).json()
    fork = api.post(run_url(original["id"], "fork"), {"from_step": 0, "input": f"Mail {EMAIL}"}, format="json")
    assert fork.status_code == 201, fork.content
    assert fork.json()["input"] == "Mail [email]"


def test_a_run_with_an_output_guardrail_streams_no_words_live(api, settings, stub):
    llm.point_sdks_at(settings, stub, timeout_s=5.0)
    reply = llm.openai_text(f"Write to {EMAIL}")
    stub.add("POST", OPENAI_PATH, json=reply)
    stub.add("POST", OPENAI_PATH, json=reply)
    heard_plain, heard_guarded = Heard(), Heard()

    with live.also_to(heard_guarded):
        guarded = create_run(api, "Who do I write to?", provider="openai", guardrails=PII).json()
    assert guarded["output"] == "Write to [email]"
    assert heard_guarded.pieces == [] and "stream" not in stub.requests[-1].json()

    stub.add("POST", OPENAI_PATH, body=b"".join(llm.openai_stream(reply)),
             headers={"Content-Type": "text/event-stream"})  # fmt: skip
    with live.also_to(heard_plain):
        plain = create_run(api, "Who do I write to?", provider="openai").json()
    assert plain["output"] == f"Write to {EMAIL}" and EMAIL in "".join(heard_plain.pieces)  # the control


def test_a_forks_edited_input_meets_the_input_guardrails(api):
    original = create_run(api, "What is 2+3?", guardrails=[{"type": "regex", "patterns": ["(?i)password"]}]).json()
    before = Run.objects.count()
    fork = api.post(run_url(original["id"], "fork"), {"from_step": 0, "input": "My password is x"}, format="json")
    assert fork.status_code == 400 and list(fork.json()) == ["input"]
    assert "Guardrail 'regex'" in fork.json()["input"][0] and Run.objects.count() == before


def test_a_forks_edited_tool_output_is_redacted_as_a_tools_is(api):
    original = create_run(api, "What is 2+3?", guardrails=PII).json()
    steps = api.get(run_url(original["id"])).json()["steps"]
    tool = next(s for s in steps if s["kind"] == "tool")
    fork = api.post(run_url(original["id"], "fork"), {"from_step": tool["index"], "tool_output": f"5, ask {EMAIL}"},
                    format="json")  # fmt: skip
    assert fork.status_code == 201, fork.content
    edited = api.get(run_url(fork.json()["id"])).json()["steps"][tool["index"]]
    assert edited["output"] == "5, ask [email]"
