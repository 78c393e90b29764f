"""POST /api/v1/runs: the run object, defaults, modes, protocols and every validation rule of API.md."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest

from agents.models import Run
from agents.runs.runtime import tool_registry
from tests.api.conftest import ARITHMETIC, RUN_KEYS, RUNS, create_run, run_count

pytestmark = pytest.mark.django_db


def test_sync_run_answers_85_with_the_exact_run_object(api, alice):
    response = create_run(api)
    assert response.status_code == 201, response.content
    body = response.json()
    assert RUN_KEYS <= set(body)  # exactly RUN_KEYS: see test_run_object_has_exactly_the_contract_keys
    assert body["status"] == "done"
    assert body["stop_reason"] == "final_answer"
    assert body["ok"] is True
    assert body["output"] == "85"
    assert body["turns"] == 3
    assert body["input"] == ARITHMETIC
    assert body["pending_action"] is None
    assert body["error"] is None
    usage = body["usage"]  # the demo model estimates its tokens from text length (~4 characters a token)
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert str(uuid.UUID(body["id"])) == body["id"]
    for stamp in ("created_at", "updated_at"):
        assert datetime.fromisoformat(body[stamp].replace("Z", "+00:00")).tzinfo is not None
    run = Run.objects.get(pk=body["id"])
    assert run.owner == alice
    assert run.output == "85"


def test_run_object_has_exactly_the_contract_keys(api, alice):
    """API.md's run object, no more and no less, on create, detail and list (detail adds "children", "steps" and
    "scores")."""
    created = create_run(api).json()
    assert set(created) == RUN_KEYS, set(created) ^ RUN_KEYS
    detail = api.get(f"{RUNS}/{created['id']}").json()
    assert set(detail) == RUN_KEYS | {"children", "steps", "scores"}, set(detail) ^ (
        RUN_KEYS | {"children", "steps", "scores"}
    )
    listed = api.get(RUNS).json()["results"][0]
    assert set(listed) == RUN_KEYS, set(listed) ^ RUN_KEYS


def test_max_reflections_appears_only_when_used(api):
    """Reflection (evals) is an opt-in extension: the run object shows it only when the client asked for it."""
    plain = create_run(api).json()
    assert "max_reflections" not in plain
    reflective = create_run(api, max_reflections=2).json()
    assert reflective["max_reflections"] == 2
    assert set(reflective) == RUN_KEYS | {"max_reflections"}


@pytest.mark.parametrize("value", [-1, 6, "x"])
def test_max_reflections_bounds(api, value):
    response = create_run(api, max_reflections=value)
    assert response.status_code == 400
    assert "max_reflections" in response.json()


def test_defaults(api, settings):
    response = create_run(api)
    assert response.status_code == 201
    body = response.json()
    assert body["mode"] == "sync"
    assert body["protocol"] == settings.AGENT_DEFAULT_PROTOCOL == "tools"
    assert body["provider"] == "demo"
    assert body["model"] == "demo-1"
    assert body["max_turns"] == 8
    assert body["timeout_s"] == 60.0
    assert isinstance(body["timeout_s"], float)
    assert body["tools"] == tool_registry().names()
    assert {"calculator", "search"} <= set(body["tools"])
    assert body["sensitive_tools"] == ["search"]


def test_default_protocol_comes_from_the_setting(api, settings):
    settings.AGENT_DEFAULT_PROTOCOL = "react"
    body = create_run(api).json()
    assert body["protocol"] == "react"
    assert body["output"] == "85"


def test_default_provider_comes_from_the_setting(api, settings):
    settings.AGENT_DEFAULT_PROVIDER = "openai"
    settings.OPENAI_API_KEY = ""
    before = run_count()
    response = create_run(api)
    assert response.status_code == 400  # openai without a key, chosen by default
    assert run_count() == before


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_both_protocols_reach_the_answer(api, protocol):
    response = create_run(api, protocol=protocol)
    assert response.status_code == 201
    body = response.json()
    assert body["protocol"] == protocol
    assert (body["status"], body["stop_reason"], body["ok"], body["output"], body["turns"]) == (
        "done",
        "final_answer",
        True,
        "85",
        3,
    )


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_step_mode_advances_exactly_one_unit(api, protocol):
    response = create_run(api, mode="step", protocol=protocol)
    assert response.status_code == 201
    body = response.json()
    assert body["mode"] == "step"
    assert body["status"] == "running"
    assert body["turns"] == 1
    assert body["stop_reason"] is None
    assert body["ok"] is False
    assert body["output"] is None
    steps = api.get(f"{RUNS}/{body['id']}").json()["steps"]
    assert [s["kind"] for s in steps] == ["model", "tool"]


def test_explicit_options_are_stored(api):
    response = create_run(
        api, mode="sync", provider="demo", model="demo-1", max_turns=5, timeout_s=30, tools=["calculator"]
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["max_turns"], body["timeout_s"], body["tools"]) == (5, 30.0, ["calculator"])
    assert body["output"] == "85"


@pytest.mark.parametrize("path", [RUNS, RUNS + "/"])
def test_trailing_slash_is_optional_without_redirect(api, path):
    response = api.post(path, {"input": ARITHMETIC}, format="json")
    assert response.status_code == 201
    assert response.json()["output"] == "85"


def test_max_turns_bound_stops_the_run(api):
    body = create_run(api, max_turns=1).json()
    assert (body["status"], body["stop_reason"], body["ok"], body["output"], body["turns"]) == (
        "done",
        "max_turns",
        False,
        None,
        1,
    )


def test_a_search_pauses_for_approval_with_pending_action(api, no_search_network):
    response = create_run(api, input="search python")
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "awaiting_approval"
    assert body["stop_reason"] is None
    assert body["turns"] == 1
    pending = body["pending_action"]
    assert set(pending) == {"call_id", "tool", "arguments", "expires_at"}  # v1.1 adds expires_at
    assert body["pending_actions"] == [pending]
    assert pending["tool"] == "search"
    assert pending["arguments"] == {"query": "python"}
    assert isinstance(pending["call_id"], str) and pending["call_id"]
    assert no_search_network.requests == []


# --- sensitive_tools: widen, never narrow -------------------------------------------------------------------


def test_client_cannot_narrow_the_sensitive_floor(api, no_search_network):
    response = create_run(api, input="search python", sensitive_tools=[])
    assert response.status_code == 201
    body = response.json()
    assert "search" in body["sensitive_tools"]
    assert body["status"] == "awaiting_approval"
    assert no_search_network.requests == []


def test_client_can_widen_the_sensitive_set(api):
    response = create_run(api, sensitive_tools=["calculator"])
    assert response.status_code == 201
    body = response.json()
    assert set(body["sensitive_tools"]) == {"calculator", "search"}
    assert body["status"] == "awaiting_approval"
    assert body["pending_action"]["tool"] == "calculator"
    assert body["pending_action"]["arguments"] == {"expression": "12*7"}


def test_floor_follows_the_setting(api, settings):
    settings.AGENT_SENSITIVE_TOOLS = ["calculator"]
    body = create_run(api).json()
    assert "calculator" in body["sensitive_tools"]
    assert body["status"] == "awaiting_approval"
    assert body["pending_action"]["tool"] == "calculator"


# --- validation: 400 naming the field, nothing stored ------------------------------------------------------


def _assert_400(response, field: str | None = None):
    assert response.status_code == 400, response.content
    body = response.json()
    assert isinstance(body, dict) and body
    if field is not None:
        assert field in body, body
        messages = body[field]
        assert isinstance(messages, list) and messages and all(isinstance(m, str) and m for m in messages)
    return body


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "input"),
        ({"input": ""}, "input"),
        ({"input": "   "}, "input"),
        ({"input": None}, "input"),
        ({"input": ARITHMETIC, "mode": "turbo"}, "mode"),
        ({"input": ARITHMETIC, "protocol": "json"}, "protocol"),
        ({"input": ARITHMETIC, "provider": "acme"}, "provider"),
        ({"input": ARITHMETIC, "max_turns": 0}, "max_turns"),
        ({"input": ARITHMETIC, "max_turns": 51}, "max_turns"),
        ({"input": ARITHMETIC, "max_turns": "x"}, "max_turns"),
        ({"input": ARITHMETIC, "max_turns": -1}, "max_turns"),
        ({"input": ARITHMETIC, "timeout_s": 0}, "timeout_s"),
        ({"input": ARITHMETIC, "timeout_s": 0.5}, "timeout_s"),
        ({"input": ARITHMETIC, "timeout_s": 601}, "timeout_s"),
        ({"input": ARITHMETIC, "timeout_s": "soon"}, "timeout_s"),
        ({"input": ARITHMETIC, "tools": ["calculator", "nope"]}, "tools"),
        ({"input": ARITHMETIC, "tools": "calculator"}, "tools"),
        ({"input": ARITHMETIC, "sensitive_tools": ["nope"]}, "sensitive_tools"),
    ],
)
def test_invalid_fields_are_400_naming_the_field(api, payload, field):
    before = run_count()
    response = api.post(RUNS, payload, format="json")
    _assert_400(response, field)
    assert run_count() == before


def test_unknown_tool_message_names_it(api):
    body = _assert_400(create_run(api, tools=["calculator", "frobnicate"]), "tools")
    assert "frobnicate" in body["tools"][0]


@pytest.mark.parametrize("value", [1, 50])
def test_max_turns_bounds_are_inclusive(api, value):
    response = create_run(api, max_turns=value)
    assert response.status_code == 201
    assert response.json()["max_turns"] == value


@pytest.mark.parametrize("value", [1, 600, 1.5])
def test_timeout_bounds_are_inclusive(api, value):
    response = create_run(api, timeout_s=value)
    assert response.status_code == 201
    assert response.json()["timeout_s"] == float(value)


def test_input_length_bound(api, settings):
    settings.AGENT_MAX_INPUT_CHARS = 50
    exact = ARITHMETIC + " " * (50 - len(ARITHMETIC))
    assert len(exact) == 50
    response = create_run(api, input=exact)
    assert response.status_code == 201
    assert response.json()["input"] == exact
    before = run_count()
    body = _assert_400(create_run(api, input=exact + "x"), "input")
    assert "50" in body["input"][0]
    assert run_count() == before


def test_default_input_bound_is_8000(api):
    before = run_count()
    _assert_400(create_run(api, input="x" * 8001), "input")
    assert run_count() == before
    assert create_run(api, input="x" * 8000).status_code == 201


def test_provider_not_in_allowed_providers(api, settings):
    settings.AGENT_ALLOWED_PROVIDERS = ["demo"]
    before = run_count()
    body = _assert_400(create_run(api, provider="openai"), "provider")
    assert "openai" in body["provider"][0]
    assert run_count() == before


def test_provider_without_its_key_is_a_clear_400(api, settings):
    settings.OPENAI_API_KEY = ""
    before = run_count()
    body = _assert_400(create_run(api, provider="openai"), "provider")
    assert "OPENAI_API_KEY" in body["provider"][0]
    assert run_count() == before


def test_model_not_in_allowlist(api, settings):
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "demo": ["demo-1"]}
    before = run_count()
    body = _assert_400(create_run(api, model="other"), "model")
    assert "other" in body["model"][0]
    assert run_count() == before
    assert create_run(api, model="demo-1").status_code == 201


def test_any_model_without_an_allowlist(api, settings):
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "demo": []}
    response = create_run(api, model="demo-2")
    assert response.status_code == 201
    assert response.json()["model"] == "demo-2"


def test_non_json_body_is_400(api):
    before = run_count()
    response = api.post(RUNS, data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert "detail" in response.json()
    assert run_count() == before


def test_json_list_body_is_400(api):
    before = run_count()
    response = api.post(RUNS, data="[1, 2]", content_type="application/json")
    assert response.status_code == 400
    assert isinstance(response.json(), dict)
    assert run_count() == before


def test_non_object_json_bodies_are_400(api):
    before = run_count()
    for raw in ('"hello"', "42", "null"):
        response = api.post(RUNS, data=raw, content_type="application/json")
        assert 400 <= response.status_code < 500, raw
    assert run_count() == before


@pytest.mark.parametrize("path", [RUNS, "/v1/agent/runs", "/api/v1/tools/calculator/invoke"])
def test_json_nested_too_deeply_is_400_not_500(api, path):
    before = run_count()
    response = api.post(path, data="[" * 5000 + "]" * 5000, content_type="application/json")
    assert response.status_code == 400
    assert "detail" in response.json()
    assert run_count() == before


def test_an_unknown_field_is_a_400_naming_it_and_stores_nothing(api):
    before = run_count()
    response = create_run(api, colour="blue")
    assert response.status_code == 400
    assert list(response.json()) == ["colour"] and response.json()["colour"][0].startswith("Unknown field.")
    assert run_count() == before


def test_a_misspelt_field_is_a_400_that_names_the_right_one(api, alice):
    from agents.models import Thread

    thread = Thread.objects.create(owner=alice)
    response = create_run(api, thread=str(thread.pk))  # thread_id, misspelt: a run outside the thread before
    assert response.status_code == 400
    assert response.json() == {"thread": ["Unknown field. Did you mean 'thread_id'?"]}
    assert not thread.runs.exists()


def test_form_encoded_body_is_unsupported(api):
    before = run_count()
    response = api.post(RUNS, data="input=hi", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert run_count() == before


def test_each_create_validates_with_fields_of_its_own(settings):
    """The create serializer's fields are shallow copies made per request (not DRF's deep copy): each is a new
    instance of the declared field's class with the same attributes, bound to its own serializer, and binding it
    leaves the declared field untouched; the input bound follows AGENT_MAX_INPUT_CHARS as it is now."""
    import copy

    from agents.api.fields import shallow
    from agents.api.serializers import RunCreateSerializer

    declared = RunCreateSerializer._declared_fields
    for field in declared.values():
        twin = shallow(field)
        assert type(twin) is type(field) and twin is not field
        assert twin.__dict__ == copy.copy(field).__dict__
    first, second = RunCreateSerializer(data={"input": "a"}), RunCreateSerializer(data={"input": "b"})
    assert first.fields["mode"] is not second.fields["mode"]
    assert (first.fields["mode"].parent, second.fields["mode"].parent) == (first, second)
    assert getattr(declared["mode"], "parent", None) not in (first, second)
    settings.AGENT_MAX_INPUT_CHARS = 7
    short = RunCreateSerializer(data={"input": "x" * 8})
    assert not short.is_valid() and "7" in str(short.errors["input"][0])
    settings.AGENT_MAX_INPUT_CHARS = 8
    assert RunCreateSerializer(data={"input": "x" * 8}).is_valid()
