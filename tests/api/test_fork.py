"""Fork from any step (`POST /api/v1/runs/{id}/fork`): a new run whose state is the original's after step k, with
edits, continued in any mode. Through the real OpenAI SDK against the stub on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from agents.models import Run
from tests.api.conftest import create_run, run_url
from tests.api.test_children import inner, serve_openai
from tests.conftest import client_for
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH


def _reply(body: dict) -> dict:
    """Calls the calculator on the user's sum, then answers with what the tool said."""
    tool_outputs = [inner(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    question = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    if not tool_outputs:
        expression = question.split("What is ")[-1].rstrip("?")
        return llm.openai_tool_calls([("c1", "calculator", {"expression": expression})], usage=llm.openai_usage(10, 2))
    return llm.openai_text(f"got {tool_outputs[-1]}", llm.openai_usage(10, 2))


@pytest.fixture
def model(settings, stub):
    serve_openai(settings, stub, _reply)
    return stub


def original(api) -> dict:
    run = create_run(api, input="What is 2+2?", provider="openai").json()
    assert (run["status"], run["output"]) == ("done", "got 4")
    return run


def fork(client, run_id, **body):
    return client.post(run_url(run_id, "fork"), body, format="json")


@pytest.mark.django_db
def test_a_fork_continues_from_the_step_it_names_and_says_where_it_came_from(api, model):
    run = original(api)

    response = fork(api, run["id"], from_step=1)

    assert response.status_code == 201, response.content
    new = response.json()
    assert new["id"] != run["id"]
    assert new["forked_from"] == {"run": run["id"], "step": 1}
    assert (new["status"], new["output"], new["turns"]) == ("done", "got 4", 2)
    assert new["usage"]["total_tokens"] == 12  # only its own model call
    steps = api.get(run_url(new["id"])).json()["steps"]
    assert [(s["index"], s["kind"]) for s in steps] == [(0, "model"), (1, "tool"), (2, "model")]
    assert model.count("POST", OPENAI_PATH) == 3  # two for the original, one for the fork
    assert api.get(run_url(run["id"])).json()["forked_from"] is None


@pytest.mark.django_db
def test_a_fork_with_an_edited_tool_result_shows_the_model_the_edit(api, model):
    run = original(api)

    new = fork(api, run["id"], from_step=1, tool_output="5").json()

    assert new["output"] == "got 5"
    step = api.get(run_url(new["id"])).json()["steps"][1]
    assert (step["kind"], step["output"], step["is_error"]) == ("tool", "5", False)
    assert Run.objects.get(pk=run["id"]).steps.get(index=1).data["output"] == "4"  # the original is untouched


@pytest.mark.django_db
def test_a_fork_from_the_first_step_with_an_edited_input(api, model):
    run = original(api)

    new = fork(api, run["id"], from_step=0, input="What is 3+3?").json()

    # The copied reply still asks for 2+2 (the record is kept as it was); what follows sees the new input.
    assert new["input"] == "What is 3+3?"
    assert new["output"] == "got 4"
    last_request = json.loads(model.requests[-1].body)
    assert [m["content"] for m in last_request["messages"] if m["role"] == "user"] == ["What is 3+3?"]


@pytest.mark.django_db(transaction=True)
def test_a_fork_runs_in_any_mode(api, model):
    run = original(api)

    background = fork(api, run["id"], from_step=1, mode="background").json()
    step = fork(api, run["id"], from_step=0, mode="step").json()

    assert (background["status"], background["mode"]) == ("queued", "background")
    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)
    assert Run.objects.get(pk=background["id"]).output == "got 4"
    assert (step["status"], step["mode"], step["turns"]) == ("running", "step", 1)  # one unit: the tool ran
    assert [s.kind for s in Run.objects.get(pk=step["id"]).steps.order_by("index")] == ["model", "tool"]


@pytest.mark.django_db
def test_a_fork_of_a_paused_run_pauses_at_the_same_call(api, model, settings):
    settings.AGENT_SENSITIVE_TOOLS = ["calculator"]
    run = create_run(api, input="What is 2+2?", provider="openai").json()
    assert run["status"] == "awaiting_approval"

    new = fork(api, run["id"], from_step=0).json()

    assert new["status"] == "awaiting_approval"
    assert new["pending_action"]["tool"] == "calculator"


@pytest.mark.django_db
def test_bad_forks_are_refused_and_nothing_is_created(api, bob, model):
    run = original(api)
    before = Run.objects.count()

    out_of_range = fork(api, run["id"], from_step=3)
    final = fork(api, run["id"], from_step=2)
    not_a_tool = fork(api, run["id"], from_step=0, tool_output="5")
    negative = fork(api, run["id"], from_step=-1)
    missing = fork(api, run["id"])
    other_user = fork(client_for(bob), run["id"], from_step=1)
    unknown = fork(api, "00000000-0000-0000-0000-000000000000", from_step=1)

    assert out_of_range.status_code == 400
    assert out_of_range.json()["from_step"] == ["Out of range: this run has steps 0 to 2."]
    assert final.status_code == 400 and "final answer" in final.json()["from_step"][0]
    assert not_a_tool.status_code == 400 and "not a tool's result" in not_a_tool.json()["tool_output"][0]
    assert negative.status_code == 400 and "from_step" in negative.json()
    assert missing.status_code == 400 and "from_step" in missing.json()
    assert (other_user.status_code, unknown.status_code) == (404, 404)
    assert Run.objects.count() == before


@pytest.mark.django_db
def test_the_docs_fork_example_with_the_demo_model(api):
    run = create_run(api, input="What is 12*7, plus 1?").json()
    assert run["output"] == "85"

    edited = fork(api, run["id"], from_step=1, tool_output="100").json()
    stepped = fork(api, run["id"], from_step=0, mode="step").json()

    assert (edited["status"], edited["output"]) == ("done", "101")
    assert (stepped["status"], stepped["mode"]) == ("running", "step")
