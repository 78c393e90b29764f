"""Per-run limits through the API (issue 38): `max_total_tokens`, `max_tool_calls`, `tool_limits` as run options and
agent settings, the server's defaults and ceilings, stop reason `usage_limit`, and a 400 naming the field for bad
values with nothing stored."""

from __future__ import annotations

import pytest

from agents.models import Agent, Run
from tests.api.conftest import create_run, run_count, run_url
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

pytestmark = pytest.mark.django_db

TWO_CALLS = "What is 12*7, then plus 1?"  # the demo model: two calculator calls, one per turn


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"


def test_without_limits_the_demo_makes_two_calls(api):
    body = create_run(api, TWO_CALLS).json()
    assert body["stop_reason"] == "final_answer" and body["output"] == "85"
    assert body["max_tool_calls"] is None and body["tool_limits"] == {} and body["max_total_tokens"] is None


def test_max_tool_calls_stops_the_run_with_usage_limit_naming_it(api):
    body = create_run(api, TWO_CALLS, max_tool_calls=1).json()
    assert body["stop_reason"] == "usage_limit" and body["ok"] is False and body["output"] is None
    assert body["max_tool_calls"] == 1 and "max_tool_calls (1)" in body["error"]
    steps = api.get(run_url(body["id"])).json()["steps"]
    assert [s["kind"] for s in steps].count("tool") == 1
    assert steps[-1]["kind"] == "error" and steps[-1]["limit"] == "max_tool_calls"


def test_a_per_tool_limit_tells_the_model_and_the_run_goes_on(api):
    body = create_run(api, TWO_CALLS, tool_limits={"calculator": 1}).json()
    steps = api.get(run_url(body["id"])).json()["steps"]
    refused = [s for s in steps if s.get("limit") == "tool_limits.calculator"]
    assert len(refused) == 1 and refused[0]["is_error"] and "exhausted" in refused[0]["output"]
    assert body["stop_reason"] != "usage_limit"  # the model is told; only it decides what comes next
    assert body["tool_limits"] == {"calculator": 1}


def test_max_total_tokens_stops_before_the_call_that_would_exceed_it(api):
    first = create_run(api, TWO_CALLS).json()
    per_call = first["usage"]["total_tokens"] // first["turns"]
    body = create_run(api, TWO_CALLS, max_total_tokens=per_call + 1).json()
    assert body["stop_reason"] == "usage_limit" and "max_total_tokens" in body["error"]
    assert body["turns"] == 1 and body["usage"]["total_tokens"] < first["usage"]["total_tokens"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"max_tool_calls": 0}, "max_tool_calls"),
        ({"max_total_tokens": 0}, "max_total_tokens"),
        ({"max_total_tokens": "100"}, "max_total_tokens"),
        ({"max_tool_calls": 60691129852104425472}, "max_tool_calls"),  # past the column: a 400, not a 500
        ({"tool_limits": {"calculator": 2**31}}, "tool_limits"),
        ({"tool_limits": {"calculator": 0}}, "tool_limits"),
        ({"tool_limits": {"no_such_tool": 2}}, "tool_limits"),
        ({"tool_limits": ["calculator"]}, "tool_limits"),
    ],
)
def test_bad_limits_are_a_400_naming_the_field_and_store_nothing(api, fields, field):
    before = run_count()
    response = create_run(api, TWO_CALLS, **fields)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert run_count() == before


def test_the_servers_ceiling_refuses_more_and_is_the_default(api, settings):
    settings.AGENT_MAX_TOOL_CALLS_CEILING = 3
    response = create_run(api, TWO_CALLS, max_tool_calls=4)
    assert response.status_code == 400 and "at most 3" in str(response.json())
    assert create_run(api, TWO_CALLS).json()["max_tool_calls"] == 3  # no default: the ceiling is it


def test_the_servers_defaults_apply_to_runs_that_give_none(api, settings):
    settings.AGENT_DEFAULT_MAX_TOTAL_TOKENS = 5000
    settings.AGENT_DEFAULT_TOOL_LIMITS = {"calculator": 4}
    body = create_run(api, TWO_CALLS, tool_limits={"search": 1}).json()
    assert body["max_total_tokens"] == 5000 and body["tool_limits"] == {"calculator": 4, "search": 1}


