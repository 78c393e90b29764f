"""Documents on the wire (docs/documents.md): each provider gets a run's documents in its own format, through its
real SDK, talking to the local stub (which records the request bodies): Anthropic `document` blocks (a PDF from a
base64 source, text from a text source), OpenAI-compatible `file` content parts for a PDF and a text part for text.
The bytes are stored once and loaded for each call, a thread's later run included. Driven through the REST API."""

from __future__ import annotations

import base64

import pytest

from agents.models import Document
from agents.runs import calls, documents, store
from tests.conftest import client_for
from tests.providers import stub_llm as llm

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs"
THREADS = "/api/v1/threads"
PDF = b"%PDF-1.7\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
TEXT = "Quarterly notes\nRevenue grew 12%.\n"
PDF_DATA = base64.b64encode(PDF).decode()
TEXT_DATA = base64.b64encode(TEXT.encode()).decode()
QUESTION = "Summarise these."
PARTS = [
    {"type": "text", "text": QUESTION},
    {"type": "file", "data": PDF_DATA, "media_type": "application/pdf", "name": "report.pdf"},
    {"type": "file", "data": TEXT_DATA, "media_type": "text/plain", "name": "notes.txt"},
]
OPENAI_CONTENT = [
    {"type": "text", "text": QUESTION},
    {"type": "file", "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF_DATA}"}},
    {"type": "text", "text": f'The document "notes.txt" (text/plain):\n\n{TEXT}'},
]
ANTHROPIC_CONTENT = [
    {"type": "text", "text": QUESTION},
    {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_DATA},
        "title": "report.pdf",
    },
    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": TEXT}, "title": "notes.txt"},
]


@pytest.fixture
def api(alice, settings):
    settings.AGENT_RATE_LIMIT = "100000/m"
    settings.AGENT_MAX_DOCUMENTS = 4
    settings.AGENT_MAX_DOCUMENT_BYTES = 5 * 1024 * 1024
    return client_for(alice)


@pytest.fixture
def providers(settings, stub):
    llm.point_sdks_at(settings, stub, retries=0)
    settings.OPENROUTER_API_KEY = llm.fake_key("sk-or-test-")
    settings.OPENROUTER_BASE_URL = stub.url + "/api/v1"  # the compatible APIs keep their base URL's path
    return stub


def answer(stub, provider: str, text: str = "Revenue grew.") -> str:
    if provider == "anthropic":
        stub.add("POST", llm.ANTHROPIC_PATH, json=llm.anthropic_text(text))
        return llm.ANTHROPIC_PATH
    path = llm.COMPAT_PATH if provider == "openrouter" else llm.OPENAI_PATH
    stub.add("POST", path, json=llm.openai_text(text))
    return path


