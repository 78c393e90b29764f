"""The fallback model (agents/providers/fallback.py) through the real SDKs against the stub: which failures of the
primary move on to the fallbacks, in order, within the request's time, what the reply and the final error say, and
what a streamed call's listener hears."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents.engine.types import CallStopped, HostStop, ModelError, StopReason
from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.fake import ScriptedModel
from agents.providers.fake import text as fake_text
from agents.providers.fallback import FallbackModel, with_fallbacks
from agents.providers.openai_compat import OpenAIProvider
from tests.fallback.conftest import XAI_PATH
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

FAST_RETRY = {"retry-after-ms": "1"}
STREAM = {"Content-Type": "text/event-stream"}
CLAUDE = "anthropic/claude-haiku-4-5"


def primary() -> OpenAIProvider:
    return OpenAIProvider("gpt-4o-mini")


def fail(stub, path: str, status: int) -> None:
    """Every call on `path` answers `status`."""
    stub.add("POST", path, status=status, json=llm.openai_error(), headers=FAST_RETRY, repeat=True)


def failure(model, request=None) -> ModelError:
    with pytest.raises(ModelError) as err:
        model.complete(request or llm.request())
    return err.value


@pytest.mark.parametrize("status", [429, 500])
def test_a_retryable_failure_of_the_primary_is_answered_by_the_fallback(sdks, status):
    fail(sdks, OPENAI_PATH, status)
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("84", llm.anthropic_usage(10, 2)))

    reply = with_fallbacks(primary(), [CLAUDE]).complete(llm.request())

    assert (reply.text, reply.model, reply.usage.total_tokens) == ("84", CLAUDE, 12)
    assert sdks.count("POST", OPENAI_PATH) == 2  # the primary's own retry came first
    assert sdks.requests[-1].json()["model"] == "claude-haiku-4-5"


def test_the_primarys_reply_names_no_model(sdks):
    sdks.add("POST", OPENAI_PATH, json=llm.openai_text("84"))
    reply = with_fallbacks(primary(), [CLAUDE]).complete(llm.request())
    assert (reply.text, reply.model) == ("84", None)
    assert sdks.count("POST", ANTHROPIC_PATH) == 0


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_non_retryable_failure_of_the_primary_is_raised_at_once(sdks, status):
    fail(sdks, OPENAI_PATH, status)

    error = failure(with_fallbacks(primary(), [CLAUDE]))

    assert str(error).startswith("openai: ") and error.retryable is False  # the provider's own error, as it was
    assert sdks.count("POST", ANTHROPIC_PATH) == 0


def test_the_fallbacks_are_tried_in_order_past_any_failure_of_their_own(sdks):
    fail(sdks, OPENAI_PATH, 429)
    sdks.add("POST", ANTHROPIC_PATH, status=401, json=llm.anthropic_error("authentication_error"))
    sdks.add("POST", XAI_PATH, json=llm.openai_text("from grok"))

    reply = with_fallbacks(primary(), [CLAUDE, "xai/grok-4"]).complete(llm.request())

    assert (reply.text, reply.model) == ("from grok", "xai/grok-4")
    assert [r.path for r in sdks.requests] == [OPENAI_PATH, OPENAI_PATH, ANTHROPIC_PATH, XAI_PATH]


def test_when_all_fail_the_error_names_every_model_tried_and_is_retryable_as_the_last(sdks):
    fail(sdks, OPENAI_PATH, 429)
    sdks.add("POST", ANTHROPIC_PATH, status=529, json=llm.anthropic_error("overloaded_error"), headers=FAST_RETRY,
             repeat=True)  # fmt: skip
    fail(sdks, XAI_PATH, 401)

    error = failure(with_fallbacks(primary(), [CLAUDE, "xai/grok-4"]))

    assert str(error) == (
        "openai/gpt-4o-mini: rate limited after 2 attempts (HTTP 429); "
        "anthropic/claude-haiku-4-5: overloaded after 2 attempts (HTTP 529); "
        "xai/grok-4: authentication failed (HTTP 401)"
    )
    assert error.retryable is False


def test_a_last_retryable_failure_leaves_the_error_retryable(sdks):
    fail(sdks, OPENAI_PATH, 500)
    sdks.add("POST", ANTHROPIC_PATH, status=429, json=llm.anthropic_error(), headers=FAST_RETRY, repeat=True)

    error = failure(with_fallbacks(primary(), [CLAUDE]))

    assert error.retryable is True
    assert str(error).startswith("openai/gpt-4o-mini: server error after 2 attempts (HTTP 500); anthropic/claude")


def test_a_fallback_whose_key_went_missing_is_skipped_with_its_reason(settings, sdks):
    settings.ANTHROPIC_API_KEY = ""
    fail(sdks, OPENAI_PATH, 429)
    fail(sdks, XAI_PATH, 503)

    error = failure(with_fallbacks(primary(), [CLAUDE, "xai/grok-4"]))

    assert (
        "; anthropic/claude-haiku-4-5: not tried (Provider 'anthropic' cannot be used: ANTHROPIC_API_KEY is not set.); "
        "xai/grok-4: server error after 2 attempts (HTTP 503)"
    ) in str(error)
    assert sdks.count("POST", ANTHROPIC_PATH) == 0


def test_a_skipped_fallback_leaves_the_next_one_to_answer(settings, sdks):
    settings.ANTHROPIC_API_KEY = ""
    fail(sdks, OPENAI_PATH, 429)
    sdks.add("POST", XAI_PATH, json=llm.openai_text("from grok"))

    assert with_fallbacks(primary(), [CLAUDE, "xai/grok-4"]).complete(llm.request()).model == "xai/grok-4"


# --- the time budget -------------------------------------------------------------------------------------------


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The fallback model's clock, moved by hand."""
    now = [1000.0]
    monkeypatch.setattr(FallbackModel, "clock", staticmethod(lambda: now[0]))
    return now