def test_an_agents_limits_hold_a_request_may_only_lower_them(api):
    Agent.objects.create(name="frugal", max_tool_calls=1, tool_limits={"calculator": 2})
    body = create_run(api, TWO_CALLS, agent="frugal", max_tool_calls=5, tool_limits={"calculator": 9}).json()
    assert body["max_tool_calls"] == 1 and body["tool_limits"] == {"calculator": 2}
    assert body["stop_reason"] == "usage_limit"
    lowered = create_run(api, TWO_CALLS, agent="frugal", tool_limits={"calculator": 1}).json()
    assert lowered["tool_limits"] == {"calculator": 1}


def test_an_agent_with_a_limit_below_one_is_refused_by_the_console_check():
    from agents.runs.submit import agent_problems

    problems = agent_problems(Agent(name="bad", max_tool_calls=0, tool_limits={"calculator": -1}))
    assert "max_tool_calls" in problems and "tool_limits" in problems


def test_limits_are_stored_and_a_fork_keeps_them(api):
    body = create_run(api, TWO_CALLS, max_tool_calls=5, tool_limits={"calculator": 3}).json()
    run = Run.objects.get(pk=body["id"])
    assert (run.max_tool_calls, run.tool_limits) == (5, {"calculator": 3})
    fork = api.post(run_url(body["id"], "fork"), {"from_step": 0}, format="json").json()
    assert fork["max_tool_calls"] == 5 and fork["tool_limits"] == {"calculator": 3}


def test_a_schedule_carries_limits_and_refuses_bad_ones(api):
    made = api.post(
        "/api/v1/schedules",
        {"cron": "0 9 * * *", "input": TWO_CALLS, "max_tool_calls": 2, "tool_limits": {"calculator": 1}},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["options"] == {"max_tool_calls": 2, "tool_limits": {"calculator": 1}}
    bad = api.post("/api/v1/schedules", {"cron": "0 9 * * *", "input": TWO_CALLS, "tool_limits": {"nope": 1}},
                   format="json")  # fmt: skip
    assert bad.status_code == 400 and list(bad.json()) == ["tool_limits"]


@pytest.fixture
def sdks(settings, stub):
    return llm.point_sdks_at(settings, stub, timeout_s=5.0)


def test_limits_hold_for_real_sdks_the_per_tool_limit_through_anthropic(api, sdks):
    """Through the Anthropic SDK against the stub: the model asks for the calculator twice in one reply; the second
    call is answered "exhausted" (it never ran) and the model, told so, answers."""
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_tool_use(
        [("t1", "calculator", {"expression": "12*7"}), ("t2", "calculator", {"expression": "84+1"})],
        usage=llm.anthropic_usage(50, 10)))  # fmt: skip
    sdks.add(
        "POST", ANTHROPIC_PATH, json=llm.anthropic_text("84, and I may not compute more", llm.anthropic_usage(80, 9))
    )
    body = create_run(api, TWO_CALLS, provider="anthropic", tool_limits={"calculator": 1}).json()
    assert body["stop_reason"] == "final_answer", body
    results = [b for m in sdks.requests[-1].json()["messages"] for b in m["content"] if isinstance(m["content"], list)
               and b.get("type") == "tool_result"]  # fmt: skip
    assert [r["tool_use_id"] for r in results] == ["t1", "t2"]
    assert "84" in str(results[0]["content"]) and "exhausted" in str(results[1]["content"])


def test_limits_hold_for_real_sdks_max_total_tokens_through_openai(api, sdks):
    """Through the OpenAI SDK: the first call used 700 tokens of a 1000-token limit with a 600-token input, so the
    second call (whose input is at least that) is never made."""
    sdks.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "calculator", {"expression": "12*7"})],
                                                             usage=llm.openai_usage(600, 100)))  # fmt: skip
    body = create_run(api, TWO_CALLS, provider="openai", max_total_tokens=1000).json()
    assert body["stop_reason"] == "usage_limit" and "max_total_tokens (1000)" in body["error"]
    assert sdks.count("POST", OPENAI_PATH) == 1 and body["usage"]["total_tokens"] == 700
