"""Agents as records (API.md v1.1, "Agents: named configurations"): runs start from a stored configuration,
requests override it within the same limits, the run keeps what it used, instructions and sampling settings reach
both SDKs in both protocols, and a structured answer is checked against the output schema."""

from __future__ import annotations

import json

import pytest

from agents.engine.prompts import REACT_PROMPT, TOOLS_PROMPT
from agents.models import Agent, Run
from tests.api.conftest import ARITHMETIC, create_run, run_url
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

pytestmark = pytest.mark.django_db

INSTRUCTIONS = "Always answer in French. Sign every answer with 'Bien à vous'."
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"


@pytest.fixture
def providers(settings, stub):
    return llm.point_sdks_at(settings, stub, timeout_s=None)


def french(**fields) -> Agent:
    return Agent.objects.create(name="french", instructions=INSTRUCTIONS, **fields)


def sent(stub, path: str) -> list[dict]:
    return [r.json() for r in stub.requests if r.path == path]


def system_text(body: dict, provider: str) -> str:
    if provider == "anthropic":
        system = body["system"]
        return system if isinstance(system, str) else "".join(b["text"] for b in system)
    return body["messages"][0]["content"]


# --- the API ----------------------------------------------------------------------------------------------------


def test_any_user_lists_and_reads_agents(api):
    french(provider="demo", max_turns=4, temperature=0.2)
    listed = api.get("/api/v1/agents").json()
    names = [a["name"] for a in (listed["results"] if isinstance(listed, dict) else listed)]
    assert names == ["french"]
    one = api.get("/api/v1/agents/french").json()
    assert (one["instructions"], one["max_turns"], one["temperature"], one["model"]) == (INSTRUCTIONS, 4, 0.2, None)
    assert api.get("/api/v1/agents/nope").status_code == 404
    assert api.post("/api/v1/agents", {"name": "x"}, format="json").status_code == 403  # writes: staff only


def test_an_unknown_agent_is_400_and_stores_nothing(api):
    response = create_run(api, agent="nobody")
    assert response.status_code == 400 and "agent" in response.json()
    assert Run.objects.count() == 0


def test_a_run_starts_from_the_agent_and_the_request_overrides_it(api):
    french(protocol="react", max_turns=3, timeout_s=30, tools=["calculator"], sensitive_tools=["calculator"])
    run = create_run(api, agent="french", mode="step").json()
    assert (run["agent"], run["protocol"], run["max_turns"], run["timeout_s"]) == ("french", "react", 3, 30.0)
    assert run["tools"] == ["calculator"]
    assert "calculator" in run["sensitive_tools"] and "search" in run["sensitive_tools"]  # widened, floor kept
    override = create_run(api, agent="french", protocol="tools", max_turns=5, sensitive_tools=[]).json()
    assert (override["protocol"], override["max_turns"], override["timeout_s"]) == ("tools", 5, 30.0)
    assert "calculator" in override["sensitive_tools"]  # a request can never narrow the gate
    # The request's limits still hold over an agent's values.
    assert create_run(api, agent="french", max_turns=51).status_code == 400
    assert create_run(api, agent="french", temperature=2.5).status_code == 400


def test_the_run_keeps_what_it_used_when_the_agent_is_edited(api):
    agent = french(max_turns=6, temperature=0.3, max_output_tokens=200)
    first = create_run(api, agent="french").json()
    agent.instructions, agent.max_turns, agent.temperature = "Be terse.", 2, 1.5
    agent.save()
    stored = Run.objects.get(pk=first["id"])
    assert (stored.instructions, stored.max_turns, stored.temperature, stored.max_output_tokens) == (
        INSTRUCTIONS,
        6,
        0.3,
        200,
    )
    agent.delete()
    assert api.get(run_url(first["id"])).json()["agent"] == "french"  # the name stays on the record


def test_a_run_without_an_agent_is_as_in_v1(api):
    run = create_run(api).json()
    assert (run["agent"], run["output_json"], run["max_turns"], run["timeout_s"]) == (None, None, 8, 60.0)
    stored = Run.objects.get(pk=run["id"])
    assert (stored.instructions, stored.temperature, stored.output_schema) == ("", None, None)


def test_the_demo_model_shows_that_it_ignores_sampling_settings(api):
    french(temperature=0.7, max_output_tokens=64)
    run = api.get(run_url(create_run(api, agent="french").json()["id"])).json()
    thoughts = [s["thought"] for s in run["steps"] if s["kind"] == "model"]
    assert all("ignores temperature=0.7, max_output_tokens=64" in t for t in thoughts)
    assert run["output"] == "85"


# --- instructions and sampling settings reach both SDKs -----------------------------------------------------------


