"""Fixtures of the fallback tests: both SDKs (and xAI's, OpenAI-compatible) pointed at one local stub."""

from __future__ import annotations

import pytest

from tests.providers import stub_llm as llm

XAI_PATH = "/xai/v1/chat/completions"


@pytest.fixture
def sdks(settings, stub):
    """openai, anthropic and xai on the stub, 5 s per attempt, one retry (two attempts) per call."""
    settings.XAI_API_KEY = llm.fake_key("xai-test-")
    settings.XAI_BASE_URL = stub.url + "/xai/v1"
    return llm.point_sdks_at(settings, stub, timeout_s=5.0, retries=1)