def slow_failure(clock: list[float], seconds: float):
    """A primary that takes `seconds` of the clock, then fails with a rate limit."""

    def call(request):
        clock[0] += seconds
        raise ModelError("fake: rate limited (HTTP 429)", retryable=True)

    return ScriptedModel([call])


def test_a_fallback_gets_the_time_the_primary_left(settings, sdks, clock):
    settings.AGENT_LLM_TIMEOUT_S = 60.0
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("84"))

    reply = with_fallbacks(slow_failure(clock, 7.0), [CLAUDE]).complete(llm.request(timeout_s=10.0))

    assert reply.model == CLAUDE
    assert float(sdks.requests[-1].headers["x-stainless-read-timeout"]) == pytest.approx(3.0)


def test_no_fallback_starts_when_no_time_is_left(sdks, clock):
    error = failure(with_fallbacks(slow_failure(clock, 9.9), [CLAUDE, "xai/grok-4"]), llm.request(timeout_s=10.0))

    assert (
        str(error) == "fake/fake-1: rate limited (HTTP 429); no time left to try anthropic/claude-haiku-4-5, xai/grok-4"
    )
    assert error.retryable is True and sdks.requests == []


# --- what passes through untouched -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stop", [CallStopped(StopReason.CANCELLED), HostStop(StopReason.QUOTA_EXCEEDED, "The daily quota is used up.")]
)
def test_the_hosts_stops_pass_through_without_a_fallback(sdks, stop):
    with pytest.raises(type(stop)) as raised:
        with_fallbacks(ScriptedModel([stop]), [CLAUDE]).complete(llm.request())
    assert raised.value is stop and sdks.requests == []


def test_the_primary_sees_the_request_as_it_was(sdks):
    model = ScriptedModel([fake_text("ok")])
    request = llm.request(timeout_s=12.5)
    with_fallbacks(model, [CLAUDE]).complete(request)
    assert model.requests == [request]


# --- streaming -------------------------------------------------------------------------------------------------


def test_a_stream_that_broke_off_is_voided_before_the_fallback_writes(settings, sdks):
    settings.AGENT_LLM_MAX_RETRIES = 0
    events = llm.openai_stream(llm.openai_text("The answer is 42, as computed."))
    sdks.add("POST", OPENAI_PATH, body=b"".join(events[: len(events) // 2]), headers=STREAM)
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("It is 42."))
    heard: list[str] = []
    request = replace(llm.request(), on_text=heard.append, on_retry=lambda: heard.append("|"))

    reply = with_fallbacks(primary(), [CLAUDE]).complete(request)

    assert (reply.text, reply.model) == ("It is 42.", CLAUDE)
    before, bar, after = "".join(heard).partition("|")
    assert before and "The answer is 42".startswith(before) and bar and after == "It is 42."
    assert sdks.requests[-1].json()["stream"] is True  # the fallback streams too


def test_a_stream_refused_before_any_text_is_not_voided(sdks):
    fail(sdks, OPENAI_PATH, 429)
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("It is 42."))
    heard: list[str] = []
    request = replace(llm.request(), on_text=heard.append, on_retry=lambda: heard.append("|"))

    with_fallbacks(primary(), [CLAUDE]).complete(request)

    assert heard and "|" not in heard and "".join(heard) == "It is 42."


def test_text_the_primary_voided_itself_is_not_voided_twice(settings, sdks):
    """The primary's own retry voided its first attempt's text; its second attempt failed before writing any."""
    events = llm.openai_stream(llm.openai_text("The answer is 42, as computed."))
    sdks.add("POST", OPENAI_PATH, body=b"".join(events[: len(events) // 2]), headers=STREAM)
    fail(sdks, OPENAI_PATH, 429)
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("It is 42."))
    heard: list[str] = []
    request = replace(llm.request(), on_text=heard.append, on_retry=lambda: heard.append("|"))

    reply = with_fallbacks(primary(), [CLAUDE]).complete(request)

    assert reply.model == CLAUDE and heard.count("|") == 1 and "".join(heard).endswith("|It is 42.")


def test_an_anthropic_primary_falls_back_to_an_openai_model(sdks):
    sdks.add("POST", ANTHROPIC_PATH, status=529, json=llm.anthropic_error("overloaded_error"), headers=FAST_RETRY,
             repeat=True)  # fmt: skip
    sdks.add("POST", OPENAI_PATH, json=llm.openai_text("84"))

    reply = with_fallbacks(AnthropicProvider("claude-sonnet-4-6"), ["openai/gpt-4.1"]).complete(llm.request())

    assert (reply.text, reply.model) == ("84", "openai/gpt-4.1")
