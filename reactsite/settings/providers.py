"""Model providers and the search tool's backends: which providers and models a run may use, their credentials and
endpoints (never logged), and how their HTTP clients behave (docs/configuration.md#model-providers)."""

from reactsite.settings.base import env

_PROVIDERS = ("demo", "openai", "anthropic", "xai", "huggingface", "openrouter")

AGENT_DEFAULT_PROVIDER = env("AGENT_DEFAULT_PROVIDER", default="demo")
AGENT_ALLOWED_PROVIDERS = env.list("AGENT_ALLOWED_PROVIDERS", default=list(_PROVIDERS))
AGENT_LLM_TIMEOUT_S = env.float("AGENT_LLM_TIMEOUT_S", default=30.0)
AGENT_LLM_MAX_RETRIES = env.int("AGENT_LLM_MAX_RETRIES", default=2)
# Idle keep-alive connections kept per provider client and process, fewer than the SDKs' own pools keep. httpcore
# probes every idle connection for readability on each request; agents/providers/transport.py makes each probe one
# poll(2) instead of a gevent hub round trip, and this bounds how many there are (docs/performance.md).
AGENT_HTTP_MAX_KEEPALIVE = env.int("AGENT_HTTP_MAX_KEEPALIVE", default=32)
# Model allowlists per provider (empty: any model). E.g. AGENT_MODELS_OPENAI=gpt-4.1-mini,gpt-4.1
AGENT_MODELS = {name: env.list(f"AGENT_MODELS_{name.upper()}", default=[]) for name in _PROVIDERS}
# The models of a provider that take images (empty: the provider's own rule; see docs/configuration.md).
# E.g. AGENT_VISION_MODELS_HUGGINGFACE=Qwen/Qwen2.5-VL-7B-Instruct
AGENT_VISION_MODELS = {name: env.list(f"AGENT_VISION_MODELS_{name.upper()}", default=[]) for name in _PROVIDERS}
# The models of a provider that take documents (PDF, plain text; empty: the provider's own rule; docs/documents.md).
AGENT_DOCUMENT_MODELS = {name: env.list(f"AGENT_DOCUMENT_MODELS_{name.upper()}", default=[]) for name in _PROVIDERS}

OPENAI_API_KEY = env("OPENAI_API_KEY", default="")
OPENAI_BASE_URL = env("OPENAI_BASE_URL", default="")
ANTHROPIC_API_KEY = env("ANTHROPIC_API_KEY", default="")
ANTHROPIC_BASE_URL = env("ANTHROPIC_BASE_URL", default="")
XAI_API_KEY = env("XAI_API_KEY", default="")
XAI_BASE_URL = env("XAI_BASE_URL", default="https://api.x.ai/v1")
HF_TOKEN = env("HF_TOKEN", default="")
HF_BASE_URL = env("HF_BASE_URL", default="https://router.huggingface.co/v1")
OPENROUTER_API_KEY = env("OPENROUTER_API_KEY", default="")
OPENROUTER_BASE_URL = env("OPENROUTER_BASE_URL", default="https://openrouter.ai/api/v1")
TAVILY_API_KEY = env("TAVILY_API_KEY", default="")
TAVILY_URL = env("TAVILY_URL", default="https://api.tavily.com/search")
DUCKDUCKGO_URL = env("DUCKDUCKGO_URL", default="https://api.duckduckgo.com/")
SEARCH_TIMEOUT_S = env.float("SEARCH_TIMEOUT_S", default=10.0)
