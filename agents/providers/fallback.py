"""Fallback models (docs/fallback-models.md): when the primary fails with a retryable error after its retries, or is
rate-limited, the next "provider/model" of the run's list answers instead.

In a run this is the model at the core of the host's call pipeline (agents/runs/calls.py), inside its `price` stage:
a fallback's reply names the model that answered, so that model's price applies."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from agents.engine.types import Clock, Model, ModelError, ModelReply, ModelRequest
from agents.providers import _common, get_provider, validate_choice
from agents.providers.base import ProviderConfigError

log = logging.getLogger(__name__)

MAX_FALLBACKS = 5
EXAMPLE = "anthropic/claude-sonnet-4-6"


def with_fallbacks(primary: Model, fallbacks: list[str]) -> Model:
    """The primary model, falling back to each of `fallbacks` ("provider/model") in order."""
    return FallbackModel(primary, fallbacks)


def fallback_problem(value: object) -> str | None:
    """Why `value` is not a usable list of fallback models (each allowed, known, with its key), or None."""
    if not isinstance(value, list):
        return f'A list of "provider/model" strings, e.g. ["{EXAMPLE}"].'
    if len(value) > MAX_FALLBACKS:
        return f"At most {MAX_FALLBACKS} fallback models ({len(value)} given)."
    seen: set[str] = set()
    for number, entry in enumerate(value, 1):
        provider, _, model = str(entry).partition("/")  # a model may hold "/" itself: meta-llama/Llama-3.1-8B
        if not isinstance(entry, str) or not provider or not model:
            return f"Fallback {number} must be a \"provider/model\" string, e.g. '{EXAMPLE}'."
        shown = entry if len(entry) <= 100 else entry[:100] + "…"
        if entry in seen:
            return f"Fallback {number} '{shown}' is listed twice."
        seen.add(entry)
        try:
            validate_choice(provider, model)
        except ProviderConfigError as exc:
            return f"Fallback {number} '{shown}': {exc}"
    return None


class FallbackModel:
    """A Model that calls the primary and, when it fails with a retryable ModelError (a timeout, a lost connection,
    a rate limit, a failing server: after the SDK's own retries), each fallback in turn within the same time budget.

    A non-retryable error of the primary (a refused key, a rejected request) is raised at once: another model would
    hide a mistake to fix (the key, the model name, the request). Once falling back, any failure of a fallback, or
    its key gone missing, moves on to the next one. CallStopped and HostStop are never caught: the host stopped the
    call, not the model.
    """

    clock: Clock = staticmethod(time.monotonic)

    def __init__(self, primary: Model, fallbacks: list[str]) -> None:
        self.primary, self.fallbacks = primary, list(fallbacks)

    def complete(self, request: ModelRequest) -> ModelReply:
        """The first reply of the primary or a fallback; a reply of a fallback names it in `model`."""
        deadline = self.clock() + request.timeout_s
        heard = _Heard(request)
        try:
            return self.primary.complete(heard.watching(request))
        except ModelError as exc:
            if not exc.retryable or not self.fallbacks:
                raise
            last, failures = exc, [_named(_label(self.primary), exc)]
        for index, choice in enumerate(self.fallbacks):
            left = deadline - self.clock()
            if left < _common.MIN_RETRY_WINDOW_S:
                failures.append(f"no time left to try {', '.join(self.fallbacks[index:])}")
                break
            provider, _, model = choice.partition("/")
            try:
                fallback = get_provider(provider, model)
            except ProviderConfigError as exc:  # its key or its allowance went away since the run was checked
                failures.append(f"{choice}: not tried ({exc})")
                continue
            log.warning("LLM call falls back to %s after: %s", choice, failures[-1])
            heard.void()
            try:
                reply = fallback.complete(heard.watching(replace(request, timeout_s=left)))
            except ModelError as exc:
                last = exc
                failures.append(_named(choice, exc))
                continue
            return replace(reply, model=choice)
        raise ModelError("; ".join(failures), retryable=last.retryable) from last


class _Heard:
    """What a streamed call's listener heard: whether text went out since the last retry, so a fallback starting
    after it first tells the listener that text is void (`on_retry`), as a retry of the same model does."""

    def __init__(self, request: ModelRequest) -> None:
        self.on_text, self.on_retry = request.on_text, request.on_retry
        self.said = False

    def watching(self, request: ModelRequest) -> ModelRequest:
        """The request for one attempt, its text and retries reported here first (unchanged when not streamed)."""
        if self.on_text is None:
            return request
        return replace(request, on_text=self.text, on_retry=self.retry)

    def text(self, text: str) -> None:
        self.said = True
        if self.on_text is not None:
            self.on_text(text)

    def retry(self) -> None:
        self.said = False
        if self.on_retry is not None:
            self.on_retry()

    def void(self) -> None:
        """Before another model starts: the text the failed one wrote is void."""
        if self.said:
            self.retry()


def _label(model: Model) -> str:
    """The "provider/model" of a provider instance (as a fallback is named); the class name of anything else."""
    name, chosen = getattr(model, "name", None), getattr(model, "model", None)
    return f"{name}/{chosen}" if isinstance(name, str) and isinstance(chosen, str) else type(model).__name__


def _named(label: str, exc: ModelError) -> str:
    """The error's message as said of `label`: a provider's own "openai: …" becomes "openai/gpt-4.1: …"."""
    message = str(exc) or "the model call failed"
    provider = label.partition("/")[0]
    if message.startswith(provider + ": "):
        message = message[len(provider) + 2 :]
    return f"{label}: {message}"
