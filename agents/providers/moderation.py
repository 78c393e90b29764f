"""OpenAI's moderation endpoint (`POST /v1/moderations`), which the moderation guardrail asks (docs/guardrails.md).

Through the official SDK and the openai provider's own client (one per base URL and key, so its connections stay
warm), with the same deadline, retries and safe error messages as a model call (agents/providers/_common.py):
OPENAI_API_KEY and OPENAI_BASE_URL, read at call time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx2

from agents.engine.types import ModelError
from agents.providers import _common
from agents.providers.openai_compat import ERRORS, OpenAIProvider

NAME = "openai moderation"  # how its error messages name the call


@dataclass(frozen=True)
class Moderation:
    """What the endpoint said of one text: whether it flagged it, and the categories it found (sorted)."""

    flagged: bool
    categories: tuple[str, ...]


def moderate(text: str, model: str, timeout_s: float) -> Moderation:
    """Ask the moderation endpoint about `text` within `timeout_s` (retries included); ModelError with a safe
    message on any failure, a missing key or a reply of another shape."""
    budget = _common.call_budget(NAME, timeout_s)
    client = OpenAIProvider().client()
    payload = json.dumps({"model": model, "input": text}).encode()

    def call() -> bytes:
        return _common.post_json(client, "/moderations", payload, budget, httpx2.Response)

    return parse(_common.parse_json_body(NAME, _common.run_call(NAME, ERRORS, budget, call)))


def parse(body: dict[str, object]) -> Moderation:
    """The first result of a reply `{"id", "model", "results": [{"flagged", "categories", ...}]}`."""
    results = body.get("results")
    result = results[0] if isinstance(results, list) and results else None
    if not isinstance(result, dict) or not isinstance(result.get("flagged"), bool):
        raise ModelError(f"{NAME}: unexpected reply shape (no result)")
    categories = result.get("categories")
    if not isinstance(categories, dict):
        raise ModelError(f"{NAME}: unexpected reply shape (no categories)")
    return Moderation(result["flagged"], tuple(sorted(str(name) for name, on in categories.items() if on is True)))
