"""Webhooks and e-mail: where notifications of a run go (docs/api.md#webhooks, docs/configuration.md#e-mail)."""

from typing import Any

from reactsite.settings.base import DEBUG, env

# Webhook targets must resolve to public addresses unless AGENT_WEBHOOK_ALLOW_PRIVATE=1 (a receiver on this machine
# or a private network); cloud metadata addresses never.
AGENT_WEBHOOK_ALLOW_PRIVATE = env.bool("AGENT_WEBHOOK_ALLOW_PRIVATE", default=False)
AGENT_WEBHOOK_TIMEOUT_S = env.float("AGENT_WEBHOOK_TIMEOUT_S", default=5.0)
# A failed attempt is retried after base * 2**(n-1) seconds, so the attempts spread over about an hour by default.
AGENT_WEBHOOK_MAX_ATTEMPTS = env.int("AGENT_WEBHOOK_MAX_ATTEMPTS", default=7)
AGENT_WEBHOOK_RETRY_BASE_S = env.float("AGENT_WEBHOOK_RETRY_BASE_S", default=60.0)
# Where this site is reached from outside: links in e-mails (a run's admin page) are built on it. By default where
# `make run` serves: its PORT.
AGENT_PUBLIC_URL = env.str("AGENT_PUBLIC_URL", default=f"http://127.0.0.1:{env.str('PORT', default='') or 8000}")

# E-mail (Django 6.1's MAILERS): printed to the console (with DEBUG on) unless EMAIL_URL names an SMTP server
# (smtp://user:password@host:25, smtp+tls://…:587, smtps://…:465), or the variables named like Django's classic
# settings are set: EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, EMAIL_USE_SSL.
# EMAIL_BACKEND picks any other backend (with no options); EMAIL_TIMEOUT bounds an SMTP conversation.
_SMTP = "django.core.mail.backends.smtp.EmailBackend"


def _from_url() -> tuple[str, dict[str, Any]]:
    """The backend and SMTP options EMAIL_URL names."""
    email = env.email_url("EMAIL_URL")
    return email["EMAIL_BACKEND"], {
        "host": email["EMAIL_HOST"] or "localhost",
        "port": email["EMAIL_PORT"] or 25,
        "username": email["EMAIL_HOST_USER"] or "",
        "password": email["EMAIL_HOST_PASSWORD"] or "",
        "use_tls": bool(email.get("EMAIL_USE_TLS")),
        "use_ssl": bool(email.get("EMAIL_USE_SSL")),
    }


def _from_variables() -> tuple[str, dict[str, Any]]:
    """The backend and SMTP options of the classic variables. Nothing configured: the console in development; with
    DEBUG off, SMTP on localhost:25 (Django's own default, and what `check --deploy` asks for) — a machine's local
    MTA, or a logged delivery failure."""
    console = DEBUG and not env.str("EMAIL_HOST", default="")
    backend = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend" if console else _SMTP)
    return backend, {
        "host": env.str("EMAIL_HOST", default="localhost"),
        "port": env.int("EMAIL_PORT", default=25),
        "username": env.str("EMAIL_HOST_USER", default=""),
        "password": env.str("EMAIL_HOST_PASSWORD", default=""),
        "use_tls": env.bool("EMAIL_USE_TLS", default=False),
        "use_ssl": env.bool("EMAIL_USE_SSL", default=False),
    }


_email_backend, _smtp_options = _from_url() if env.str("EMAIL_URL", default="") else _from_variables()
_smtp_options["timeout"] = env.float("EMAIL_TIMEOUT", default=10.0)
MAILERS = {"default": {"BACKEND": _email_backend, **({"OPTIONS": _smtp_options} if _email_backend == _SMTP else {})}}
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="reactsite@localhost")
