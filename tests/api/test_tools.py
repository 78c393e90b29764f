"""GET /api/v1/tools and POST /api/v1/tools/{name}/invoke."""

from __future__ import annotations

import pytest

from agents.runs.runtime import tool_registry
from tests.api.conftest import TOOLS
from tests.conftest import client_for, make_user

pytestmark = pytest.mark.django_db


def _invoke(client, name: str, arguments=None, **extra):
    body = {"arguments": arguments} if arguments is not None else {}
    return client.post(f"{TOOLS}/{name}/invoke", {**body, **extra}, format="json")


def test_list_shape(api):
    response = api.get(TOOLS)
    assert response.status_code == 200
    tools = response.json()
    assert isinstance(tools, list)
    assert [t["name"] for t in tools] == tool_registry().names()
    for tool in tools:
        assert set(tool) == {"name", "description", "parameters", "sensitive"}
        assert isinstance(tool["description"], str) and tool["description"]
        assert tool["parameters"]["type"] == "object"
        assert isinstance(tool["sensitive"], bool)
    by_name = {t["name"]: t for t in tools}
    assert by_name["search"]["sensitive"] is True
    assert by_name["calculator"]["sensitive"] is False
    assert "expression" in by_name["calculator"]["parameters"]["properties"]


def test_list_trailing_slash_optional(api):
    assert api.get(TOOLS + "/").status_code == 200


def test_list_marks_the_configured_floor_sensitive(api, settings):
    settings.AGENT_SENSITIVE_TOOLS = ["calculator"]
    by_name = {t["name"]: t for t in api.get(TOOLS).json()}
    assert by_name["calculator"]["sensitive"] is True
    assert by_name["search"]["sensitive"] is True  # flagged by the tool itself


def test_invoke_calculator(api):
    response = _invoke(api, "calculator", {"expression": "2^10"})
    assert response.status_code == 200
    assert response.json() == {"name": "calculator", "output": "1024", "is_error": False}


def test_invoke_trailing_slash_optional(api):
    response = api.post(f"{TOOLS}/calculator/invoke/", {"arguments": {"expression": "1+1"}}, format="json")
    assert response.status_code == 200
    assert response.json()["output"] == "2"


def test_calculator_error_is_a_200_with_is_error(api):
    response = _invoke(api, "calculator", {"expression": "1/0"})
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "calculator"
    assert body["is_error"] is True
    assert isinstance(body["output"], str) and body["output"]


def test_calculator_rejects_code(api):
    response = _invoke(api, "calculator", {"expression": "__import__('os').getcwd()"})
    assert response.status_code == 200
    assert response.json()["is_error"] is True


@pytest.mark.parametrize(
    "arguments",
    [{}, {"expression": 5}, {"expr": "1+1"}, {"expression": "1+1", "extra": 1}, "1+1", ["1+1"]],
)
def test_arguments_that_break_the_schema_are_400(api, arguments):
    response = _invoke(api, "calculator", arguments)
    assert response.status_code == 400
    assert "arguments" in response.json()


def test_missing_arguments_are_400(api):
    response = api.post(f"{TOOLS}/calculator/invoke", {}, format="json")
    assert response.status_code == 400


def test_non_object_body_is_400(api):
    response = api.post(f"{TOOLS}/calculator/invoke", data="[1]", content_type="application/json")
    assert response.status_code == 400


def test_unknown_tool_is_404(api):
    response = _invoke(api, "frobnicate", {"x": 1})
    assert response.status_code == 404
    assert "detail" in response.json()


def test_sensitive_tool_needs_the_review_permission(api, no_search_network):
    response = _invoke(api, "search", {"query": "python"})
    assert response.status_code == 403
    assert "detail" in response.json()
    assert no_search_network.requests == []


def test_plain_staff_may_not_invoke_a_sensitive_tool(db, no_search_network):
    staff = client_for(make_user("stan", staff=True))
    assert _invoke(staff, "search", {"query": "python"}).status_code == 403


def test_the_review_permission_alone_invokes_a_sensitive_tool(db, search_stub):
    """The same right as deciding an approval (issue 10.5): agents.review_run, without being staff."""
    holder = client_for(make_user("perry", reviewer=True))
    assert _invoke(holder, "search", {"query": "python"}).status_code == 200


def test_self_approval_lets_an_owner_invoke_a_sensitive_tool(api, search_stub, settings):
    settings.AGENT_SELF_APPROVAL = True
    assert _invoke(api, "search", {"query": "python"}).status_code == 200


def test_reviewer_invokes_search(reviewer_api, search_stub):
    response = _invoke(reviewer_api, "search", {"query": "python"})
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "search"
    assert body["is_error"] is False
    assert "Python is a programming language." in body["output"]
    assert search_stub.count("GET", "/") == 1


def test_superuser_invokes_search(db, search_stub):
    root = client_for(make_user("root", staff=True, superuser=True))
    assert _invoke(root, "search", {"query": "python"}).status_code == 200


def test_floor_makes_calculator_sensitive_for_invoke(api, reviewer_api, settings):
    settings.AGENT_SENSITIVE_TOOLS = ["calculator"]
    assert _invoke(api, "calculator", {"expression": "1+1"}).status_code == 403
    assert _invoke(reviewer_api, "calculator", {"expression": "1+1"}).status_code == 200


def test_tool_output_is_bounded(api, settings):
    settings.AGENT_MAX_TOOL_OUTPUT_CHARS = 20
    response = _invoke(api, "calculator", {"expression": "9**200"})
    assert response.status_code == 200
    assert len(response.json()["output"]) <= 20


def test_get_on_invoke_is_405(api):
    assert api.get(f"{TOOLS}/calculator/invoke").status_code == 405
