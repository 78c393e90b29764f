"""Fallback models of a run and of an agent, through `POST /api/v1/runs`, the real SDKs and the stub (issue 38, item
3): the step records the model that answered, a failure that no fallback mends ends the run as `model_error`
naming every model tried, and a list a run could not use is a 400 naming `fallback_models` before anything is stored
(the console's agent form refuses it the same way)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from agents.models import Agent, Run
from agents.runs import live
from agents.runs.submit import agent_problems
from tests.api.conftest import create_run, run_count, run_url
from tests.conftest import make_user
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

pytestmark = pytest.mark.django_db

FAST_RETRY = {"retry-after-ms": "1"}
CLAUDE = "anthropic/claude-haiku-4-5"
PRIMARY = {"provider": "openai", "model": "gpt-4o-mini", "tools": ["calculator"]}
DOC = Path(django_settings.BASE_DIR) / "docs" / "fallback-models.md"


@pytest.fixture(autouse=True)
def _no_rate_limit(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"


def fail(stub, path: str, status: int) -> None:
    stub.add("POST", path, status=status, json=llm.openai_error(), headers=FAST_RETRY, repeat=True)


def model_steps(run_id) -> list[dict]:
    return [step.data for step in Run.objects.get(pk=run_id).steps.order_by("index") if step.kind == "model"]


def test_a_rate_limited_primary_is_answered_by_the_fallback_and_the_step_names_it(api, sdks):
    fail(sdks, OPENAI_PATH, 429)
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_tool_use([("tu_1", "calculator", {"expression": "12*7+1"})]))
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("85"))

    response = create_run(api, **PRIMARY, fallback_models=[CLAUDE])

    body = response.json()
    assert response.status_code == 201, body
    assert (body["stop_reason"], body["output"], body["fallback_models"]) == ("final_answer", "85", [CLAUDE])
    assert (body["provider"], body["model"]) == ("openai", "gpt-4o-mini")  # the run's own model is unchanged
    assert [data.get("model") for data in model_steps(body["id"])] == [CLAUDE, CLAUDE]
    shown = [s for s in api.get(run_url(body["id"])).json()["steps"] if s["kind"] == "model"]
    assert [s.get("model") for s in shown] == [CLAUDE, CLAUDE]
    assert sdks.count("POST", OPENAI_PATH) == 4  # each turn: the primary first (two attempts), then the fallback


def test_a_step_the_primary_answered_names_no_model(api, sdks):
    sdks.add("POST", OPENAI_PATH, json=llm.openai_text("85"))
    body = create_run(api, **PRIMARY, fallback_models=[CLAUDE]).json()
    assert body["output"] == "85" and "model" not in model_steps(body["id"])[0]


def test_a_refused_key_of_the_primary_ends_the_run_without_a_fallback(api, sdks):
    fail(sdks, OPENAI_PATH, 401)

    body = create_run(api, **PRIMARY, fallback_models=[CLAUDE]).json()

    assert body["stop_reason"] == "model_error" and body["error"] == "openai: authentication failed (HTTP 401)"
    assert sdks.count("POST", ANTHROPIC_PATH) == 0


def test_a_failing_server_is_answered_by_the_fallback(api, sdks):
    fail(sdks, OPENAI_PATH, 500)
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("85"))

    body = create_run(api, **PRIMARY, fallback_models=[CLAUDE]).json()

    assert (body["stop_reason"], body["output"]) == ("final_answer", "85")
    assert model_steps(body["id"])[0]["model"] == CLAUDE


def test_when_every_model_fails_the_run_ends_as_a_model_error_naming_them_all(api, sdks):
    fail(sdks, OPENAI_PATH, 429)
    fail(sdks, ANTHROPIC_PATH, 529)

    body = create_run(api, **PRIMARY, fallback_models=[CLAUDE, "openai/gpt-4.1"]).json()

    assert body["stop_reason"] == "model_error"
    assert body["error"] == (
        "openai/gpt-4o-mini: rate limited after 2 attempts (HTTP 429); "
        "anthropic/claude-haiku-4-5: overloaded after 2 attempts (HTTP 529); "
        "openai/gpt-4.1: rate limited after 2 attempts (HTTP 429)"
    )
    assert api.get(run_url(body["id"])).json()["steps"][-1]["message"] == body["error"]


class Heard:
    """A live sink (as the CLI's) that keeps what it hears: the text, "|" where a retry voided it."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def text(self, turn: int, text: str) -> None:
        self.pieces.append(text)

    def retry(self, turn: int) -> None:
        self.pieces.append("|")

    def tool_started(self, call_id, tool, arguments) -> None: ...

    def tool_finished(self, call_id, tool, is_error, latency_ms) -> None: ...


def test_a_followed_run_falls_back_after_text_went_out_and_voids_it(settings, api, sdks):
    """A run followed live whose primary broke off mid-reply: the listener is told the text so far is void, then
    hears the fallback's reply, which alone is the run's record."""
    settings.AGENT_LLM_MAX_RETRIES = 0
    events = llm.openai_stream(llm.openai_text("The answer is 84, as computed."))
    sdks.add(
        "POST", OPENAI_PATH, body=b"".join(events[: len(events) // 2]), headers={"Content-Type": "text/event-stream"}
    )
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("85"))
    heard = Heard()

    with live.also_to(heard):
        body = create_run(api, **PRIMARY, fallback_models=[CLAUDE]).json()

    before, bar, after = "".join(heard.pieces).partition("|")
    assert before and "The answer is 84".startswith(before) and (bar, after) == ("|", "85")
    assert (body["stop_reason"], body["output"]) == ("final_answer", "85")
    assert model_steps(body["id"])[0]["model"] == CLAUDE


def test_an_agents_fallbacks_serve_its_runs(api, sdks):
    Agent.objects.create(name="steady", instructions="Be brief.", provider="openai", model="gpt-4o-mini",
                         fallback_models=[CLAUDE])  # fmt: skip
    fail(sdks, OPENAI_PATH, 503)
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("85"))

    body = create_run(api, agent="steady").json()

    assert (body["output"], body["fallback_models"]) == ("85", [CLAUDE])
    assert model_steps(body["id"])[0]["model"] == CLAUDE


def test_a_runs_own_list_replaces_its_agents(api):
    Agent.objects.create(name="steady", instructions="Be brief.", fallback_models=["demo/demo-1"])

    assert create_run(api, agent="steady").json()["fallback_models"] == ["demo/demo-1"]
    assert create_run(api, agent="steady", fallback_models=["demo/demo-2"]).json()["fallback_models"] == ["demo/demo-2"]
    assert create_run(api, agent="steady", fallback_models=[]).json()["fallback_models"] == []


# --- validation ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fallbacks", "message"),
    [
        (["anthropic/claude-haiku-4-5", "xai/grok-4"], "Fallback 2 'xai/grok-4': Provider 'xai' is not allowed here"),
        (["anthropic/claude-x"], "Fallback 1 'anthropic/claude-x': Model 'claude-x' is not allowed for provider"),
        (["anthropic"], 'Fallback 1 must be a "provider/model" string'),
        (["/claude-x"], 'Fallback 1 must be a "provider/model" string'),
        (["anthropic/"], 'Fallback 1 must be a "provider/model" string'),
        ([CLAUDE, CLAUDE], f"Fallback 2 '{CLAUDE}' is listed twice."),
        (["nowhere/model"], "Fallback 1 'nowhere/model': Provider 'nowhere' is not allowed here"),
    ],
)
def test_a_list_a_run_could_not_use_is_a_400_naming_the_field(api, settings, fallbacks, message):
    settings.AGENT_ALLOWED_PROVIDERS = ["demo", "anthropic"]
    settings.ANTHROPIC_API_KEY = llm.fake_key("sk-ant-test-")
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "anthropic": ["claude-haiku-4-5"]}

    response = create_run(api, fallback_models=fallbacks)

    assert response.status_code == 400
    assert list(response.json()) == ["fallback_models"]
    assert response.json()["fallback_models"][0].startswith(message), response.json()
    assert run_count() == 0


