"""Images on the wire: each provider gets a run's image parts in its own format, through its real SDK, talking to the
local stub (which records the request bodies). Driven through the REST API, as a client would."""

from __future__ import annotations

import base64

import pytest

from agents.providers import openai_compat
from tests.conftest import client_for
from tests.providers import stub_llm as llm

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs"
THREADS = "/api/v1/threads"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
DATA = base64.b64encode(PNG).decode()
URL = "https://93.184.215.14/cat.png"  # a public address as a literal: checked without a lookup
QUESTION = "What is in these pictures?"
PARTS = [
    {"type": "text", "text": QUESTION},
    {"type": "image", "data": DATA, "media_type": "image/png"},
    {"type": "image", "url": URL},
]
OPENAI_CONTENT = [
    {"type": "text", "text": QUESTION},
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{DATA}"}},
    {"type": "image_url", "image_url": {"url": URL}},
]
ANTHROPIC_CONTENT = [
    {"type": "text", "text": QUESTION},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}},
    {"type": "image", "source": {"type": "url", "url": URL}},
]


@pytest.fixture
def api(alice, settings):
    settings.AGENT_RATE_LIMIT = "100000/m"
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False
    return client_for(alice)


@pytest.fixture
def providers(settings, stub):
    llm.point_sdks_at(settings, stub, retries=0)
    settings.XAI_API_KEY = llm.fake_key("xai-test-")
    settings.XAI_BASE_URL = stub.url + "/api/v1"  # the compatible APIs keep their base URL's path
    return stub


def answer(stub, provider: str, text: str = "Two cats.") -> str:
    if provider == "anthropic":
        stub.add("POST", llm.ANTHROPIC_PATH, json=llm.anthropic_text(text))
        return llm.ANTHROPIC_PATH
    path = llm.COMPAT_PATH if provider == "xai" else llm.OPENAI_PATH
    stub.add("POST", path, json=llm.openai_text(text))
    return path


def run(api, provider: str, protocol: str = "tools", **fields) -> dict:
    body = {"input": PARTS, "provider": provider, "protocol": protocol, "tools": ["calculator"], **fields}
    response = api.post(RUNS, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def user_messages(stub) -> list[dict]:
    body = stub.requests[-1].json()
    return [m for m in body["messages"] if m["role"] == "user"]


@pytest.mark.parametrize("provider", ["openai", "xai"])
def test_openai_compatible_apis_get_image_url_parts(api, providers, provider):
    path = answer(providers, provider)
    result = run(api, provider)
    assert result["output"] == "Two cats."
    assert providers.count("POST", path) == 1
    (user,) = user_messages(providers)
    assert user["content"] == OPENAI_CONTENT
    system = providers.requests[-1].json()["messages"][0]
    assert system["role"] == "system" and isinstance(system["content"], str)


def test_anthropic_gets_image_blocks(api, providers):
    answer(providers, "anthropic")
    assert run(api, "anthropic")["output"] == "Two cats."
    body = providers.requests[-1].json()
    assert body["messages"] == [{"role": "user", "content": ANTHROPIC_CONTENT}]
    assert [block["type"] for block in body["system"]] == ["text"]  # top level (text blocks: the prompt cache's)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_react_protocol_sends_the_images_as_parts_of_the_user_message(api, providers, provider):
    if provider == "openai":
        providers.add("POST", llm.OPENAI_PATH, json=llm.openai_text("Thought: I see.\nFinal Answer: Two cats."))
    else:
        providers.add("POST", llm.ANTHROPIC_PATH, json=llm.anthropic_text("Thought: I see.\nFinal Answer: Two cats."))
    assert run(api, provider, protocol="react")["output"] == "Two cats."
    body = providers.requests[-1].json()
    assert "tools" not in body
    (user,) = [m for m in body["messages"] if m["role"] == "user"]
    assert user["content"] == (OPENAI_CONTENT if provider == "openai" else ANTHROPIC_CONTENT)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_later_turns_keep_the_images_with_the_tool_results_after_them(api, providers, provider):
    """A tool round trip: the next request still carries the input's images, and tool results go where they go."""
    if provider == "openai":
        providers.add(
            "POST", llm.OPENAI_PATH, json=llm.openai_tool_calls([("c1", "calculator", {"expression": "1+1"})])
        )
    else:
        providers.add(
            "POST", llm.ANTHROPIC_PATH, json=llm.anthropic_tool_use([("t1", "calculator", {"expression": "1+1"})])
        )
    answer(providers, provider, "2")
    assert run(api, provider)["output"] == "2"
    body = providers.requests[-1].json()
    first_user = next(m for m in body["messages"] if m["role"] == "user")
    assert first_user["content"] == (OPENAI_CONTENT if provider == "openai" else ANTHROPIC_CONTENT)
    wire = str(body["messages"])
    assert "<<<TOOL_OUTPUT_START>>>" in wire and "2" in wire


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_threads_history_sends_the_earlier_images(api, providers, provider):
    thread = api.post(THREADS, {}, format="json").json()["id"]
    answer(providers, provider, "Two cats.")
    run(api, provider, thread_id=thread)
    answer(providers, provider, "Grey ones.")
    follow = api.post(RUNS, {"input": "What colour?", "provider": provider, "thread_id": thread}, format="json")
    assert follow.status_code == 201, follow.content
    messages = providers.requests[-1].json()["messages"]
    turns = [m for m in messages if m["role"] != "system"]
    expected = OPENAI_CONTENT if provider == "openai" else ANTHROPIC_CONTENT
    assert turns[0] == {"role": "user", "content": expected}
    assert turns[1]["role"] == "assistant" and "Two cats." in str(turns[1]["content"])
    assert "What colour?" in str(turns[2]["content"])


def test_a_provider_without_vision_is_refused_before_any_call(api, providers, settings):
    settings.HF_TOKEN = llm.fake_key("hf_")
    settings.HF_BASE_URL = providers.url + "/api/v1"
    response = api.post(RUNS, {"input": PARTS, "provider": "huggingface"}, format="json")
    assert response.status_code == 400
    assert "does not take images" in response.json()["input"][0]
    assert providers.requests == []


def test_a_string_input_is_sent_as_a_string_as_before(api, providers):
    answer(providers, "openai", "2")
    response = api.post(RUNS, {"input": "What is 1+1?", "provider": "openai"}, format="json")
    assert response.json()["output"] == "2"
    (user,) = user_messages(providers)
    assert user["content"] == "What is 1+1?"


def test_wire_part_makes_a_data_url_of_base64():
    part = {"type": "image", "data": "AAAA", "media_type": "image/gif"}
    assert openai_compat.wire_part(part) == {"type": "image_url", "image_url": {"url": "data:image/gif;base64,AAAA"}}
