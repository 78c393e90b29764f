"""Guardrails end to end: runs made with `POST /api/v1/runs` and a `guardrails` option, driven by the offline demo
model or by the real OpenAI SDK against the local stub (docs/guardrails.md)."""

from __future__ import annotations

import pytest

from agents.models import Agent, Run
from tests.api.conftest import create_run, run_count, run_url
from tests.conftest import client_for
from tests.guardrails.test_moderation import PATH as MODERATIONS
from tests.guardrails.test_moderation import result
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

pytestmark = pytest.mark.django_db

EMAIL = "jane.doe@example.com"
HOOKS = {"no_competitors": "tests.guardrails.hooks.no_competitors"}


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.AGENT_GUARDRAIL_HOOKS = HOOKS
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def openai(settings, stub):
    return llm.point_sdks_at(settings, stub, retries=0)


def run(api, input: str, *guardrails: dict, **fields) -> dict:
    response = create_run(api, input, guardrails=list(guardrails), **fields)
    assert response.status_code == 201, response.content
    return api.get(run_url(response.json()["id"])).json()


def last_step(body: dict) -> dict:
    return body["steps"][-1]


def stopped_by(body: dict, guardrail: str, stage: str, reason: str) -> None:
    """The run ended with stop reason `guardrail`, its error and its last step naming the guardrail and why."""
    message = f"Guardrail '{guardrail}' tripped on the {stage}: {reason}"
    assert (body["status"], body["stop_reason"], body["ok"], body["output"]) == ("done", "guardrail", False, None)
    assert body["error"] == message
    step = last_step(body)
    assert (step["kind"], step["message"], step["guardrail"]) == ("error", message, guardrail)


# --- the offline demo model ------------------------------------------------------------------------------------


def test_an_input_guardrail_stops_the_run_before_any_model_call(api):
    body = run(api, "What is 12*7? My password is hunter2", {"type": "regex", "name": "secrets", "patterns": ["pass"]})
    stopped_by(body, "secrets", "input", "the text matches deny pattern 1")
    assert body["turns"] == 0 and len(body["steps"]) == 1
    assert "hunter2" not in body["error"]


def test_an_input_guardrail_stops_even_when_it_would_correct(api):
    guardrail = {"type": "regex", "patterns": ["(?i)password"], "action": "correct"}
    body = run(api, "My password is hunter2", guardrail)
    stopped_by(body, "regex", "input", "the text matches deny pattern 1")


def test_an_output_guardrail_refuses_the_final_answer(api):
    body = run(api, "What is 12*7?", {"type": "max_length", "chars": 1})
    stopped_by(body, "max_length", "output", "it is 2 characters long, more than 1")
    model = body["steps"][-2]
    assert (model["kind"], model["text"], model["final_answer"]) == ("model", "84", None)
    assert Run.objects.get(pk=body["id"]).output is None


def test_tool_arguments_that_break_a_rule_stop_before_the_tool_runs(api):
    schema = {"properties": {"expression": {"maxLength": 3}}}
    body = run(api, "What is 12*7?", {"type": "tool_schema", "tool": "calculator", "schema": schema})
    stopped_by(body, "tool_schema", "tool arguments", "they do not fit its schema: expression: '12*7' is too long")
    assert [s["kind"] for s in body["steps"]] == ["model", "error"]  # the calculator never ran


def test_a_correction_on_tool_arguments_answers_the_call_and_the_run_goes_on(api):
    guardrail = {
        "type": "regex",
        "name": "no-stars",
        "patterns": [r"\*"],
        "action": "correct",
        "on": ["tool_arguments"],
    }
    body = run(api, "What is 12*7?", guardrail)
    tool = body["steps"][1]
    assert (tool["kind"], tool["is_error"], tool["guardrail"]) == ("tool", True, "no-stars")
    assert tool["output"].startswith(
        "Guardrail 'no-stars' refused these arguments: the arguments match deny pattern 1."
    )
    assert (body["stop_reason"], body["ok"]) == ("final_answer", True)  # the demo model gives up and says so
    assert body["output"].startswith("I could not compute it: Guardrail 'no-stars' refused these arguments")