def test_a_fallback_that_needs_a_missing_key_is_a_400(api, settings):
    settings.ANTHROPIC_API_KEY = ""

    response = create_run(api, fallback_models=["anthropic/claude-x"])

    assert response.status_code == 400
    assert response.json() == {
        "fallback_models": [
            "Fallback 1 'anthropic/claude-x': Provider 'anthropic' cannot be used: ANTHROPIC_API_KEY is not set."
        ]  # fmt: skip
    }
    assert run_count() == 0


@pytest.mark.parametrize("value", [[1], "anthropic/claude-x", [None], [f"demo/m{i}" for i in range(6)]])
def test_a_value_that_is_not_a_short_list_of_strings_is_a_400(api, value):
    response = create_run(api, fallback_models=value)
    assert response.status_code == 400 and "fallback_models" in response.json(), response.json()
    assert run_count() == 0


def test_a_model_with_a_slash_of_its_own_is_split_at_the_first(api, settings):
    settings.HF_TOKEN = llm.fake_key("hf_")
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "huggingface": ["meta-llama/Llama-3.1-8B-Instruct"]}

    response = create_run(api, fallback_models=["huggingface/meta-llama/Llama-3.1-8B-Instruct"])

    assert response.status_code == 201, response.json()
    assert response.json()["fallback_models"] == ["huggingface/meta-llama/Llama-3.1-8B-Instruct"]


def test_the_console_refuses_an_agent_whose_fallback_needs_a_missing_key(settings, client):
    settings.ANTHROPIC_API_KEY = ""
    agent = Agent(name="steady", instructions="Be brief.", fallback_models=["demo/demo-1", "anthropic/claude-x"])
    assert agent_problems(agent) == {
        "fallback_models": [
            "Fallback 2 'anthropic/claude-x': Provider 'anthropic' cannot be used: ANTHROPIC_API_KEY is not set."
        ]  # fmt: skip
    }
    client.force_login(make_user("root", staff=True, superuser=True))
    form = {"name": "steady", "instructions": "Be brief.", "fallback_models": json.dumps(agent.fallback_models)}

    page = client.post("/admin/agents/agent/add/", form)

    assert page.status_code == 200 and "ANTHROPIC_API_KEY is not set." in page.content.decode()
    assert not Agent.objects.exists()


# --- the page's example ----------------------------------------------------------------------------------------


def test_the_pages_example_run_works_with_the_demo_model(api):
    """The curl example of docs/fallback-models.md, as written, against the offline demo model."""
    payload = re.search(r"curl -s -X POST .*?/api/v1/runs .*?-d '(\{.*?\})'", DOC.read_text(), re.S)
    assert payload, "the page shows a run created with fallback models"
    sent = json.loads(payload.group(1))

    body = create_run(api, **{k: v for k, v in sent.items() if k != "input"}, input=sent["input"]).json()

    assert sent["fallback_models"] and body["fallback_models"] == sent["fallback_models"]
    assert (body["stop_reason"], body["output"]) == ("final_answer", "85")
