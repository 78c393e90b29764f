"""The console's Agents page: what a run would refuse is refused before saving; the history says who changed what."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from agents.models import Agent
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

ADD = "/admin/agents/agent/add/"


@pytest.fixture
def staff_client(client, superuser):
    client.force_login(superuser)
    return client


def form(**fields) -> dict:
    data = {
        "name": "helper",
        "instructions": "Be brief.",
        "provider": "",
        "model": "",
        "protocol": "",
        "tools": [],  # checkboxes: none checked
        "sensitive_tools": [],
        "max_turns": "",
        "timeout_s": "",
        "temperature": "",
        "max_output_tokens": "",
        "output_schema": "",
    }
    return {**data, **fields}


def test_a_valid_agent_is_saved_with_who_changed_it(staff_client, superuser):
    response = staff_client.post(ADD, form(tools=["calculator"], temperature="0.5", output_schema='{"type": "object"}'))
    assert response.status_code == 302, response.content.decode()[-2000:]
    agent = Agent.objects.get(name="helper")
    assert (agent.tools, agent.temperature, agent.output_schema, agent.updated_by) == (
        ["calculator"],
        0.5,
        {"type": "object"},
        superuser,
    )
    change = f"/admin/agents/agent/{agent.pk}/change/"
    staff_client.post(change, form(tools=["calculator"], temperature="0.9", output_schema='{"type": "object"}'))
    history = staff_client.get(f"/admin/agents/agent/{agent.pk}/history/").content.decode()
    assert "Temperature" in history and superuser.username in history
    assert LogEntry.objects.filter(object_id=str(agent.pk)).count() == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tools": ["calculator", "teleport"]}, "Unknown tool(s): teleport"),
        ({"sensitive_tools": ["nope"]}, "Unknown tool(s): nope"),
        ({"output_schema": '{"type": "no-such-type"}'}, "Not a valid JSON Schema"),
        ({"output_schema": "[1, 2]"}, "A JSON Schema is a JSON object"),
        ({"provider": "skynet"}, "skynet"),
        ({"max_turns": "99"}, "between 1 and 50"),
        ({"temperature": "3"}, "between 0 and 2"),
        ({"max_output_tokens": "40000"}, "between 1 and 32000"),
    ],
    ids=[
        "unknown-tool",
        "unknown-sensitive",
        "broken-schema",
        "schema-not-object",
        "provider",
        "turns",
        "temp",
        "tokens",
    ],
)
def test_the_admin_refuses_what_a_run_would_refuse(staff_client, fields, message):
    response = staff_client.post(ADD, form(**fields))
    assert response.status_code == 200  # the form again, with the error
    assert message in response.content.decode()
    assert not Agent.objects.exists()


def test_staff_without_the_right_cannot_edit_agents(client):
    client.force_login(make_user("vera", staff=True))
    assert client.get(ADD).status_code == 403