def test_a_tool_output_guardrail_withholds_the_result(api):
    body = run(api, "What is 12*7?", {"type": "regex", "name": "no-84", "patterns": ["^84$"], "on": ["tool_output"]})
    stopped_by(body, "no-84", "tool output", "the text matches deny pattern 1")
    tool = body["steps"][1]
    assert (tool["kind"], tool["is_error"]) == ("tool", True)
    assert tool["output"] == "Guardrail 'no-84' withheld this tool's output: the text matches deny pattern 1."


def test_pii_in_a_tools_output_is_redacted_before_the_model_and_the_record_see_it(api, reviewer, stub, settings):
    settings.TAVILY_API_KEY, settings.DUCKDUCKGO_URL = "", stub.url + "/"
    stub.add("GET", "/", json={"Heading": "Jane", "AbstractText": f"Jane writes from {EMAIL}, tel +44 20 7946 0958."})
    paused = run(api, "search for Jane Doe", {"type": "pii"}, tools=["search"])
    assert paused["status"] == "awaiting_approval"  # search waits for a reviewer; its result is checked after
    response = client_for(reviewer).post(run_url(paused["id"], "advance"), {"approval": True}, format="json")
    assert response.status_code == 200, response.content
    body = api.get(run_url(paused["id"])).json()
    tool = next(step for step in body["steps"] if step["kind"] == "tool")
    assert "Jane writes from [email], tel [phone]." in tool["output"]
    assert body["stop_reason"] == "final_answer" and "[email]" in body["output"]
    stored = str(list(Run.objects.get(pk=body["id"]).steps.values_list("data", flat=True)))
    assert EMAIL not in stored and "7946" not in stored


def test_a_hook_stops_the_run(api):
    body = run(api, "Is ACME cheaper? What is 1+1?", {"type": "hook", "name": "no_competitors"})
    stopped_by(body, "no_competitors", "input", "it names a competitor")


def test_a_moderation_guardrail_checks_the_input_and_the_final_answer(api, openai):
    openai.add("POST", MODERATIONS, json=result(False), repeat=True)
    body = run(api, "What is 12*7?", {"type": "moderation"})
    assert (body["stop_reason"], body["output"]) == ("final_answer", "84")
    assert [r.json()["input"] for r in openai.requests] == ["What is 12*7?", "84"]


def test_a_flagged_input_stops_the_run(api, openai):
    openai.add("POST", MODERATIONS, json=result(True, violence=True))
    body = run(api, "What is 12*7?", {"type": "moderation", "name": "mod"})
    stopped_by(body, "mod", "input", "the moderation model flagged it (violence)")
    assert body["turns"] == 0


def test_a_moderation_endpoint_that_fails_stops_the_run(api, openai):
    openai.add("POST", MODERATIONS, status=503, json=llm.openai_error(), repeat=True)
    body = run(api, "What is 12*7?", {"type": "moderation", "on": ["output"], "action": "correct"})
    stopped_by(body, "moderation", "output", "the check could not be made (openai moderation: server error (HTTP 503))")


def test_an_agents_guardrails_come_first_and_a_run_adds_its_own(api):
    Agent.objects.create(name="support", guardrails=[{"type": "max_length", "chars": 100, "name": "short"}])
    body = run(api, "What is 12*7?", {"type": "regex", "patterns": ["^84$"], "on": ["output"]}, agent="support")
    assert [g["type"] for g in body["guardrails"]] == ["max_length", "regex"]
    stopped_by(body, "regex", "output", "the text matches deny pattern 1")


# --- the real OpenAI SDK against the stub ----------------------------------------------------------------------


def sent(stub) -> list[dict]:
    return [r.json() for r in stub.requests if r.path == OPENAI_PATH]


def openai_run(api, *guardrails: dict) -> dict:
    return run(api, "How do I reach Jane?", *guardrails, provider="openai", model="gpt-4.1-mini", tools=["calculator"])


