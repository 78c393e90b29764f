"""A JSON value of the wrong type is a 400 naming the field and the type, never coerced (issue 10, point 2)."""

from __future__ import annotations

import pytest

from agents.models import Run, Step
from memory.models import Fact
from tests.api.conftest import ARITHMETIC, RUNS, SEED, create_run, run_count, run_url

pytestmark = pytest.mark.django_db

FACTS = "/api/v1/memory/facts"
NOT_STRINGS = [5, 1.5, True, False, ["a"], {"a": "b"}]
STRING_FIELDS = ["input", "provider", "model", "mode", "protocol"]


def _field_error(response, field: str) -> str:
    """The field's first message, after checking the answer is a 400 that names the field."""
    assert response.status_code == 400, response.content
    messages = response.json()[field]
    assert isinstance(messages, list) and messages
    return str(messages[0])


def _post_json(client, url: str, body: dict):
    return client.post(url, body, format="json")


@pytest.mark.parametrize("value", NOT_STRINGS)
@pytest.mark.parametrize("field", STRING_FIELDS)
def test_run_string_fields_refuse_other_json_types(api, field, value):
    body = {"input": ARITHMETIC, field: value}
    message = _field_error(_post_json(api, RUNS, body), field)
    if field == "input" and isinstance(value, list):  # v1.2: a list input is parts; this one's part is no object
        assert message.startswith("part 1: Expected an object")
    else:
        assert "Expected a string" in message
    assert run_count() == 0


@pytest.mark.parametrize("value", [5, True, ["calculator"], {"a": 1}])
@pytest.mark.parametrize("field", ["tools", "sensitive_tools"])
def test_run_tool_list_items_must_be_strings(api, field, value):
    body = {"input": ARITHMETIC, field: ["calculator", value]}
    response = _post_json(api, RUNS, body)
    assert response.status_code == 400, response.content
    assert "Expected a string" in str(response.json()[field])  # the item's type, not "unknown tool"
    assert run_count() == 0


def test_a_number_for_input_names_the_type(api):
    message = _field_error(_post_json(api, RUNS, {"input": 5}), "input")
    assert message == "Expected a string or a list of parts, got a number."


def test_without_images_input_is_a_string_only(api, settings):
    settings.AGENT_MAX_IMAGES = 0
    settings.AGENT_MAX_DOCUMENTS = 0  # nor documents (docs/documents.md): no list form at all
    message = _field_error(_post_json(api, RUNS, {"input": [{"type": "text", "text": "hi"}]}), "input")
    assert message == "Expected a string, got a list."
    assert _field_error(_post_json(api, RUNS, {"input": 5}), "input") == "Expected a string, got a number."


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("max_turns", "5", "a string"),
        ("max_turns", True, "a boolean"),
        ("max_turns", 5.0, "a decimal number"),
        ("max_turns", [5], "a list"),
        ("max_reflections", "1", "a string"),
        ("timeout_s", "5", "a string"),
        ("timeout_s", True, "a boolean"),
        ("timeout_s", {"s": 5}, "an object"),
    ],
)
def test_run_numbers_refuse_strings_and_booleans(api, field, value, kind):
    message = _field_error(_post_json(api, RUNS, {"input": ARITHMETIC, field: value}), field)
    assert kind in message
    assert run_count() == 0


def test_a_huge_integer_timeout_is_a_400_not_a_500(api):
    response = api.post(RUNS, data='{"input": "hi", "timeout_s": 1' + "0" * 400 + "}", content_type="application/json")
    _field_error(response, "timeout_s")
    assert run_count() == 0


def test_json_numbers_of_the_right_kind_are_still_taken(api):
    response = _post_json(api, RUNS, {"input": ARITHMETIC, "max_turns": 3, "timeout_s": 5})
    assert response.status_code == 201, response.content
    assert (response.json()["max_turns"], response.json()["timeout_s"]) == (3, 5.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("input", 5), ("input", ["hi"]), ("input", True), ("max_turns", "5"), ("max_turns", True), ("timeout_s", "5")],
)
def test_seed_refuses_wrong_json_types(api, field, value):
    body = {"input": ARITHMETIC, field: value}
    _field_error(_post_json(api, SEED, body), field)
    assert run_count() == 0


@pytest.mark.parametrize("value", NOT_STRINGS)
def test_fact_text_must_be_a_string(api, value):
    message = _field_error(_post_json(api, FACTS, {"text": value}), "text")
    assert "Expected a string" in message
    assert Fact.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"approval": False, "reason": 5}, "reason"),
        ({"approval": False, "reason": ["no"]}, "reason"),
        ({"approval": "true"}, "approval"),
        ({"approval": 1}, "approval"),
    ],
)
def test_advance_refuses_wrong_json_types_and_records_nothing(api, reviewer_api, no_search_network, body, field):
    run_id = create_run(api, input="search python").json()["id"]
    _field_error(_post_json(reviewer_api, run_url(run_id, "advance"), body), field)
    assert Run.objects.get(pk=run_id).status == "awaiting_approval"
    assert not Step.objects.filter(run_id=run_id, kind="approval").exists()
    assert no_search_network.requests == []


def test_advance_takes_a_string_reason(api, reviewer_api, no_search_network):
    run_id = create_run(api, input="search python").json()["id"]
    response = _post_json(reviewer_api, run_url(run_id, "advance"), {"approval": False, "reason": "not now"})
    assert response.status_code == 200, response.content
    assert Step.objects.get(run_id=run_id, kind="approval").data["reason"] == "not now"


def test_strings_are_checked_as_sent_not_trimmed(api):
    """The schema's maxLength and choices then say exactly what is accepted."""
    _field_error(_post_json(api, RUNS, {"input": ARITHMETIC, "provider": " demo"}), "provider")
    _field_error(_post_json(api, RUNS, {"input": ARITHMETIC, "tools": ["calculator "]}), "tools")
    assert run_count() == 0
    response = _post_json(api, RUNS, {"input": "  " + ARITHMETIC + "  "})
    assert response.json()["input"] == "  " + ARITHMETIC + "  "
