"""Shared provider plumbing: call budget, deadline-aware HTTP hooks, client cache, safe error messages.

No SDK is imported here; the SDK modules pass their own exception classes and http-client factory in.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents.engine.types import ModelError
from agents.providers.base import Provider, ProviderConfigError

log = logging.getLogger(__name__)

# A server's Retry-After is honoured up to this many seconds (both SDKs sleep whatever it says otherwise).
RETRY_AFTER_CAP_S = 5.0
# No retry is started when less than this is left of the run's budget.
MIN_RETRY_WINDOW_S = 0.25
# Statuses the SDKs retry (and every status >= 500): the error message says how many attempts were made, and the
# ModelError is `retryable`, so a fallback model is tried (agents/providers/fallback.py).
RETRYABLE = frozenset({408, 409, 429})
STATUS_TEXT = {
    400: "request rejected",
    401: "authentication failed",
    402: "payment required",
    403: "permission denied",
    404: "not found (check the model name and base URL)",
    408: "request timed out",
    409: "conflict",
    413: "request too large",
    422: "request rejected",
    429: "rate limited",
    529: "overloaded",
}


@dataclass
class CallState:
    """Per-call state the HTTP hooks read: the run's deadline (monotonic) and the attempts made."""

    deadline: float
    attempts: int = 0

    def left(self) -> float:
        """Seconds until the deadline."""
        return self.deadline - time.monotonic()


_CALL: ContextVar[CallState | None] = ContextVar("agent_llm_call", default=None)


@dataclass(frozen=True)
class Budget:
    """Timeout per attempt and retries for one call, derived from the settings and the run's remaining time."""

    timeout_s: float
    max_retries: int
    deadline: float


def call_budget(name: str, remaining_s: float) -> Budget:
    """Per-attempt timeout = min(setting, remaining); retries limited so attempts x timeout fit the remaining time."""
    if remaining_s <= 0:
        raise ModelError(f"{name}: timed out (no time left in the run budget)")
    timeout = min(float(settings.AGENT_LLM_TIMEOUT_S), remaining_s)
    fitting = max(0, math.ceil(remaining_s / timeout - 1e-9) - 1)
    retries = min(int(settings.AGENT_LLM_MAX_RETRIES), fitting)
    return Budget(timeout_s=timeout, max_retries=max(0, retries), deadline=time.monotonic() + remaining_s)


@contextmanager
def deadline_scope(budget: Budget) -> Iterator[CallState]:
    """Make the call's deadline visible to the HTTP hooks (same thread, same context)."""
    state = CallState(deadline=budget.deadline)
    token = _CALL.set(state)
    try:
        yield state
    finally:
        _CALL.reset(token)


def on_request(request: Any) -> None:
    """httpx request hook: count the attempt and shrink its timeouts to the time left before the deadline."""
    state = _CALL.get()
    if state is None:
        return
    state.attempts += 1
    left = max(state.left(), 0.001)
    timeouts = dict(request.extensions.get("timeout") or {})
    for part in ("connect", "read", "write", "pool"):
        current = timeouts.get(part)
        timeouts[part] = left if current is None else min(current, left)
    request.extensions = {**request.extensions, "timeout": timeouts}


def on_response(response: Any) -> None:
    """httpx response hook: cap Retry-After, and veto a retry the deadline cannot fit (x-should-retry: false)."""
    if response.status_code < 400:
        return
    state = _CALL.get()
    left = state.left() if state is not None else math.inf
    wait = server_wait(response.headers)
    capped = min(wait, RETRY_AFTER_CAP_S) if wait is not None else None
    if (wait is not None and wait > left) or left - (capped or 0.0) < MIN_RETRY_WINDOW_S:
        response.headers["x-should-retry"] = "false"
    elif capped is not None:
        response.headers["retry-after-ms"] = str(max(1, int(capped * 1000)))
        response.headers["retry-after"] = f"{capped:.3f}"


def server_wait(headers: Any) -> float | None:
    """Seconds a server asks to wait (retry-after-ms, retry-after seconds or HTTP date); None when absent."""
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            parsed = email.utils.parsedate_tz(value)
            if parsed is None:
                continue
            seconds = float(email.utils.mktime_tz(parsed) - time.time())
        if math.isnan(seconds):
            continue
        return max(seconds, 0.0)
    return None


def http_hooks() -> dict[str, list[Callable[[Any], None]]]:
    """The event hooks for the SDKs' DefaultHttpxClient."""
    return {"request": [on_request], "response": [on_response]}