def test_the_final_answer_is_redacted_in_the_record_and_what_the_model_is_sent_next(api, openai):
    openai.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "calculator", {"expression": "1+1"})],
                                                                text=f"Let me write to {EMAIL} first."))  # fmt: skip
    openai.add("POST", OPENAI_PATH, json=llm.openai_text(f"Write to {EMAIL} or call +1 (555) 123-4567."))
    body = openai_run(api, {"type": "pii"})
    assert (body["stop_reason"], body["output"]) == ("final_answer", "Write to [email] or call [phone].")
    assert body["steps"][0]["text"] == "Let me write to [email] first."
    assert body["steps"][-1]["final_answer"] == "Write to [email] or call [phone]."
    second = sent(openai)[1]["messages"]
    assistant = next(m for m in second if m["role"] == "assistant")
    assert assistant["content"] == "Let me write to [email] first."
    assert EMAIL not in str(second)
    assert EMAIL not in str(list(Run.objects.get(pk=body["id"]).steps.values_list("data", flat=True)))


def test_pii_in_the_final_answer_can_stop_the_run(api, openai):
    openai.add("POST", OPENAI_PATH, json=llm.openai_text(f"Write to {EMAIL}."))
    body = openai_run(api, {"type": "pii", "action": "stop", "name": "no-pii"})
    stopped_by(body, "no-pii", "output", "it contains personal data (email)")
    assert EMAIL not in body["error"]


def test_a_correction_is_sent_once_then_a_second_trip_stops(api, openai):
    openai.add("POST", OPENAI_PATH, json=llm.openai_text(f"Write to {EMAIL}."))
    openai.add("POST", OPENAI_PATH, json=llm.openai_text(f"Really, write to {EMAIL}."))
    body = openai_run(api, {"type": "pii", "action": "correct"})
    correction = body["steps"][1]
    assert (correction["kind"], correction["guardrail"]) == ("error", "pii")
    assert correction["message"] == "Guardrail 'pii': it contains personal data (email)"
    told = sent(openai)[1]["messages"][-1]
    assert told["role"] == "user"
    assert told["content"].startswith("Your final answer was not accepted: it contains personal data (email).")
    stopped_by(body, "pii", "output", "it contains personal data (email)")
    assert len(sent(openai)) == 2 and body["turns"] == 2


def test_a_corrected_answer_is_accepted(api, openai):
    openai.add("POST", OPENAI_PATH, json=llm.openai_text(f"Write to {EMAIL}."))
    openai.add("POST", OPENAI_PATH, json=llm.openai_text("Use the contact form."))
    body = openai_run(api, {"type": "pii", "action": "correct"})
    assert (body["stop_reason"], body["output"], body["error"]) == ("final_answer", "Use the contact form.", None)


def test_a_flagged_answer_is_corrected_by_the_moderation_guardrail(api, openai):
    openai.add("POST", MODERATIONS, json=result(False))  # the input
    openai.add("POST", MODERATIONS, json=result(True, harassment=True))  # the first answer
    openai.add("POST", MODERATIONS, json=result(False))  # the second
    openai.add("POST", OPENAI_PATH, json=llm.openai_text("You fool."))
    openai.add("POST", OPENAI_PATH, json=llm.openai_text("Try the contact form."))
    body = openai_run(api, {"type": "moderation", "action": "correct"})
    assert (body["stop_reason"], body["output"]) == ("final_answer", "Try the contact form.")
    assert body["steps"][1]["message"] == "Guardrail 'moderation': the moderation model flagged it (harassment)"
    assert [r.json()["input"] for r in openai.requests if r.path == MODERATIONS] == [
        "How do I reach Jane?",
        "You fool.",
        "Try the contact form.",
    ]


# --- bad configurations: 400 naming `guardrails`, nothing stored -----------------------------------------------


@pytest.mark.parametrize(
    ("guardrails", "problem"),
    [
        ([{"type": "profanity"}], "Guardrail 1: unknown type 'profanity'."),
        ([{"type": "regex", "patterns": ["("]}], "Guardrail 1 (regex): pattern 1 does not compile:"),
        ([{"type": "hook", "name": "nope"}], "Guardrail 1 (hook): unknown hook 'nope'"),
        ([{"type": "moderation"}], "Guardrail 1 (moderation): needs OPENAI_API_KEY"),
    ],
)
def test_a_bad_configuration_is_a_400_naming_guardrails(api, settings, guardrails, problem):
    settings.OPENAI_API_KEY = ""
    response = create_run(api, guardrails=guardrails)
    assert response.status_code == 400
    [message] = response.json()["guardrails"]
    assert message.startswith(problem), message
    assert run_count() == 0
