"""The console and issue 38: an agent's limits, guardrails and fallback models are edited on its page and refused
as a run would refuse them; a run's cost shows on its page (the run and each model step) and in the list."""

from __future__ import annotations

import pytest

from agents.models import Agent, Run, Step
from tests.conftest import stored_run_fields
from tests.console.test_agents_admin import ADD, form

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, superuser):
    client.force_login(superuser)
    return client


def safety_form(**fields) -> dict:
    empty = {"max_total_tokens": "", "max_tool_calls": "", "tool_limits": "", "guardrails": "", "fallback_models": ""}
    return form(**{**empty, **fields})


def test_an_agents_limits_are_saved_from_its_page(staff_client):
    response = staff_client.post(
        ADD, safety_form(max_total_tokens="20000", max_tool_calls="6", tool_limits='{"calculator": 2}')
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    agent = Agent.objects.get(name="helper")
    assert (agent.max_total_tokens, agent.max_tool_calls, agent.tool_limits) == (20000, 6, {"calculator": 2})
    assert agent.guardrails is None and agent.fallback_models is None  # empty boxes: none


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tool_limits": '{"teleport": 2}'}, "Unknown tool(s): teleport"),
        ({"tool_limits": '{"calculator": 0}'}, "from 1 to 2147483647"),
        ({"max_tool_calls": "0"}, "from 1 to 2147483647"),
        ({"guardrails": '[{"type": "telepathy"}]'}, "telepathy"),
        ({"fallback_models": '["skynet/t-800"]'}, "skynet"),
    ],
    ids=["unknown-tool", "tool-below-one", "calls-below-one", "unknown-guardrail", "fallback-not-allowed"],
)
def test_the_agent_page_refuses_bad_limits(staff_client, fields, message):
    response = staff_client.post(ADD, safety_form(**fields))
    assert response.status_code == 200 and message in response.content.decode()
    assert not Agent.objects.filter(name="helper").exists()


def test_a_runs_cost_shows_on_its_page_and_in_the_list(staff_client, superuser, settings):
    settings.AGENT_CURRENCY = "EUR"
    run = Run.objects.create(owner=superuser, **stored_run_fields(cost_nanos=1_234_500))
    Step.objects.create(
        run=run,
        index=0,
        kind="model",
        data={
            "text": "4",
            "tool_calls": [],
            "final_answer": "4",
            "usage": {"prompt_tokens": 3},
            "cost_nanos": 1_234_500,
            "model": "anthropic/claude-x",
        },
    )
    page = staff_client.get(f"/admin/agents/run/{run.pk}/change/").content.decode()
    assert '<span id="run-cost">0.0012345 EUR</span>' in page
    assert '<span class="cost">0.0012345 EUR</span>' in page and "answered by anthropic/claude-x" in page
    listing = staff_client.get("/admin/agents/run/").content.decode()
    assert "(0.0012345 EUR)" in listing
