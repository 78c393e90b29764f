"""Agents managed over the API, with versions (API.md v1.3, "Agents managed over the API, with versions"): staff (or
a staff user's key with scope `agents`) create, change, delete and restore agents; every change, from the API or the
admin, is a new immutable version; a run records the version it ran and `name@n` runs version n; a deleted agent's
versions stay for the runs that used them; schedules and evals name a version too."""

from __future__ import annotations

import html
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from agents.api.views.agents import AgentCreateSerializer
from agents.keys import services as keys
from agents.models import Agent, AgentVersion, Run, Schedule
from agents.schedules import services as schedules
from tests.conftest import client_for, make_user

pytestmark = pytest.mark.django_db

AGENTS = "/api/v1/agents"


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"


@pytest.fixture
def staff(db):
    return make_user("stella", staff=True)


@pytest.fixture
def ops(staff):
    return client_for(staff)


def create(client, **body):
    return client.post(AGENTS, body, format="json")


def run_of(client, **body):
    response = client.post("/api/v1/runs", {"input": "What is 12*7?", "provider": "demo", **body}, format="json")
    return response


def test_staff_create_an_agent_as_its_version_1(ops, staff):
    response = create(ops, name="support", instructions="Be brief.", max_turns=4, tools=["calculator"])

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["version"], body["instructions"], body["max_turns"]) == ("support", 1, "Be brief.", 4)
    version = AgentVersion.objects.get(name="support")
    assert (version.version, version.created_by, version.restored_from) == (1, staff, None)
    assert version.config["instructions"] == "Be brief." and version.config["tools"] == ["calculator"]


def test_others_may_read_but_not_write(api, ops):
    assert create(ops, name="support").status_code == 201
    assert create(api, name="mine").status_code == 403
    assert api.patch(f"{AGENTS}/support", {"max_turns": 2}, format="json").status_code == 403
    assert api.delete(f"{AGENTS}/support").status_code == 403
    assert api.post(f"{AGENTS}/support/versions/1/restore").status_code == 403
    assert api.get(f"{AGENTS}/support").status_code == 200
    assert api.get(f"{AGENTS}/support/versions").status_code == 200
    assert list(Agent.objects.values_list("name", flat=True)) == ["support"]
    assert AgentVersion.objects.count() == 1


