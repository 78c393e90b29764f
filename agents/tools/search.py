"""The `search` tool: Tavily when TAVILY_API_KEY is set, falling back to the DuckDuckGo Instant Answer API."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import requests
from django.conf import settings

from agents.tools.registry import Tool, ToolContext, ToolError, registry

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 400
MAX_BODY_BYTES = 1_000_000
MAX_RESULT_CHARS = 3000
MAX_SNIPPET_CHARS = 500
MAX_RELATED_TOPICS = 8
TAVILY_MAX_RESULTS = 5
TRUNCATED_MARKER = "… [truncated]"
# Tavily may use this part of SEARCH_TIMEOUT_S; the rest is kept for the DuckDuckGo fallback, so one bound holds.
TAVILY_SHARE = 0.6

_session: requests.Session | None = None


def _get_session() -> requests.Session:
    """One requests.Session per process (connection pooling)."""
    global _session
    if _session is None:
        _session = requests.Session()
        _session.headers["User-Agent"] = "reactsite-search/1.0"
    return _session


def _clip(text: str, limit: int) -> str:
    """Cut text to at most `limit` characters, marking the cut."""
    if len(text) <= limit:
        return text
    return text[: limit - len(TRUNCATED_MARKER)].rstrip() + TRUNCATED_MARKER


class SearchFailure(ToolError):
    """One provider failed: the message names it and says how; `reason` is the short form for a fallback note."""

    def __init__(self, detail: str, reason: str) -> None:
        super().__init__(f"search failed: {detail}")
        self.detail, self.reason = detail, reason


def _read_capped(resp: requests.Response, deadline: float, provider: str) -> bytes:
    """Read the body up to MAX_BODY_BYTES, failing past the cap or the deadline."""
    declared = resp.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise SearchFailure(f"{provider} response too large", "response too large")
    chunks: list[bytes] = []
    size = 0
    for chunk in resp.iter_content(chunk_size=65536):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise SearchFailure(f"{provider} response too large", "response too large")
        if time.monotonic() > deadline:
            raise SearchFailure(f"{provider} timed out", "timeout")
        chunks.append(chunk)
    return b"".join(chunks)


def _fetch_json(provider: str, method: str, url: str, deadline: float, **kwargs: Any) -> Any:
    """Send one request, done by `deadline` (monotonic), and decode its JSON; every failure is a key-free one."""
    start = time.monotonic()
    budget = deadline - start
    status: int | None = None
    try:
        if budget <= 0:  # nothing left of the bound: fail as a timeout would, without sending
            raise requests.Timeout
        with _get_session().request(method, url, timeout=budget, stream=True, **kwargs) as resp:
            status = resp.status_code
            if not 200 <= status < 300:
                raise SearchFailure(f"{provider} returned HTTP {status}", f"HTTP {status}")
            body = _read_capped(resp, deadline, provider)
    except requests.Timeout:
        # `from None`: request exceptions may quote header values, which must never surface.
        raise SearchFailure(f"{provider} timed out after {max(budget, 0):.3g}s", "timeout") from None
    except requests.RequestException as exc:
        logger.warning("search provider=%s error=%s", provider, type(exc).__name__)
        raise SearchFailure(f"could not reach {provider}", "unreachable") from None
    finally:
        latency_ms = (time.monotonic() - start) * 1000
        logger.info("search provider=%s status=%s latency_ms=%.0f", provider, status, latency_ms)
    try:
        return json.loads(body)
    except ValueError:
        raise SearchFailure(f"{provider} returned invalid JSON", "invalid JSON") from None


def _tavily(query: str, api_key: str, deadline: float) -> str:
    """Query Tavily (key only in the Authorization header) and format its results."""
    data = _fetch_json(
        "tavily",
        "POST",
        settings.TAVILY_URL,
        deadline,
        json={"query": query, "max_results": TAVILY_MAX_RESULTS},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    if not isinstance(data, dict) or not isinstance(data.get("results", []), list):
        raise SearchFailure("tavily returned an unexpected response shape", "unexpected response")
    return _format_tavily(query, data)


def _format_tavily(query: str, data: dict[str, Any]) -> str:
    """Render Tavily results as numbered plain-text entries."""
    lines: list[str] = []
    answer = data.get("answer")
    if isinstance(answer, str) and answer.strip():
        lines.append(f"Answer: {_clip(answer.strip(), MAX_SNIPPET_CHARS)}")
    for number, item in enumerate(data.get("results", []), start=1):
        if not isinstance(item, dict):
            raise SearchFailure("tavily returned an unexpected response shape", "unexpected response")
        title = _text(item.get("title")) or "(untitled)"
        url = _text(item.get("url"))
        content = _clip(_text(item.get("content")), MAX_SNIPPET_CHARS)
        entry = [f"{number}. {title}"] + [f"   {part}" for part in (url, content) if part]
        lines.append("\n".join(entry))
    if not lines:
        return f"No results found for '{query}'."
    return "\n".join(lines)


def _duckduckgo(query: str, deadline: float) -> str:
    """Query the DuckDuckGo Instant Answer API and format what it knows."""
    params = {"q": query, "format": "json", "no_html": "1", "skip_disambig": "1"}
    data = _fetch_json("duckduckgo", "GET", settings.DUCKDUCKGO_URL, deadline, params=params)
    if not isinstance(data, dict) or not isinstance(data.get("RelatedTopics") or [], list):
        raise SearchFailure("duckduckgo returned an unexpected response shape", "unexpected response")
    lines = _ddg_lines(data)
    if not lines:
        return f"No instant answer found for '{query}'."
    return "\n".join(lines)


def _ddg_lines(data: dict[str, Any]) -> list[str]:
    """Extract heading, abstract, answer, definition and related topics."""
    lines: list[str] = []
    abstract = _text(data.get("AbstractText"))
    if abstract:
        heading = _text(data.get("Heading"))
        lines.append(f"{heading}: {abstract}" if heading else abstract)
        if url := _text(data.get("AbstractURL")):
            lines.append(f"Source: {url}")
    if answer := _text(data.get("Answer")):
        lines.append(f"Answer: {answer}")
    if definition := _text(data.get("Definition")):
        lines.append(f"Definition: {definition}")
    topics = _ddg_topics(data.get("RelatedTopics") or [])[:MAX_RELATED_TOPICS]
    if topics:
        lines.append("Related:")
        lines.extend(f"- {_clip(t, MAX_SNIPPET_CHARS)}" for t in topics)
    return lines


def _ddg_topics(items: list[Any]) -> list[str]:
    """Flatten RelatedTopics (including grouped `Topics`) into text lines."""
    out: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("Topics"), list):
            out.extend(_ddg_topics(item["Topics"]))
        elif text := _text(item.get("Text")):
            url = _text(item.get("FirstURL"))
            out.append(f"{text} ({url})" if url else text)
    return out


def _text(value: Any) -> str:
    """A stripped string, or '' for anything that is not a string."""
    return value.strip() if isinstance(value, str) else ""


def search(arguments: dict[str, Any], context: ToolContext) -> str:
    """Search the web for `arguments["query"]` and return bounded plain text."""
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("search needs a non-empty 'query' string")
    query = query.strip()
    if len(query) > MAX_QUERY_CHARS:
        raise ToolError(f"search query is too long (max {MAX_QUERY_CHARS} characters)")
    deadline = time.monotonic() + float(settings.SEARCH_TIMEOUT_S)
    api_key = str(getattr(settings, "TAVILY_API_KEY", "") or "").strip()
    text = _tavily_or_duckduckgo(query, api_key, deadline) if api_key else _duckduckgo(query, deadline)
    return _clip(text, MAX_RESULT_CHARS)


def _tavily_or_duckduckgo(query: str, api_key: str, deadline: float) -> str:
    """Tavily within its share of the time; if it fails, DuckDuckGo in the rest. The first line names who answered."""
    share = (deadline - time.monotonic()) * TAVILY_SHARE
    try:
        return "Results from Tavily\n" + _tavily(query, api_key, time.monotonic() + share)
    except SearchFailure as exc:
        tavily = exc
    logger.warning("search provider=tavily failed reason=%s; falling back to duckduckgo", tavily.reason)
    try:
        text = _duckduckgo(query, deadline)
    except SearchFailure as exc:
        raise ToolError(f"search failed: {tavily.detail}; {exc.detail}") from None
    return f"Results from DuckDuckGo (Tavily failed: {tavily.reason})\n{text}"


SEARCH_TOOL = registry.register(
    Tool(
        name="search",
        description=(
            "Search the web for current information. Returns up to a few results as plain text "
            "(title, URL and a short snippet each)."
        ),
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}},
            "required": ["query"],
            "additionalProperties": False,
        },
        func=search,
        sensitive=True,
        timeout_s=15.0,
    )
)
