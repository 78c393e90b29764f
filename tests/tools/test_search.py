"""Tests for the `search` tool against a loopback stub (Tavily and DuckDuckGo branches)."""

from __future__ import annotations

import logging
import socket
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from agents.tools import search as search_mod
from agents.tools.registry import ToolContext, ToolError, registry

CTX = ToolContext(user_id=1, run_id="run-test")
# Built at runtime so no secret-looking literal sits in the fixtures.
FAKE_KEY = "-".join(["tvly", "test", "not", "a", "real", "key"])


def run(query: str) -> str:
    """Call the registered tool the way the host does."""
    return registry.get("search")({"query": query}, CTX)


@pytest.fixture
def tavily(settings, stub):
    """Point the Tavily branch, and its DuckDuckGo fallback (unscripted: 404), at the stub."""
    settings.TAVILY_API_KEY = FAKE_KEY
    settings.TAVILY_URL = stub.url + "/search"
    settings.DUCKDUCKGO_URL = stub.url + "/ddg/"
    settings.SEARCH_TIMEOUT_S = 5.0
    return stub


@pytest.fixture
def ddg(settings, stub):
    """Point the DuckDuckGo branch at the stub (no Tavily key)."""
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/ddg/"
    settings.SEARCH_TIMEOUT_S = 5.0
    return stub