def test_a_staff_users_key_with_scope_agents_writes_and_without_it_is_403(staff, alice):
    from rest_framework.test import APIClient

    def bearer(owner, scopes):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {keys.create_key(owner, name='ci', scopes=scopes)[1]}")
        return client

    deploy = bearer(staff, ["agents", "runs:read"])
    assert create(deploy, name="from-ci", max_turns=3).status_code == 201
    assert deploy.patch(f"{AGENTS}/from-ci", {"max_turns": 5}, format="json").json()["version"] == 2
    refused = create(bearer(staff, ["runs:read", "runs:write"]), name="other")
    assert refused.status_code == 403 and '"agents"' in refused.json()["detail"]
    assert create(bearer(alice, ["agents"]), name="sneaky").status_code == 403  # not staff: the scope is not enough
    assert sorted(Agent.objects.values_list("name", flat=True)) == ["from-ci"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tools": ["no-such-tool"]}, "tools"),
        ({"max_turns": 999}, "max_turns"),
        ({"max_turns": "4"}, "max_turns"),
        ({"provider": "nope"}, "provider"),
        ({"output_schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}, "output_schema"),
        ({"max_tool_calls": 2**40}, "max_tool_calls"),
        ({"guardrails": [{"type": "no-such-guardrail"}]}, "guardrails"),
        ({"evaluators": [{"name": "x", "check": {"type": "exact", "value": "1"}}]}, "evaluators"),
        ({"agents": ["ghost"]}, "agents"),
        ({"unknown_field": 1}, "unknown_field"),
        ({"prompt_cache": "yes"}, "prompt_cache"),
        ({"history": "forget"}, "history"),
    ],
)
def test_what_a_run_would_refuse_is_a_400_naming_the_field_and_nothing_is_stored(ops, body, field):
    response = create(ops, name="bad", **body)

    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Agent.objects.exists() and not AgentVersion.objects.exists()


@pytest.mark.parametrize("name", ["has space", "at@sign", "", "x" * 65, "slash/y"])
def test_a_bad_name_is_a_400(ops, name):
    response = create(ops, name=name)
    assert response.status_code == 400 and "name" in response.json()
    assert not Agent.objects.exists()


def test_a_name_taken_is_a_400(ops):
    assert create(ops, name="support").status_code == 201
    again = create(ops, name="support", max_turns=3)
    assert again.status_code == 400 and "exists" in again.json()["name"][0]
    assert AgentVersion.objects.count() == 1


def test_each_change_is_a_version_listed_newest_first_and_no_change_makes_none(ops):
    create(ops, name="support", instructions="v1")
    assert ops.patch(f"{AGENTS}/support", {"instructions": "v2", "max_turns": 3}, format="json").status_code == 200
    assert ops.patch(f"{AGENTS}/support", {"max_turns": None}, format="json").json()["version"] == 3
    same = ops.patch(f"{AGENTS}/support", {"instructions": "v2"}, format="json")
    assert same.status_code == 200 and same.json()["version"] == 3

    listed = ops.get(f"{AGENTS}/support/versions").json()
    assert [v["version"] for v in listed] == [3, 2, 1]
    assert [v["config"]["instructions"] for v in listed] == ["v2", "v2", "v1"]
    assert [v["config"]["max_turns"] for v in listed] == [None, 3, None]
    assert listed[0]["created_by"] == "stella" and set(listed[0]) >= {"version", "created_at", "created_by", "config"}


def test_a_change_that_a_run_would_refuse_keeps_the_agent_as_it_was(ops):
    create(ops, name="support", max_turns=4)
    response = ops.patch(f"{AGENTS}/support", {"tools": ["no-such-tool"], "max_turns": 5}, format="json")
    assert response.status_code == 400 and "tools" in response.json()
    agent = Agent.objects.get(name="support")
    assert (agent.max_turns, agent.version, AgentVersion.objects.count()) == (4, 1, 1)


def test_the_name_cannot_change_and_unknown_agents_are_404(ops):
    create(ops, name="support")
    assert ops.patch(f"{AGENTS}/support", {"name": "other"}, format="json").status_code == 400
    assert ops.patch(f"{AGENTS}/ghost", {"max_turns": 2}, format="json").status_code == 404
    assert ops.get(f"{AGENTS}/ghost/versions").status_code == 404
    assert ops.post(f"{AGENTS}/support/versions/7/restore").status_code == 404
    assert ops.delete(f"{AGENTS}/ghost").status_code == 404


def test_a_run_records_its_version_and_name_at_n_runs_version_n(ops, api):
    create(ops, name="support", instructions="first words", max_turns=3)
    ops.patch(f"{AGENTS}/support", {"instructions": "second words", "max_turns": 5}, format="json")

    current = run_of(api, agent="support")
    older = run_of(api, agent="support@1")

    assert current.status_code == 201 and older.status_code == 201, (current.content, older.content)
    assert (current.json()["agent"], current.json()["agent_version"]) == ("support", 2)
    assert (older.json()["agent"], older.json()["agent_version"], older.json()["max_turns"]) == ("support", 1, 3)
    assert Run.objects.get(pk=older.json()["id"]).instructions == "first words"
    assert Run.objects.get(pk=current.json()["id"]).instructions == "second words"
    assert run_of(api).json()["agent_version"] is None


@pytest.mark.parametrize(("ref", "words"), [("support@9", "no version 9"), ("support@x", "whole number"),
                                            ("support@0", "whole number"), ("ghost@1", "No agent named")])  # fmt: skip
def test_an_unknown_version_is_a_400_and_no_run_is_stored(ops, api, ref, words):
    create(ops, name="support")
    response = run_of(api, agent=ref)
    assert response.status_code == 400 and words in response.json()["agent"][0], response.json()
    assert not Run.objects.exists()


def test_restore_makes_a_new_version_equal_to_the_old_one(ops, api):
    create(ops, name="support", instructions="good", max_turns=3)
    ops.patch(f"{AGENTS}/support", {"instructions": "a bad prompt change", "max_turns": 6}, format="json")

    restored = ops.post(f"{AGENTS}/support/versions/1/restore")

    assert restored.status_code == 201, restored.content
    assert (restored.json()["version"], restored.json()["restored_from"]) == (3, 1)
    configs = {v.version: v.config for v in AgentVersion.objects.filter(name="support")}
    assert configs[3] == configs[1] != configs[2]
    assert ops.get(f"{AGENTS}/support").json()["instructions"] == "good"
    assert run_of(api, agent="support").json()["agent_version"] == 3


def test_a_deleted_agent_keeps_its_versions_for_the_runs_that_used_them(ops, api):
    create(ops, name="support", instructions="kept")
    run = run_of(api, agent="support").json()

    assert ops.delete(f"{AGENTS}/support").status_code == 204

    assert not Agent.objects.exists()
    assert list(AgentVersion.objects.values_list("name", "version")) == [("support", 1)]
    shown = api.get(f"/api/v1/runs/{run['id']}").json()
    assert (shown["agent"], shown["agent_version"]) == ("support", 1)
    assert run_of(api, agent="support@1").status_code == 400  # gone: it no longer runs
    again = create(ops, name="support", instructions="new")
    assert again.json()["version"] == 2  # numbering goes on: support@1 never means two things


def test_the_same_validation_as_the_admin_and_the_run(ops):
    """One validator: the API's 400 says what the admin's form and a run say of the same value."""
    from agents.admin.agents import AgentForm

    api_says = create(ops, name="bad", tools=["no-such-tool"]).json()["tools"]
    form = AgentForm(data={"name": "bad", "tools": ["no-such-tool"], "sensitive_tools": []})
    assert not form.is_valid()
    run_says = run_of(client_for(make_user("runner")), tools=["no-such-tool"]).json()["tools"]
    assert api_says == form.errors["tools"] == run_says


def test_the_body_declares_every_agent_option():
    from agents.runconfig.options import AGENT_OPTIONS

    assert set(AGENT_OPTIONS) <= set(AgentCreateSerializer().fields)


# --- the admin --------------------------------------------------------------------------------------------------


@pytest.fixture
def console(db):
    admin = make_user("root", staff=True, superuser=True)
    client = Client()
    client.force_login(admin)
    return client


def _admin_form(**fields) -> dict:
    data = {"name": "support", "description": "", "instructions": "", "provider": "", "model": "", "protocol": "",
            "max_turns": "", "timeout_s": "", "temperature": "", "max_output_tokens": "", "output_schema": "",
            "max_total_tokens": "", "max_tool_calls": "", "tool_limits": "", "guardrails": "", "fallback_models": "",
            "evaluators": "", "prompt_cache": "unknown", "history": ""}  # fmt: skip
    return {**data, **fields}


def test_an_admin_edit_makes_a_version_and_the_history_shows_a_diff_and_restores(console):
    added = console.post("/admin/agents/agent/add/", _admin_form(instructions="from the admin"))
    assert added.status_code == 302, added.content.decode()[-3000:]
    agent = Agent.objects.get(name="support")
    assert agent.version == 1
    changed = console.post(f"/admin/agents/agent/{agent.pk}/change/", _admin_form(instructions="edited", max_turns="4"))
    assert changed.status_code == 302, changed.content.decode()[-3000:]
    assert Agent.objects.get(pk=agent.pk).version == 2

    page = console.get(f"/admin/agents/agent/{agent.pk}/versions/")
    text = html.unescape(page.content.decode())
    assert page.status_code == 200
    assert '<span class="removed">-instructions: "from the admin"</span>' in text
    assert '<span class="added">+instructions: "edited"</span>' in text
    assert '<span class="added">+max_turns: 4</span>' in text and "Restore version 1" in text

    restored = console.post(f"/admin/agents/agent/{agent.pk}/versions/", {"restore": "1"})
    assert restored.status_code == 302
    agent.refresh_from_db()
    assert (agent.version, agent.instructions, agent.max_turns) == (3, "from the admin", None)
    assert AgentVersion.objects.get(name="support", version=3).restored_from == 1


def test_the_admin_page_of_an_agent_links_its_history_and_keeps_its_name(console):
    console.post("/admin/agents/agent/add/", _admin_form())
    agent = Agent.objects.get(name="support")
    page = console.get(f"/admin/agents/agent/{agent.pk}/change/").content.decode()
    assert f"/admin/agents/agent/{agent.pk}/versions/" in page
    console.post(f"/admin/agents/agent/{agent.pk}/change/", _admin_form(name="renamed", max_turns="2"))
    assert Agent.objects.get(pk=agent.pk).name == "support"  # read-only once made: versions go by name


# --- schedules and evals ----------------------------------------------------------------------------------------


def test_a_schedule_names_a_version(ops, alice):
    create(ops, name="support", instructions="one", max_turns=3)
    ops.patch(f"{AGENTS}/support", {"instructions": "two"}, format="json")
    with pytest.raises(Exception, match="no version 5"):
        schedules.create_schedule(owner=alice, cron="0 9 * * *", input="hi", options={"agent": "support@5"})
    schedule = schedules.create_schedule(owner=alice, cron="0 9 * * *", input="hi", options={"agent": "support@1"})
    assert Schedule.objects.get(pk=schedule.pk).options["agent"] == "support@1"
    run, _ = schedules._start(schedule)
    assert (run.agent, run.agent_version, run.instructions) == ("support", 1, "one")


def test_run_evals_names_an_agent_with_a_version(ops, tmp_path):
    create(ops, name="calc", provider="demo", instructions="old")
    ops.patch(f"{AGENTS}/calc", {"instructions": "new"}, format="json")
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        json.dumps([{"id": "mult", "input": "What is 12*7?", "check": {"type": "contains", "value": "84"}}])
    )

    call_command("run_evals", "--cases", str(cases), "--agent", "calc@1", "--protocol", "tools")

    run = Run.objects.get()
    assert (run.agent, run.agent_version, run.instructions) == ("calc", 1, "old")
    with pytest.raises(CommandError, match="no version 4") as refused:
        call_command("run_evals", "--cases", str(cases), "--agent", "calc@4")
    assert refused.value.returncode == 2
