"""One rule decides whether a tool is sensitive (agents.runs.runtime.is_sensitive): the tool's own flag or the
deployment's floor (AGENT_SENSITIVE_TOOLS, MCP servers). The tools list, the served schema, a new run's approval gate
and a direct invoke all answer with it, so a tool added to the floor is sensitive everywhere at once."""

from __future__ import annotations

import pytest

from agents.runs import runtime
from tests.api.conftest import TOOLS, create_run

pytestmark = pytest.mark.django_db


def test_the_tools_own_flag_or_the_floor(settings):
    settings.AGENT_SENSITIVE_TOOLS = []
    registry = runtime.tool_registry()
    calculator, search = registry.get("calculator"), registry.get("search")
    assert (runtime.is_sensitive(calculator), runtime.is_sensitive(search)) == (False, True)
    settings.AGENT_SENSITIVE_TOOLS = ["calculator"]
    assert runtime.is_sensitive(calculator) and runtime.is_sensitive(calculator, floor=["calculator"])
    assert not runtime.is_sensitive(calculator, floor=[])  # the floor given is the one judged by


def test_a_floor_tool_is_sensitive_in_the_list_the_schema_a_run_and_a_direct_invoke(settings, api):
    settings.AGENT_SENSITIVE_TOOLS = ["calculator"]
    listed = {t["name"]: t["sensitive"] for t in api.get(TOOLS).json()}
    assert listed["calculator"] is True
    schema = api.get("/api/v1/schema?format=json").json()
    invoke = schema["paths"]["/api/v1/tools/calculator/invoke/"]["post"]
    assert "403" in invoke["responses"] and "Sensitive" in invoke["description"]  # needs the approval right
    run = create_run(api, "What is 12*7?", tools=["calculator"], sensitive_tools=["search"]).json()
    assert run["sensitive_tools"] == ["calculator", "search"]  # floor, the run's own tools, the client's addition
    assert run["status"] == "awaiting_approval" and run["pending_action"]["tool"] == "calculator"


def test_the_gate_can_be_widened_by_the_client_never_narrowed(settings):
    settings.AGENT_SENSITIVE_TOOLS = []
    assert runtime.sensitive_names(["calculator", "search"]) == ["search"]
    assert runtime.sensitive_names(["calculator"], also=["calculator"]) == ["calculator"]
    registry = runtime.tool_registry()
    flagged = [name for name in registry.names() if registry.get(name).sensitive]
    assert "search" in flagged and "calculator" not in flagged
    assert runtime.sensitive_names(None) == flagged  # every tool: those that say so