def script_answer(stub, provider: str, text: str) -> None:
    if provider == "openai":
        stub.add("POST", OPENAI_PATH, json=llm.openai_text(text))
    else:
        stub.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text(text))


@pytest.mark.parametrize("protocol", ["tools", "react"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_instructions_and_settings_reach_the_provider_after_the_rules(api, providers, provider, protocol):
    french(provider=provider, temperature=0.25, max_output_tokens=321)
    answer = "Bonjour" if protocol == "tools" else "Thought: done\nFinal Answer: Bonjour"
    script_answer(providers, provider, answer)

    run = create_run(api, agent="french", protocol=protocol, input="Say hello").json()

    assert (run["status"], run["output"]) == ("done", "Bonjour")
    body = sent(providers, OPENAI_PATH if provider == "openai" else ANTHROPIC_PATH)[0]
    system = system_text(body, provider)
    rules = TOOLS_PROMPT if protocol == "tools" else REACT_PROMPT.split("{tools}")[0]
    assert system.startswith(rules)  # the built-in rules first, untouched
    assert "TOOL_OUTPUT_START" in system  # the tool-output data rule stays
    assert system.index("TOOL_OUTPUT_END") < system.index(INSTRUCTIONS)  # the agent's instructions after the rules
    assert body["temperature"] == 0.25
    if provider == "openai":
        assert body["max_completion_tokens"] == 321 and body["messages"][0]["role"] == "system"
    else:
        assert body["max_tokens"] == 321 and all(m["role"] != "system" for m in body["messages"])


def test_without_settings_nothing_extra_is_sent(api, providers):
    script_answer(providers, "openai", "ok")
    create_run(api, provider="openai", input="hi")
    body = sent(providers, OPENAI_PATH)[0]
    assert "temperature" not in body and "max_completion_tokens" not in body and "max_tokens" not in body


# --- structured answers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_invalid_structured_answer_goes_back_then_a_valid_one_is_kept(api, providers, provider):
    french(provider=provider, output_schema=SCHEMA)
    script_answer(providers, provider, "The answer is 85")  # not JSON
    script_answer(providers, provider, '{"answer": "85"}')  # JSON, wrong type
    script_answer(providers, provider, '```json\n{"answer": 85}\n```')  # valid (a code fence is allowed)

    run = create_run(api, agent="french", input=ARITHMETIC).json()

    assert (run["status"], run["stop_reason"], run["turns"]) == ("done", "final_answer", 3)
    assert run["output_json"] == {"answer": 85}
    assert json.loads(run["output"]) == {"answer": 85}
    steps = api.get(run_url(run["id"])).json()["steps"]
    errors = [s["message"] for s in steps if s["kind"] == "error"]
    assert len(errors) == 2 and "not JSON" in errors[0] and "'85' is not of type 'integer'" in errors[1]
    bodies = sent(providers, OPENAI_PATH if provider == "openai" else ANTHROPIC_PATH)
    assert json.dumps(SCHEMA, sort_keys=True) in system_text(bodies[0], provider)  # the schema is in the prompt
    last = json.dumps(bodies[2]["messages"][-1])
    assert "does not fit the required output schema" in last and "is not of type" in last  # the validator's message


def test_a_structured_answer_that_never_fits_stops_at_max_turns(api, providers):
    french(provider="openai", output_schema=SCHEMA, max_turns=2)
    script_answer(providers, "openai", "85")
    script_answer(providers, "openai", "[85]")
    run = create_run(api, agent="french").json()
    assert (run["stop_reason"], run["output"], run["output_json"]) == ("max_turns", None, None)


def test_a_broken_output_schema_in_a_request_is_400(api):
    response = create_run(api, output_schema={"type": "no-such-type"})
    assert response.status_code == 400 and "output_schema" in response.json()
    assert Run.objects.count() == 0


def test_the_cli_runs_an_agent(alice, capsys):
    from django.core.management import CommandError, call_command

    Agent.objects.create(name="steady", protocol="react", max_turns=4, temperature=0.1)
    call_command("agent", ARITHMETIC, "--agent", "steady", "--user", "alice")
    out = capsys.readouterr().out
    assert "Final Answer: 85" in out and "ignores temperature=0.1" in out
    run = Run.objects.get()
    assert (run.agent, run.protocol, run.max_turns) == ("steady", "react", 4)
    call_command("agent", ARITHMETIC, "--agent", "steady", "--user", "alice", "--max-turns", "6")
    assert Run.objects.latest("created_at").max_turns == 6
    with pytest.raises(CommandError, match="No agent named 'ghost'") as error:
        call_command("agent", ARITHMETIC, "--agent", "ghost", "--user", "alice")
    assert error.value.returncode == 2
