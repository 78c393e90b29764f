"""The provider registry: lookup, configuration checks and model allowlists, before any HTTP call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.providers import ProviderConfigError, get_provider, provider_class, validate_choice
from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.openai_compat import HuggingFaceProvider, OpenAIProvider, OpenRouterProvider, XAIProvider
from tests.providers import stub_llm as llm

PROVIDERS = [
    ("openai", OpenAIProvider, "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"),
    ("anthropic", AnthropicProvider, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ""),
    ("xai", XAIProvider, "XAI_API_KEY", "XAI_BASE_URL", "/api/v1"),
    ("huggingface", HuggingFaceProvider, "HF_TOKEN", "HF_BASE_URL", "/api/v1"),
    ("openrouter", OpenRouterProvider, "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL", "/api/v1"),
]
NAMES = [(name, cls) for name, cls, *_ in PROVIDERS]
KEYS = [(name, key) for name, _, key, *_ in PROVIDERS]


@pytest.fixture
def all_allowed(settings):
    """Every real provider allowed, no model allowlists, no keys."""
    settings.AGENT_ALLOWED_PROVIDERS = ["demo", *[name for name, *_ in PROVIDERS]]
    settings.AGENT_MODELS = {}
    for _, _, key, _, _ in PROVIDERS:
        setattr(settings, key, "")
    return settings


@pytest.mark.parametrize(("name", "cls"), NAMES)
def test_registry_names_resolve_to_classes(name, cls):
    assert provider_class(name) is cls
    assert cls.name == name
    assert cls.default_model


def test_unknown_provider_is_refused(all_allowed):
    with pytest.raises(ProviderConfigError, match="Unknown provider 'nope'"):
        provider_class("nope")
    with pytest.raises(ProviderConfigError):
        validate_choice("nope", None)
    with pytest.raises(ProviderConfigError):
        get_provider("nope")


def test_provider_not_allowed_here_is_refused(all_allowed):
    all_allowed.AGENT_ALLOWED_PROVIDERS = ["demo"]
    all_allowed.OPENAI_API_KEY = llm.fake_key()
    with pytest.raises(ProviderConfigError, match="not allowed"):
        validate_choice("openai", None)


@pytest.mark.parametrize(("name", "key_setting"), KEYS)
def test_missing_key_is_a_config_error(all_allowed, name, key_setting):
    with pytest.raises(ProviderConfigError, match=f"{key_setting} is not set"):
        validate_choice(name, None)
    with pytest.raises(ProviderConfigError, match=f"{key_setting} is not set"):
        provider_class(name).check_config()


@pytest.mark.parametrize(("name", "key_setting"), KEYS)
def test_blank_key_is_a_config_error(all_allowed, name, key_setting):
    setattr(all_allowed, key_setting, "   ")
    with pytest.raises(ProviderConfigError, match=key_setting):
        validate_choice(name, None)


@pytest.mark.parametrize(("name", "key_setting"), KEYS)
def test_key_is_read_at_call_time_and_never_echoed(all_allowed, name, key_setting):
    key = llm.fake_key(f"{name}-")
    setattr(all_allowed, key_setting, key)
    assert validate_choice(name, None) == provider_class(name).default_model
    setattr(all_allowed, key_setting, "")
    with pytest.raises(ProviderConfigError) as err:
        validate_choice(name, None)
    assert key not in str(err.value)


def test_get_provider_returns_a_ready_instance(all_allowed):
    all_allowed.ANTHROPIC_API_KEY = llm.fake_key("sk-ant-")
    provider = get_provider("anthropic", "claude-haiku-4-5")
    assert isinstance(provider, AnthropicProvider)
    assert provider.model == "claude-haiku-4-5"
    assert get_provider("anthropic").model == AnthropicProvider.default_model


def test_model_allowlist_refuses_another_model_before_any_http(all_allowed, stub):
    all_allowed.OPENAI_API_KEY = llm.fake_key()
    all_allowed.OPENAI_BASE_URL = stub.url + "/v1"
    all_allowed.AGENT_MODELS = {"openai": ["gpt-4.1-mini", "gpt-4.1"]}
    with pytest.raises(ProviderConfigError, match="'gpt-5' is not allowed"):
        validate_choice("openai", "gpt-5")
    with pytest.raises(ProviderConfigError):
        get_provider("openai", "gpt-5")
    assert validate_choice("openai", "gpt-4.1") == "gpt-4.1"
    assert validate_choice("openai", None) == "gpt-4.1-mini"
    assert stub.count("POST", llm.OPENAI_PATH) == 0
    assert stub.requests == []


def test_allowlist_of_another_provider_does_not_apply(all_allowed):
    all_allowed.XAI_API_KEY = llm.fake_key()
    all_allowed.AGENT_MODELS = {"openai": ["gpt-4.1-mini"]}
    assert validate_choice("xai", "grok-4-fast") == "grok-4-fast"


@pytest.mark.parametrize(("name", "cls", "key_setting", "url_setting", "suffix"), PROVIDERS)
def test_base_url_comes_from_settings_or_a_public_default(settings, name, cls, key_setting, url_setting, suffix):
    setattr(settings, url_setting, "")
    assert cls.base_url().startswith("https://")
    setattr(settings, url_setting, "http://127.0.0.1:1" + suffix)
    assert cls.base_url() == "http://127.0.0.1:1" + suffix


def test_importing_the_registry_loads_no_sdk():
    code = (
        "import django, sys; django.setup(); import agents.providers; "
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "reactsite.settings", "DEBUG": "1"}
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
