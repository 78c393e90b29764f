"""Sub-agents as child runs (agents/runs/children.py): an agent that lists another calls it as a tool `agent_<name>`;
the call is a stored child run linked to its parent, driven as its parent is, whose answer is the observation. Through
the real OpenAI SDK against the stub on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django_tasks_db.models import DBTaskResult

from agents.admin.agents import AgentForm
from agents.models import Agent, Run
from agents.runs import submit
from tests.api.conftest import create_run, run_url
from tests.conftest import client_for
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

WORKER = pytest.mark.django_db(transaction=True)


def work() -> None:
    """What `manage.py db_worker` does, once: every queued task, then stop."""
    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)


def inner(content: str) -> str:
    """A tool's output as the model is shown it, without the markers around it (agents/engine/wrapping.py)."""
    if "<<<TOOL_OUTPUT_START>>>" in content:
        content = content.split("<<<TOOL_OUTPUT_START>>>", 1)[1].rsplit("<<<TOOL_OUTPUT_END>>>", 1)[0]
    return content.strip()


def _reply(body: dict) -> dict:
    """The triage agent hands the question to the helper, then answers with what it said; the helper uses the
    calculator, then answers."""
    system = body["messages"][0]["content"]
    tool_outputs = [inner(m["content"]) for m in body["messages"] if m["role"] == "tool"]
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if "HELPER" in system:
        if not tool_outputs:
            return llm.openai_tool_calls([("h1", "calculator", {"expression": "6*7"})], usage=llm.openai_usage(5, 1))
        return llm.openai_text(f"helper: {question} = {tool_outputs[-1]}", llm.openai_usage(5, 1))
    if not tool_outputs:
        return llm.openai_tool_calls([("t1", "agent_helper", {"input": "what is 6*7?"})], usage=llm.openai_usage(7, 1))
    return llm.openai_text(f"triage: {tool_outputs[-1]}", llm.openai_usage(7, 1))


def serve_openai(settings, stub, reply) -> None:
    """The OpenAI provider pointed at the stub, which answers every chat request with `reply(its JSON body)`."""
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_RATE_LIMIT = "100000/m"

    def handler(request):
        return 200, {"Content-Type": "application/json"}, json.dumps(reply(json.loads(request.body))).encode()

    stub.add("POST", OPENAI_PATH, handler=handler, repeat=True)


@pytest.fixture
def model(settings, stub):
    serve_openai(settings, stub, _reply)
    return stub


@pytest.fixture
def agents(db):
    helper = Agent.objects.create(
        name="helper", instructions="HELPER", provider="openai", tools=["calculator"], description="Does sums."
    )
    triage = Agent.objects.create(name="triage", instructions="TRIAGE", provider="openai", tools=[], agents=["helper"])
    return triage, helper


EXPECTED = "triage: helper: what is 6*7? = 42"


@pytest.mark.django_db
def test_a_sync_run_calls_its_sub_agent_as_a_child_run_and_answers_with_its_answer(api, alice, model, agents):
    response = create_run(api, input="Please work out 6*7", agent="triage")

    assert response.status_code == 201, response.content
    run = response.json()
    assert (run["status"], run["output"], run["parent"]) == ("done", EXPECTED, None)
    assert "agent_helper" in model.requests[0].json()["tools"][0]["function"]["name"]
    detail = api.get(run_url(run["id"])).json()
    assert [s["kind"] for s in detail["steps"]] == ["model", "tool", "model"]
    assert detail["steps"][1]["name"] == "agent_helper"
    assert detail["steps"][1]["output"] == "helper: what is 6*7? = 42"
    assert len(detail["children"]) == 1
    child = api.get(run_url(detail["children"][0])).json()
    assert child["parent"] == {"run": run["id"], "step": 0}
    assert (child["agent"], child["status"], child["output"], child["mode"]) == (
        "helper",
        "done",
        "helper: what is 6*7? = 42",
        "sync",
    )
    assert Run.objects.get(pk=child["id"]).owner_id == alice.pk  # a run of the same user
    assert child["children"] == []


@pytest.mark.django_db
def test_the_sub_agent_tool_is_described_to_the_model_with_the_agents_description(api, model, agents):
    create_run(api, input="Please work out 6*7", agent="triage")

    tools = model.requests[0].json()["tools"]
    (tool,) = [t["function"] for t in tools if t["function"]["name"] == "agent_helper"]
    assert tool["description"].startswith("Does sums.")
    assert tool["parameters"]["required"] == ["input"]


