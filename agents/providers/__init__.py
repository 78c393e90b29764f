"""Model providers. Only this package imports an SDK, and only lazily (see get_provider)."""

from __future__ import annotations

import logging
from importlib import import_module

from django.conf import settings

from agents.providers.base import Provider, ProviderConfigError

log = logging.getLogger(__name__)

# name -> "module:Class"; modules are imported on first use so an unused SDK is never loaded.
PROVIDERS: dict[str, str] = {
    "demo": "agents.providers.demo:DemoProvider",
    "openai": "agents.providers.openai_compat:OpenAIProvider",
    "xai": "agents.providers.openai_compat:XAIProvider",
    "huggingface": "agents.providers.openai_compat:HuggingFaceProvider",
    "openrouter": "agents.providers.openai_compat:OpenRouterProvider",
    "anthropic": "agents.providers.anthropic_provider:AnthropicProvider",
}

# name -> the setting holding its key (each class's `key_setting`, which a test keeps equal), so `warm` can tell which
# providers can be used without importing every SDK; a provider not named here needs no key.
KEY_SETTINGS: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "xai": "XAI_API_KEY",
    "huggingface": "HF_TOKEN",
    "openrouter": "OPENROUTER_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}

__all__ = [
    "KEY_SETTINGS",
    "PROVIDERS",
    "Provider",
    "ProviderConfigError",
    "accepts_documents",
    "accepts_images",
    "get_provider",
    "provider_class",
    "usable",
    "validate_choice",
    "warm",
]


def provider_class(name: str) -> type[Provider]:
    """The class registered for `name`; ProviderConfigError when unknown."""
    try:
        path = PROVIDERS[name]
    except KeyError:
        raise ProviderConfigError(f"Unknown provider '{name}'. Known: {', '.join(sorted(PROVIDERS))}.") from None
    module, _, cls = path.partition(":")
    provider: type[Provider] = getattr(import_module(module), cls)
    return provider


def validate_choice(name: str, model: str | None) -> str:
    """Check provider and model before any call; return the model to use. Raises ProviderConfigError."""
    allowed = list(settings.AGENT_ALLOWED_PROVIDERS)
    if name not in allowed:
        raise ProviderConfigError(f"Provider '{name}' is not allowed here. Allowed: {', '.join(allowed)}.")
    cls = provider_class(name)
    chosen = model or cls.default_model
    allowlist = settings.AGENT_MODELS.get(name) or []
    if allowlist and chosen not in allowlist:
        raise ProviderConfigError(
            f"Model '{chosen}' is not allowed for provider '{name}'. Allowed: {', '.join(allowlist)}."
        )
    cls.check_config()
    return chosen


def accepts_images(name: str, model: str) -> bool:
    """Whether `model` of provider `name` takes images: the models AGENT_VISION_MODELS_<NAME> lists when it lists
    any, else the provider's own rule (`Provider.vision`)."""
    return _takes(settings.AGENT_VISION_MODELS, "vision", name, model)


def accepts_documents(name: str, model: str) -> bool:
    """Whether `model` of provider `name` takes documents: the models AGENT_DOCUMENT_MODELS_<NAME> lists when it
    lists any, else the provider's own rule (`Provider.documents`)."""
    return _takes(settings.AGENT_DOCUMENT_MODELS, "documents", name, model)


def _takes(models: dict[str, list[str]], rule: str, name: str, model: str) -> bool:
    """Whether `model` of provider `name` takes a kind of input: the models `models` lists for the provider when it
    lists any, else the provider's own rule (its class attribute `rule`)."""
    listed = models.get(name) or []
    if listed:
        return model in listed
    return bool(getattr(provider_class(name), rule))


def get_provider(name: str, model: str | None = None) -> Provider:
    """A ready provider instance (validated)."""
    chosen = validate_choice(name, model)
    return provider_class(name)(model=chosen)


def warm() -> list[str]:
    """Import the module (and SDK) of every allowed provider that has its key, before the process serves: importing
    an SDK takes a noticeable part of a second, during which, on a first call, every run in flight in a gevent
    process waits. A provider without its key is left unimported (an SDK costs tens of megabytes a process;
    docs/performance.md, "Figures behind the code"). One that fails to import is logged and left for its first call
    to report, as without a warm-up: the process still serves the others. Returns the names imported."""
    names = []
    for name in usable():
        try:
            provider_class(name)
        except ImportError as exc:
            log.warning("provider %s could not be imported: %s", name, exc)
            continue
        names.append(name)
    return names


def usable() -> list[str]:
    """The providers a run may use here now: allowed (AGENT_ALLOWED_PROVIDERS, in its order), known, and with their
    key when they need one. Nothing is imported."""
    return [name for name in settings.AGENT_ALLOWED_PROVIDERS if name in PROVIDERS and _has_key(name)]


def _has_key(name: str) -> bool:
    key = KEY_SETTINGS.get(name)
    return key is None or bool(str(getattr(settings, key, "") or "").strip())