def run(api, provider: str, protocol: str = "tools", **fields) -> dict:
    body = {"input": PARTS, "provider": provider, "protocol": protocol, "tools": ["calculator"], **fields}
    response = api.post(RUNS, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def user_turns(stub) -> list[dict]:
    return [m for m in stub.requests[-1].json()["messages"] if m["role"] == "user"]


@pytest.mark.parametrize("provider", ["openai", "openrouter"])
def test_openai_compatible_apis_get_a_pdf_as_a_file_part_and_text_as_text(api, providers, provider):
    path = answer(providers, provider)
    assert run(api, provider)["output"] == "Revenue grew."
    assert providers.count("POST", path) == 1
    (user,) = user_turns(providers)
    assert user["content"] == OPENAI_CONTENT


def test_anthropic_gets_document_blocks(api, providers):
    answer(providers, "anthropic")
    assert run(api, "anthropic")["output"] == "Revenue grew."
    assert providers.requests[-1].json()["messages"] == [{"role": "user", "content": ANTHROPIC_CONTENT}]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_react_protocol_sends_the_documents_as_parts_of_the_user_message(api, providers, provider):
    reply = "Thought: I read them.\nFinal Answer: Revenue grew."
    if provider == "openai":
        providers.add("POST", llm.OPENAI_PATH, json=llm.openai_text(reply))
    else:
        providers.add("POST", llm.ANTHROPIC_PATH, json=llm.anthropic_text(reply))
    assert run(api, provider, protocol="react")["output"] == "Revenue grew."
    (user,) = user_turns(providers)
    assert user["content"] == (OPENAI_CONTENT if provider == "openai" else ANTHROPIC_CONTENT)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_every_call_of_a_run_carries_its_documents(api, providers, provider):
    """A tool round trip: the second request loads the documents again (nothing is kept between calls)."""
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
    assert len(providers.requests) == 2
    for request in providers.requests:
        first_user = next(m for m in request.json()["messages"] if m["role"] == "user")
        assert first_user["content"] == (OPENAI_CONTENT if provider == "openai" else ANTHROPIC_CONTENT)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_threads_later_run_sends_the_earlier_documents_from_their_references(api, providers, provider):
    thread = api.post(THREADS, {}, format="json").json()["id"]
    answer(providers, provider, "Revenue grew.")
    run(api, provider, thread_id=thread)
    answer(providers, provider, "By 12%.")
    follow = api.post(RUNS, {"input": "By how much?", "provider": provider, "thread_id": thread}, format="json")
    assert follow.status_code == 201, follow.content
    turns = [m for m in providers.requests[-1].json()["messages"] if m["role"] != "system"]
    assert turns[0] == {"role": "user", "content": OPENAI_CONTENT if provider == "openai" else ANTHROPIC_CONTENT}
    assert "By how much?" in str(turns[-1]["content"])
    assert Document.objects.count() == 2  # stored once, by the first run


@pytest.mark.parametrize("provider", ["xai", "huggingface"])
def test_a_provider_that_takes_no_documents_is_refused_before_any_call(api, providers, settings, provider):
    settings.XAI_API_KEY, settings.XAI_BASE_URL = llm.fake_key("xai-test-"), providers.url + "/api/v1"
    settings.HF_TOKEN, settings.HF_BASE_URL = llm.fake_key("hf_"), providers.url + "/api/v1"
    response = api.post(RUNS, {"input": PARTS, "provider": provider}, format="json")
    assert response.status_code == 400, response.content
    assert "does not take documents" in response.json()["input"][0]
    assert providers.requests == [] and Document.objects.count() == 0


def test_a_model_the_setting_names_takes_documents_on_a_provider_that_takes_none(api, providers, settings):
    settings.HF_TOKEN, settings.HF_BASE_URL = llm.fake_key("hf_"), providers.url + "/v1"
    settings.AGENT_DOCUMENT_MODELS = {**settings.AGENT_DOCUMENT_MODELS, "huggingface": ["Qwen/Qwen2.5-VL-7B-Instruct"]}
    answer(providers, "openai")
    body = {"input": PARTS, "provider": "huggingface", "model": "Qwen/Qwen2.5-VL-7B-Instruct", "tools": []}
    response = api.post(RUNS, body, format="json")
    assert response.status_code == 201, response.content
    (user,) = user_turns(providers)
    assert user["content"] == OPENAI_CONTENT


def test_the_documents_are_read_before_the_connection_goes_back_for_the_call(alice, monkeypatch):
    """The call's pipeline loads them while it holds the connection, then holds none during the call."""
    log: list = []
    document = documents.store(alice.pk, TEXT.encode(), "text/plain", "notes.txt")
    ref = documents.reference(document, "notes.txt")
    loaded = documents.loaded
    monkeypatch.setattr(documents, "loaded", lambda *a: log.append("load") or loaded(*a))
    monkeypatch.setattr(store, "release_connection", lambda: log.append("release"))
    monkeypatch.setattr(store, "reacquire_connection", lambda: log.append("reacquire"))
    seen = []

    def model(request):
        log.append("model")
        seen.append(request.messages[0]["content"][0])
        return "reply"

    pipeline = calls.Pipeline(type("M", (), {"complete": staticmethod(model)})(), [
        calls.load_documents(alice.pk),
        calls.release_connection,
    ])  # fmt: skip
    assert pipeline.complete(llm.request([{"role": "user", "content": [ref]}])) == "reply"
    assert log == ["load", "release", "model", "reacquire"]
    assert seen == [{"type": "file", "data": TEXT_DATA, "media_type": "text/plain", "name": "notes.txt"}]