def connection_limits(sdk_default: Any) -> Any:
    """The SDK's own connection limits, keeping at most AGENT_HTTP_MAX_KEEPALIVE idle connections (see settings)."""
    return type(sdk_default)(
        max_connections=sdk_default.max_connections,
        max_keepalive_connections=int(settings.AGENT_HTTP_MAX_KEEPALIVE),
        keepalive_expiry=sdk_default.keepalive_expiry,
    )


# The Stainless SDKs (openai, anthropic) describe the host on every request: language, SDK version, OS, CPU
# architecture, Python implementation and version, sync or async. None of it is needed by the APIs, it tells a third
# party about our servers, and each header costs work on every call (the SDK merges and validates it, httpx and h11
# normalise it): without these seven a model call runs markedly fewer Python calls (docs/performance.md). The SDKs'
# own way to leave a default header out is their `Omit` marker. The per-request ones (retry count, read timeout) stay.
PLATFORM_HEADERS = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
)


def unsent_platform_headers(omit: type) -> dict[str, Any]:
    """`default_headers` for an SDK client that leaves PLATFORM_HEADERS out (`omit`: that SDK's own Omit class)."""
    return {name: omit() for name in PLATFORM_HEADERS}


_CLIENTS: dict[tuple[str, str, str], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def cached_client(kind: str, base_url: str, api_key: str, build: Callable[[], Any]) -> Any:
    """One SDK client per (provider, base URL, key), reused so connection pools stay warm."""
    key = (kind, base_url, api_key)
    client = _CLIENTS.get(key)  # the common case, without the lock (a gevent lock is Python code, costly on a hot path)
    if client is not None:
        return client
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = build()
        return client


def require_setting(provider: str, setting: str) -> str:
    """The value of a required setting (read now); ProviderConfigError naming it when empty."""
    value = getattr(settings, setting, "") or ""
    if not str(value).strip():
        raise ProviderConfigError(f"Provider '{provider}' cannot be used: {setting} is not set.")
    return str(value).strip()


class KeyedProvider(Provider):
    """A provider configured by a key setting and a base-URL setting (read at call time, never at import)."""

    key_setting: str = ""
    base_url_setting: str = ""
    default_base_url: str = ""

    @classmethod
    def check_config(cls) -> None:
        """ProviderConfigError when the key setting is empty."""
        require_setting(cls.name, cls.key_setting)

    @classmethod
    def base_url(cls) -> str:
        """The configured base URL, or the provider's public default."""
        return str(getattr(settings, cls.base_url_setting, "") or "").strip() or cls.default_base_url

    def api_key(self) -> str:
        """The key, read now; ModelError (safe: names the setting only) when it has gone missing."""
        try:
            return require_setting(self.name, self.key_setting)
        except ProviderConfigError as exc:
            raise ModelError(str(exc)) from None


def parse_json_body(name: str, content: bytes) -> dict[str, Any]:
    """The reply body as a JSON object; ModelError when it is not JSON or not an object."""
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        raise ModelError(f"{name}: malformed reply (not JSON)") from None
    if not isinstance(data, dict):
        raise ModelError(f"{name}: unexpected reply shape (not a JSON object)")
    return data


_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """A JSON-ready copy of a (possibly read-only) mapping/sequence tree, e.g. a ToolSpec's parameters.

    Scalars (most of a schema's leaves) are told apart by their exact type first: `isinstance(x, Mapping)` is an ABC
    check, and this copy runs once per run for every tool schema."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def as_int(value: Any) -> int:
    """A token count; 0 for anything that is not a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass(frozen=True)
class SdkErrors:
    """The exception classes of one SDK (both SDKs use the same names) plus its transport's errors. `transient`: the
    transport errors another attempt may not meet (a timeout, a dropped connection: a stream cut mid-reply surfaces
    as one), as opposed to a bad URL."""

    base: type[BaseException]
    status: type[BaseException]
    timeout: type[BaseException]
    connection: type[BaseException]
    transport: tuple[type[BaseException], ...] = ()
    transient: tuple[type[BaseException], ...] = ()


def status_retryable(status: object) -> bool:
    """Whether an HTTP status (or a provider's error code that is one) reports a failure another attempt or another
    model may not meet: a timeout, a conflict, a rate limit, a failing or overloaded server (5xx, 529)."""
    if isinstance(status, str) and status.isdigit():
        status = int(status)
    return isinstance(status, int) and not isinstance(status, bool) and (status in RETRYABLE or status >= 500)


def retryable(exc: BaseException, errors: SdkErrors) -> bool:
    """Whether the failure of a call (after the SDK's own retries) is one a fallback model may not meet: a timeout,
    a lost connection or a retryable status, not a refused key, a rejected request or a malformed reply."""
    if isinstance(exc, (errors.timeout, errors.connection)):
        return True
    if isinstance(exc, errors.status):
        return status_retryable(int(getattr(exc, "status_code", 0) or 0))
    return isinstance(exc, errors.transient)


def safe_message(name: str, exc: BaseException, errors: SdkErrors, budget: Budget, attempts: int) -> str:
    """A short message without keys, bodies or stacks."""
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if isinstance(exc, errors.timeout):
        return f"{name}: timed out after {budget.timeout_s:g} s" + (f" ({attempts} attempts)" if attempts > 1 else "")
    if isinstance(exc, errors.connection):
        return f"{name}: connection failed{tries}"
    if isinstance(exc, errors.status):
        status = int(getattr(exc, "status_code", 0) or 0)
        text = STATUS_TEXT.get(status, "server error" if status >= 500 else "request failed")
        return f"{name}: {text}{tries if status_retryable(status) else ''} (HTTP {status})"
    if isinstance(exc, json.JSONDecodeError):
        return f"{name}: malformed reply (not JSON)"
    return f"{name}: request failed ({type(exc).__name__})"


def run_call(name: str, errors: SdkErrors, budget: Budget, call: Callable[[], bytes]) -> bytes:
    """Run one SDK call under the deadline; every SDK/transport failure becomes a safe ModelError."""
    with deadline_scope(budget) as state:
        try:
            return call()
        except (errors.base, ValueError, *errors.transport) as exc:  # type: ignore[misc]  # ValueError: bad JSON
            error = failed(name, exc, errors, budget, state.attempts)
    raise error


def post_json(client: Any, path: str, payload: bytes, budget: Budget, raw: type) -> bytes:
    """POST a body we serialised ourselves through the SDK's own request path (auth, headers, retries, errors).

    The SDK's typed `create()` re-walks every message and tool schema on every call (about a third of a run's CPU
    with an instant model); our body is plain JSON already, so the SDK's public `post` sends it as it is. Per-call
    timeout and retries go in the request options (no client copy per call). `raw` is the SDK transport's response
    class: asking for it returns the response unparsed.
    """
    options = {"timeout": budget.timeout_s, "max_retries": budget.max_retries}
    response = client.post(endpoint(client, path), cast_to=raw, content=payload, options=options)
    return bytes(response.content)


_ENDPOINTS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def endpoint(client: Any, path: str) -> str:
    """The absolute URL of `path` on the client's base URL, merged once per client as the SDK merges it on every
    call. Given an absolute URL, the SDK parses it once instead of parsing the path and then the whole merged URL
    again: ~40 us less per call (of ~250 us the SDK takes to build a request)."""
    urls = _ENDPOINTS.get(client)
    if urls is None:
        urls = _ENDPOINTS.setdefault(client, {})
    url = urls.get(path)
    if url is None:
        base = client.base_url  # the SDK's own merge: its base URL (always ending in "/") and the path without "/"
        url = urls[path] = str(base.copy_with(raw_path=base.raw_path + path.lstrip("/").encode()))
    return url


# --- streamed calls --------------------------------------------------------------------------------------------


def post_stream(client: Any, path: str, payload: bytes, budget: Budget, stream_cls: type) -> Any:
    """POST a streaming request through the SDK's own request path (auth, headers, retries of the request, status
    errors) and return its response with the body unread. `stream_cls`: the SDK's Stream class, which the SDK needs
    to be asked for a stream; we read the events from its `response` ourselves (sse_events), into plain dicts."""
    options = {"timeout": budget.timeout_s, "max_retries": budget.max_retries}
    stream = client.post(
        endpoint(client, path), cast_to=object, content=payload, options=options, stream=True, stream_cls=stream_cls
    )
    return stream.response


def failed(name: str, exc: BaseException, errors: SdkErrors, budget: Budget, attempts: int) -> ModelError:
    """The safe ModelError for a failed call (logged), `retryable` as the failure was."""
    message = safe_message(name, exc, errors, budget, attempts)
    log.warning("LLM call failed: %s", message)
    return ModelError(message, retryable=retryable(exc, errors))