@pytest.mark.django_db
def test_a_childs_budget_is_bounded_by_its_parents(api, model, agents, settings):
    triage, helper = agents
    helper.max_turns, helper.timeout_s = 40, 500
    helper.save()

    run = create_run(api, input="Please work out 6*7", agent="triage", max_turns=5, timeout_s=30).json()

    child = Run.objects.get(parent_id=run["id"])
    assert child.max_turns == 4  # the parent had used one of its five turns
    assert child.timeout_s <= 30
    assert child.deadline <= Run.objects.get(pk=run["id"]).deadline


@pytest.mark.django_db
def test_a_tree_deeper_than_the_limit_is_refused_as_the_calls_error(api, model, agents, settings):
    settings.AGENT_MAX_DEPTH = 0

    run = create_run(api, input="Please work out 6*7", agent="triage").json()

    assert not Run.objects.filter(parent_id=run["id"]).exists()
    tool = Run.objects.get(pk=run["id"]).steps.get(kind="tool")
    assert tool.data["is_error"] is True
    assert "nest 0 deep" in tool.data["output"]


@WORKER
def test_a_background_parent_waits_holding_nothing_and_is_taken_up_when_its_child_is_done(api, model, agents):
    run_id = create_run(api, input="Please work out 6*7", agent="triage", mode="background").json()["id"]

    work()

    parent = Run.objects.get(pk=run_id)
    child = Run.objects.get(parent_id=run_id)
    assert (child.mode, child.status, child.output) == ("background", "done", "helper: what is 6*7? = 42")
    assert (parent.status, parent.output, parent.lease_owner) == ("done", EXPECTED, "")
    assert [s.kind for s in parent.steps.order_by("index")] == ["model", "tool", "model"]


@WORKER
def test_a_background_parent_is_let_go_while_its_child_waits_in_the_queue(api, model, agents):
    from agents.runs import drive

    run_id = create_run(api, input="Please work out 6*7", agent="triage", mode="background").json()["id"]

    parent = drive.execute(run_id=run_id, start_budget=True)  # what the parent's task does, without the child's

    row = Run.objects.get(pk=run_id)
    assert (parent.status, row.status, row.lease_owner, row.lease_expires) == ("running", "running", "", None)
    child = Run.objects.get(parent_id=run_id)
    assert child.status == "queued"
    assert [s.kind for s in row.steps.all()] == ["model"]  # the call waits: no tool step yet
    work()
    assert Run.objects.get(pk=run_id).output == EXPECTED
    assert Run.objects.filter(parent_id=run_id).count() == 1  # the repeated call found its child


@WORKER
def test_a_childs_pending_approval_shows_on_the_parent_and_a_decision_there_goes_to_the_child(
    api, model, agents, reviewer
):
    triage, helper = agents
    helper.sensitive_tools = ["calculator"]
    helper.save()

    run = create_run(api, input="Please work out 6*7", agent="triage").json()

    child = Run.objects.get(parent_id=run["id"])
    assert (run["status"], child.status) == ("awaiting_approval", "awaiting_approval")
    (action,) = run["pending_actions"]
    assert (action["run"], action["tool"], action["arguments"]) == (str(child.pk), "calculator", {"expression": "6*7"})
    assert api.get(run_url(run["id"])).json()["pending_actions"][0]["run"] == str(child.pk)
    parent_row = Run.objects.get(pk=run["id"])
    assert parent_row.approval_expires_at is None  # the child's expiry is the one that counts

    decided = client_for(reviewer).post(run_url(run["id"], "advance"), {"approval": True}, format="json")

    assert decided.status_code == 200, decided.content
    child.refresh_from_db()
    assert (child.status, child.output) == ("done", "helper: what is 6*7? = 42")
    body = decided.json()  # a sync run goes on in the deciding request, as after a decision of its own
    assert (body["status"], body["output"], body["mode"], body["pending_actions"]) == ("done", EXPECTED, "sync", [])
    assert [s.kind for s in child.steps.order_by("index")] == ["model", "approval", "tool", "model"]


@WORKER
def test_a_decision_sent_to_the_child_itself_lets_its_sync_parent_go_on_in_the_background(api, model, agents, reviewer):
    triage, helper = agents
    helper.sensitive_tools = ["calculator"]
    helper.save()
    run = create_run(api, input="Please work out 6*7", agent="triage").json()
    child = Run.objects.get(parent_id=run["id"])

    decided = client_for(reviewer).post(run_url(child.pk, "advance"), {"approval": True}, format="json")

    assert (decided.status_code, decided.json()["status"], decided.json()["parent"]["run"]) == (200, "done", run["id"])
    parent_row = Run.objects.get(pk=run["id"])
    assert (parent_row.status, parent_row.mode) == ("running", "background")  # its caller had its answer
    work()
    parent_row.refresh_from_db()
    assert (parent_row.status, parent_row.output) == ("done", EXPECTED)


