"""System checks of our own: the shared state must really be shared."""

from django.conf import settings
from django.core import checks

from agents.tools.mcp.config import McpConfigError, parse_servers
from agents.usage.prices import check_prices

PER_PROCESS_CACHES = {
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
}


@checks.register(checks.Tags.caches)
def check_shared_cache(app_configs=None, **kwargs):
    """The default cache is shared state (the health check reads it back): a per-process one would not be."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend in PER_PROCESS_CACHES:
        return [
            checks.Error(
                f"The default cache ({backend}) is not shared between processes.",
                hint="Use the database cache (the default) or set REDIS_URL.",
                id="reactsite.E001",
            )
        ]
    return []


@checks.register()
def check_mcp_servers(app_configs=None, **kwargs):
    """AGENT_MCP_SERVERS and its bounds must be usable: a mistake disables the MCP tools, and says so here."""

    errors = []
    try:
        parse_servers(settings.AGENT_MCP_SERVERS)
    except McpConfigError as exc:
        errors.append(
            checks.Error(
                str(exc),
                hint='A JSON list such as [{"name": "docs", "command": "docs-mcp", "args": ["--stdio"]}, '
                '{"name": "crm", "url": "https://crm.example/mcp", "sensitive": true}] '
                '(docs/configuration.md, "MCP servers").',
                id="reactsite.E002",
            )
        )
    for name in ("AGENT_MCP_TIMEOUT_S", "AGENT_MCP_CONNECT_TIMEOUT_S", "AGENT_MCP_REFRESH_S"):
        value = getattr(settings, name)
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            errors.append(checks.Error(f"{name} must be a number of seconds above 0.", id="reactsite.E002"))
    return errors


checks.register(check_prices)  # AGENT_PRICES and AGENT_DAILY_COST_QUOTA (docs/cost.md)


@checks.register(checks.Tags.security, deploy=True)
def check_metrics_token(app_configs=None, **kwargs):
    """`manage.py check --deploy`: /metrics on without a token answers anyone who can reach the server."""
    if settings.AGENT_METRICS and not settings.AGENT_METRICS_TOKEN:
        return [
            checks.Warning(
                "AGENT_METRICS is on and AGENT_METRICS_TOKEN is empty: /metrics answers anyone who can reach it "
                "(run counts, spend, the models and tools in use).",
                hint="Set AGENT_METRICS_TOKEN to a long random secret (scrapes then send Authorization: Bearer "
                "<token>), or keep /metrics reachable only from the scraper's network.",
                id="reactsite.W001",
            )
        ]
    return []