def closed_port() -> int:
    """A loopback port nothing is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TAVILY_OK = {
    "query": "django",
    "results": [
        {"title": "Django", "url": "https://www.djangoproject.com/", "content": "The web framework.", "score": 0.9},
        {"title": "Django docs", "url": "https://docs.djangoproject.com/", "content": "Documentation.", "score": 0.8},
    ],
}


# --- registration ---------------------------------------------------------------------------------


def test_registered_tool_is_sensitive_and_requires_query():
    tool = registry.get("search")
    assert tool is search_mod.SEARCH_TOOL
    assert tool.sensitive is True
    assert tool.timeout_s == 15.0
    assert tool.parameters["required"] == ["query"]
    assert tool.parameters["additionalProperties"] is False
    assert tool.parameters["properties"]["query"] == {"type": "string", "minLength": 1, "maxLength": 400}


@pytest.mark.parametrize("arguments", [{}, {"query": ""}, {"query": "   "}, {"query": 3}, {"query": "x" * 401}])
def test_bad_query_is_a_tool_error_without_network(arguments, ddg):
    with pytest.raises(ToolError):
        registry.get("search")(arguments, CTX)
    assert ddg.requests == []


# --- Tavily ---------------------------------------------------------------------------------------


def test_tavily_sends_key_only_in_header_and_formats_results(tavily):
    tavily.add("POST", "/search", json=TAVILY_OK)

    out = run("django")

    (req,) = tavily.requests
    assert req.method == "POST"
    assert req.headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert FAKE_KEY not in req.path
    assert FAKE_KEY.encode() not in req.body
    assert req.json() == {"query": "django", "max_results": 5}
    assert out.splitlines() == [
        "Results from Tavily",
        "1. Django",
        "   https://www.djangoproject.com/",
        "   The web framework.",
        "2. Django docs",
        "   https://docs.djangoproject.com/",
        "   Documentation.",
    ]


def test_tavily_reads_settings_at_call_time(tavily, settings):
    tavily.add("POST", "/other", json=TAVILY_OK)
    settings.TAVILY_URL = tavily.url + "/other"
    assert "1. Django" in run("django")
    assert tavily.count("POST", "/other") == 1


def test_tavily_empty_results(tavily):
    tavily.add("POST", "/search", json={"query": "zzz", "results": []})
    assert run("zzz") == "Results from Tavily\nNo results found for 'zzz'."


def test_tavily_500_names_status(tavily):
    tavily.add("POST", "/search", status=500, json={"detail": "boom"})
    with pytest.raises(ToolError, match="500"):
        run("django")


def test_tavily_invalid_json(tavily):
    tavily.add("POST", "/search", body="<html>not json</html>", headers={"Content-Type": "text/html"})
    with pytest.raises(ToolError, match="invalid JSON"):
        run("django")


@pytest.mark.parametrize("payload", [[1, 2, 3], {"results": "nope"}, {"results": ["not-a-dict"]}])
def test_tavily_wrong_shape(tavily, payload):
    tavily.add("POST", "/search", json=payload)
    with pytest.raises(ToolError, match="unexpected response shape"):
        run("django")


def test_tavily_oversized_body_is_refused(tavily):
    tavily.add("POST", "/search", body=b'{"results": [], "pad": "' + b"x" * 3_000_000 + b'"}')
    with pytest.raises(ToolError, match="too large"):
        run("django")


def test_oversized_body_without_content_length_is_refused(tavily, monkeypatch):
    # A chunked/unknown-length body must be cut while streaming, not only by the header check.
    tavily.add("POST", "/search", body=b"x" * 3_000_000)
    real_read = search_mod._read_capped

    def no_length(resp, *args):
        resp.headers.pop("Content-Length", None)
        return real_read(resp, *args)

    monkeypatch.setattr(search_mod, "_read_capped", no_length)
    with pytest.raises(ToolError, match="too large"):
        run("django")


def test_long_valid_result_is_cut_to_the_bound(tavily):
    results = [{"title": "T" * 2000, "url": f"https://example.com/{i}", "content": "c" * 2000} for i in range(5)]
    tavily.add("POST", "/search", json={"results": results})

    out = run("long")

    assert len(out) <= search_mod.MAX_RESULT_CHARS
    assert out.endswith(search_mod.TRUNCATED_MARKER)
    assert "c" * (search_mod.MAX_SNIPPET_CHARS + 1) not in out


def test_timeout_is_a_tool_error(tavily, settings):
    settings.SEARCH_TIMEOUT_S = 0.3
    tavily.add("POST", "/search", json=TAVILY_OK, delay_s=1.5)
    with pytest.raises(ToolError, match="timed out"):
        run("django")


def test_connection_refused_is_a_tool_error(settings):
    settings.TAVILY_API_KEY = FAKE_KEY
    settings.TAVILY_URL = f"http://127.0.0.1:{closed_port()}/search"
    settings.DUCKDUCKGO_URL = f"http://127.0.0.1:{closed_port()}/"
    settings.SEARCH_TIMEOUT_S = 2.0
    with pytest.raises(ToolError, match="could not reach tavily; could not reach duckduckgo"):
        run("django")


def test_key_never_in_logs_or_errors(tavily, settings, caplog):
    caplog.set_level(logging.DEBUG)
    tavily.add("POST", "/search", json=TAVILY_OK)
    tavily.add("POST", "/search", status=401, json={"detail": f"bad key {FAKE_KEY}"})
    tavily.add("POST", "/search", body="not json")

    errors: list[BaseException] = []
    run("django")
    for _ in range(2):
        with pytest.raises(ToolError) as info:
            run("django")
        errors.append(info.value)
    settings.TAVILY_URL = f"http://127.0.0.1:{closed_port()}/search"
    with pytest.raises(ToolError) as info:
        run("django")
    errors.append(info.value)

    assert any(r.name == search_mod.__name__ and "provider=tavily" in r.getMessage() for r in caplog.records)
    for record in caplog.records:
        assert FAKE_KEY not in record.getMessage()
        assert FAKE_KEY not in str(record.args)
    for err in errors:
        assert FAKE_KEY not in str(err)
        assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


def test_malformed_key_does_not_leak_through_requests_errors(tavily, settings, caplog):
    # requests quotes invalid header values in its exception text; none of it may surface.
    bad_key = FAKE_KEY + "\nX-Injected: 1"
    settings.TAVILY_API_KEY = bad_key
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ToolError) as info:
        run("django")
    assert FAKE_KEY not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert all(FAKE_KEY not in r.getMessage() for r in caplog.records)
    assert tavily.count("POST", "/search") == 0  # refused before sending; only the fallback went out
    assert all("authorization" not in r.headers for r in tavily.requests)


def test_logs_provider_status_latency_not_results(tavily, caplog):
    caplog.set_level(logging.INFO, logger=search_mod.__name__)
    tavily.add("POST", "/search", json=TAVILY_OK)
    run("secret topic")
    messages = [r.getMessage() for r in caplog.records if r.name == search_mod.__name__]
    assert any("provider=tavily" in m and "status=200" in m and "latency_ms=" in m for m in messages)
    assert not any("The web framework." in m or "secret topic" in m for m in messages)


# --- DuckDuckGo -----------------------------------------------------------------------------------


DDG_OK = {
    "Heading": "Python",
    "AbstractText": "Python is a programming language.",
    "AbstractURL": "https://en.wikipedia.org/wiki/Python",
    "Answer": "",
    "Definition": "",
    "RelatedTopics": [
        {"Text": "CPython - the reference implementation", "FirstURL": "https://duckduckgo.com/CPython"},
        {
            "Name": "Snakes",
            "Topics": [
                {"Text": "Pythonidae - a family of snakes", "FirstURL": "https://duckduckgo.com/Pythonidae"},
                {"Name": "Deeper", "Topics": [{"Text": "Ball python"}]},
            ],
        },
        "junk",
    ],
}


def test_ddg_sends_params_and_extracts_text(ddg):
    ddg.add("GET", "/ddg/", json=DDG_OK)

    out = run("python language")

    (req,) = ddg.requests
    assert req.method == "GET"
    assert "authorization" not in req.headers
    params = parse_qs(urlsplit(req.path).query)
    assert params == {"q": ["python language"], "format": ["json"], "no_html": ["1"], "skip_disambig": ["1"]}
    assert "Python: Python is a programming language." in out
    assert "https://en.wikipedia.org/wiki/Python" in out
    assert "- CPython - the reference implementation (https://duckduckgo.com/CPython)" in out
    assert "- Pythonidae - a family of snakes (https://duckduckgo.com/Pythonidae)" in out
    assert "- Ball python" in out


def test_ddg_answer_and_definition(ddg):
    ddg.add("GET", "/ddg/", json={"Answer": "42", "Definition": "A number.", "RelatedTopics": []})
    out = run("answer")
    assert "Answer: 42" in out
    assert "Definition: A number." in out


def test_ddg_no_result_is_not_an_error(ddg):
    ddg.add("GET", "/ddg/", json={"AbstractText": "", "Answer": "", "Definition": "", "RelatedTopics": []})
    assert run("qwertyuiop") == "No instant answer found for 'qwertyuiop'."


def test_ddg_500_names_status(ddg):
    ddg.add("GET", "/ddg/", status=503, body="unavailable")
    with pytest.raises(ToolError, match="503"):
        run("python")


def test_ddg_invalid_json(ddg):
    ddg.add("GET", "/ddg/", body="{not json")
    with pytest.raises(ToolError, match="invalid JSON"):
        run("python")


@pytest.mark.parametrize("payload", [["a", "list"], {"RelatedTopics": {"not": "a list"}}, "just a string"])
def test_ddg_wrong_shape(ddg, payload):
    ddg.add("GET", "/ddg/", json=payload)
    with pytest.raises(ToolError, match="unexpected response shape"):
        run("python")


def test_ddg_long_abstract_is_cut_to_the_bound(ddg):
    ddg.add("GET", "/ddg/", json={"AbstractText": "a" * 10_000, "RelatedTopics": []})
    out = run("python")
    assert len(out) == search_mod.MAX_RESULT_CHARS
    assert out.endswith(search_mod.TRUNCATED_MARKER)


def test_ddg_timeout(ddg, settings):
    settings.SEARCH_TIMEOUT_S = 0.3
    ddg.add("GET", "/ddg/", json=DDG_OK, delay_s=1.5)
    with pytest.raises(ToolError, match="timed out"):
        run("python")


def test_ddg_connection_refused(settings):
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = f"http://127.0.0.1:{closed_port()}/"
    settings.SEARCH_TIMEOUT_S = 2.0
    with pytest.raises(ToolError, match="could not reach duckduckgo"):
        run("python")


# --- Tavily failing: DuckDuckGo answers within the same overall bound ---------------------------------------------


def first_line(out: str) -> str:
    return out.split("\n", 1)[0]


def test_tavily_ok_answers_and_duckduckgo_is_not_asked(tavily):
    tavily.add("POST", "/search", json=TAVILY_OK)
    tavily.add("GET", "/ddg/", json=DDG_OK)
    out = run("django")
    assert first_line(out) == "Results from Tavily"
    assert "1. Django" in out and "Python is a programming language." not in out
    assert (tavily.count("POST", "/search"), tavily.count("GET", "/ddg/")) == (1, 0)


def test_tavily_500_falls_back_to_duckduckgo(tavily, caplog):
    caplog.set_level(logging.INFO, logger=search_mod.__name__)
    tavily.add("POST", "/search", status=500, json={"detail": f"boom {FAKE_KEY}"})
    tavily.add("GET", "/ddg/", json=DDG_OK)

    out = run("python")

    assert first_line(out) == "Results from DuckDuckGo (Tavily failed: HTTP 500)"
    assert "Python: Python is a programming language." in out
    assert (tavily.count("POST", "/search"), tavily.count("GET", "/ddg/")) == (1, 1)
    assert FAKE_KEY not in out and all(FAKE_KEY not in r.getMessage() for r in caplog.records)
    assert "authorization" not in tavily.requests[1].headers  # the key never goes to the fallback


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        ({"status": 503, "body": "unavailable"}, "HTTP 503"),
        ({"status": 401, "json": {"detail": "bad key"}}, "HTTP 401"),
        ({"body": "<html>not json</html>"}, "invalid JSON"),
        ({"json": {"results": "nope"}}, "unexpected response"),
    ],
)
def test_any_tavily_failure_falls_back_and_says_why(tavily, failure, reason):
    tavily.add("POST", "/search", **failure)
    tavily.add("GET", "/ddg/", json={"Answer": "42", "RelatedTopics": []})
    assert run("answer") == f"Results from DuckDuckGo (Tavily failed: {reason})\nAnswer: 42"


def test_tavily_unreachable_falls_back(tavily, settings):
    settings.TAVILY_URL = f"http://127.0.0.1:{closed_port()}/search"
    tavily.add("GET", "/ddg/", json={"Answer": "42", "RelatedTopics": []})
    assert run("answer") == "Results from DuckDuckGo (Tavily failed: unreachable)\nAnswer: 42"


def test_slow_tavily_leaves_duckduckgo_time_within_the_same_bound(tavily, settings):
    settings.SEARCH_TIMEOUT_S = 2.0
    tavily.add("POST", "/search", json=TAVILY_OK, delay_s=3.0)  # longer than Tavily's share, and than the bound
    tavily.add("GET", "/ddg/", json=DDG_OK, delay_s=0.5)  # fits only if Tavily gave up well before the bound

    started = time.monotonic()
    out = run("python")
    elapsed = time.monotonic() - started

    assert first_line(out) == "Results from DuckDuckGo (Tavily failed: timeout)"
    assert "Python is a programming language." in out
    assert elapsed < 2.0
    assert elapsed > 2.0 * search_mod.TAVILY_SHARE  # Tavily did get its share first


def test_both_slow_fail_within_the_bound(tavily, settings):
    settings.SEARCH_TIMEOUT_S = 1.0
    tavily.add("POST", "/search", json=TAVILY_OK, delay_s=3.0)
    tavily.add("GET", "/ddg/", json=DDG_OK, delay_s=3.0)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"^search failed: tavily timed out after .*; duckduckgo timed out after "):
        run("python")
    assert time.monotonic() - started < 1.0 + 0.3  # the bound, plus scheduling slack on a busy machine


def test_both_failing_is_one_clear_error_naming_each(tavily):
    tavily.add("POST", "/search", status=500, json={"detail": f"boom {FAKE_KEY}"})
    tavily.add("GET", "/ddg/", status=503, body="unavailable")
    with pytest.raises(ToolError) as info:
        run("python")
    assert str(info.value) == "search failed: tavily returned HTTP 500; duckduckgo returned HTTP 503"
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_both_failing_is_an_error_result_for_the_model(tavily):
    from agents.engine.dispatch import Toolset, run_tool

    tavily.add("POST", "/search", status=500)
    tools = Toolset(tools={"search": registry.get("search")}, context=CTX)
    result = run_tool(tools, "search", {"query": "python"}, timeout_s=15.0)
    assert result.is_error is True
    assert "tavily returned HTTP 500; duckduckgo returned HTTP 404" in result.output
    assert FAKE_KEY not in result.output