@WORKER
def test_a_parent_waiting_on_its_child_is_no_orphan_of_the_recovery_sweep(api, model, agents):
    from datetime import timedelta

    from django.utils import timezone

    from agents.runs import drive, recovery

    run_id = create_run(api, input="Please work out 6*7", agent="triage", mode="background").json()["id"]
    drive.execute(run_id=run_id, start_budget=True)
    DBTaskResult.objects.filter(args_kwargs__args__0=run_id).delete()  # its task was done (here: by hand)
    long_ago = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=run_id).update(updated_at=long_ago)
    Run.objects.filter(parent_id=run_id).update(updated_at=long_ago)

    assert recovery.sweep_orphans() == []  # the parent waits by design; the child's task is still queued
    Run.objects.filter(parent_id=run_id).update(status="done", stop_reason="cancelled")
    assert recovery.sweep_orphans() == [run_id]  # with its child done and no task, it is lost: handed on


@WORKER
def test_cancelling_a_parent_cancels_its_children(api, model, agents, settings):
    from agents.runs import drive

    run_id = create_run(api, input="Please work out 6*7", agent="triage", mode="background").json()["id"]
    drive.execute(run_id=run_id, start_budget=True)
    child = Run.objects.get(parent_id=run_id)

    response = api.post(run_url(run_id, "cancel"))

    assert response.status_code == 200
    child.refresh_from_db()
    assert (child.status, child.stop_reason) == ("done", "cancelled")
    work()  # the child's task finds it done; nothing runs
    assert Run.objects.get(pk=run_id).stop_reason == "cancelled"
    assert child.steps.count() == 0


@pytest.mark.django_db
def test_a_cycle_of_agents_is_refused_when_saved(db):
    Agent.objects.create(name="a", agents=["b"])
    b = Agent.objects.create(name="b")
    b.agents = ["a"]

    assert submit.agent_problems(b)["agents"] == ["These agents would call each other in a cycle: b -> a -> b."]
    itself = Agent(name="c", agents=["c"])
    assert "c -> c" in submit.agent_problems(itself)["agents"][0]
    assert "Unknown agent(s): nobody" in submit.agent_problems(Agent(name="d", agents=["nobody"]))["agents"][0]
    assert "agents" not in submit.agent_problems(Agent(name="e", agents=["b"]))  # b alone calls no one yet


@pytest.mark.django_db
def test_the_console_form_refuses_a_cycle(db):
    Agent.objects.create(name="a", agents=["b"])
    b = Agent.objects.create(name="b")

    form = AgentForm(data={"name": "b", "agents": ["a"], "max_turns": "", "timeout_s": ""}, instance=b)

    assert not form.is_valid()
    assert "cycle" in " ".join(form.errors["agents"])


@pytest.mark.django_db
def test_the_parents_event_stream_carries_its_childs_steps_labelled_with_its_run_id(api, model, agents):
    from tests.api.test_events import read

    run = create_run(api, input="Please work out 6*7", agent="triage").json()
    child_id = str(Run.objects.get(parent_id=run["id"]).pk)

    frames = read(api.get(run_url(run["id"], "events"), HTTP_ACCEPT="text/event-stream"))

    child_steps = [f for f in frames if f["event"] == "child.step"]
    assert [(f["data"]["run"], f["data"]["index"], f["data"]["kind"]) for f in child_steps] == [
        (child_id, 0, "model"),
        (child_id, 1, "tool"),
        (child_id, 2, "model"),
    ]
    assert all(f["id"] is None for f in child_steps)  # not the parent's step ids: Last-Event-ID stays the parent's
    child_runs = [f["data"] for f in frames if f["event"] == "child.run"]
    assert [(r["id"], r["status"], r["output"]) for r in child_runs] == [
        (child_id, "done", "helper: what is 6*7? = 42")
    ]
    assert [f["event"] for f in frames][-2:] == ["run", "done"]
    assert [f["data"]["index"] for f in frames if f["event"] == "step"] == [0, 1, 2]


@pytest.mark.django_db
def test_the_demo_model_asks_a_sub_agent_as_the_docs_example_does(api, alice):
    call_command("ensure_admin", stdout=__import__("io").StringIO())

    run = create_run(api, input="Ask maths: What is 12*7?", agent="triage").json()

    assert (run["status"], run["output"]) == ("done", "84")
    child = Run.objects.get(parent_id=run["id"])
    assert (child.agent, child.input, child.output) == ("maths", "What is 12*7?", "84")
