"""Settings read from the environment: production defaults, switches, refusals, and the shared-cache checks.

Each configuration is loaded in a subprocess from a clean environment (nothing inherited from this test run).
"""

from __future__ import annotations

import json
import secrets

import pytest
from django.core import checks
from django.test import override_settings

from agents.checks import check_metrics_token, check_shared_cache
from tests.integration._support import ROOT, clean_env, manage, run_py

REDIS = "redis://127.0.0.1:6379/0"  # never connected to: loading settings and running checks does not touch it
SECURITY = ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_HSTS_SECONDS")
SHOWN = (*SECURITY, "DEBUG", "ALLOWED_HOSTS", "CACHES", "INSTALLED_APPS", "SILENCED_SYSTEM_CHECKS")
SHOWN += ("RATELIMIT_USE_CACHE",)  # django-ratelimit's
SHOWN += ("DATABASES",)

# Imports the reactsite.settings package afresh once per environment given on stdin; prints the values (or the
# error) as JSON.
LOADER = f"""
import importlib, json, os, sys
base = dict(os.environ)
out = []
for extra in json.load(sys.stdin):
    os.environ.clear()
    os.environ.update(base)
    os.environ.update(extra)
    for name in [name for name in sys.modules if (name + ".").startswith("reactsite.settings.")]:
        del sys.modules[name]
    try:
        values = vars(importlib.import_module("reactsite.settings"))
        out.append({{k: values.get(k) for k in {list(SHOWN)!r}}})
    except Exception as exc:
        out.append({{"error": type(exc).__name__ + ": " + str(exc)}})
print(json.dumps(out, default=str))
"""


def production(**extra: str) -> dict[str, str]:
    """A production environment: DEBUG off, a strong random key, a real host name."""
    return {"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(48), "ALLOWED_HOSTS": "example.com", **extra}


def load(*envs: dict[str, str]) -> list[dict]:
    """The settings each environment produces, from one fresh interpreter."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", LOADER],
        cwd=ROOT,
        env=clean_env(),
        input=json.dumps(list(envs)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def loaded() -> dict[str, dict]:
    """Every configuration these tests look at, loaded at once (one interpreter start)."""
    cases = {
        "production": production(),
        "production_redis": production(REDIS_URL=REDIS),
        "debug": {"DEBUG": "1"},
        "no_key": {"DEBUG": "0", "ALLOWED_HOSTS": "example.com"},
        "empty_key": {"DEBUG": "0", "SECRET_KEY": ""},
        **{f"off_{name}": production(**{name: "0"}) for name in SECURITY},
    }
    return dict(zip(cases, load(*cases.values()), strict=True))


@pytest.mark.parametrize("redis", [False, True], ids=["database-cache", "redis"])
def test_check_deploy_passes_with_production_settings(redis):
    env = clean_env(**production(**({"REDIS_URL": REDIS} if redis else {})))

    proc = manage("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_deploy_warns_of_metrics_without_a_token():
    """/metrics on with no token answers anyone: `check --deploy` says so (W001), and a token silences it."""
    open_metrics = manage(
        "check", "--deploy", "--fail-level", "WARNING", env=clean_env(**production(AGENT_METRICS="1"))
    )
    with_token = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env=clean_env(**production(AGENT_METRICS="1", AGENT_METRICS_TOKEN=secrets.token_hex(24))),
    )

    assert open_metrics.returncode == 1
    assert "reactsite.W001" in open_metrics.stderr and "AGENT_METRICS_TOKEN" in open_metrics.stderr
    assert with_token.returncode == 0, with_token.stdout + with_token.stderr


def test_the_metrics_warning_is_a_deploy_check_only():
    """Development (`check` without --deploy) stays quiet: the warning is about exposure, which is a deployment's."""
    plain = checks.registry.registry.get_checks(include_deployment_checks=False)
    deploy = checks.registry.registry.get_checks(include_deployment_checks=True)
    with override_settings(AGENT_METRICS=True, AGENT_METRICS_TOKEN=""):
        warned = check_metrics_token()
    with override_settings(AGENT_METRICS=False, AGENT_METRICS_TOKEN=""):
        off = check_metrics_token()

    assert check_metrics_token in deploy and check_metrics_token not in plain
    assert [e.id for e in warned] == ["reactsite.W001"] and off == []


def test_production_turns_every_security_setting_on(loaded):
    values = loaded["production"]
    assert values["DEBUG"] is False
    assert values["ALLOWED_HOSTS"] == ["example.com"]
    assert (values["SECURE_SSL_REDIRECT"], values["SESSION_COOKIE_SECURE"], values["CSRF_COOKIE_SECURE"]) == (
        True,
        True,
        True,
    )
    assert values["SECURE_HSTS_SECONDS"] >= 31536000


@pytest.mark.parametrize("name", SECURITY)
def test_each_security_setting_can_be_switched_off(loaded, name):
    values = loaded[f"off_{name}"]
    assert values[name] in (False, 0)
    others = [n for n in SECURITY if n != name]
    assert all(values[n] for n in others), values  # only that one is off


def test_debug_turns_the_security_settings_off(loaded):
    values = loaded["debug"]
    assert values["DEBUG"] is True
    assert not any(values[name] for name in SECURITY)


@pytest.mark.parametrize("case", ["no_key", "empty_key"])
def test_without_debug_a_secret_key_is_required(loaded, case):
    assert "SECRET_KEY" in loaded[case].get("error", ""), loaded[case]
    assert loaded[case]["error"].startswith("ImproperlyConfigured")


def test_manage_refuses_to_start_without_a_secret_key():
    proc = manage("check", env=clean_env(DEBUG="0", ALLOWED_HOSTS="example.com"))

    assert proc.returncode != 0
    assert "SECRET_KEY" in proc.stderr


@pytest.mark.parametrize("case", ["production", "production_redis"])
def test_production_uses_a_shared_cache(loaded, case):
    backend = loaded[case]["CACHES"]["default"]["BACKEND"]
    assert backend not in {
        "django.core.cache.backends.locmem.LocMemCache",
        "django.core.cache.backends.dummy.DummyCache",
    }
    expected = (
        "django.core.cache.backends.redis.RedisCache"
        if case.endswith("redis")
        else "reactsite.serving.cache.AtomicDatabaseCache"
    )
    assert backend == expected


@pytest.mark.parametrize(
    "backend", ["django.core.cache.backends.locmem.LocMemCache", "django.core.cache.backends.dummy.DummyCache"]
)
def test_a_per_process_cache_is_a_system_check_error(backend):
    with override_settings(CACHES={"default": {"BACKEND": backend}}):
        errors = check_shared_cache()
        registered = checks.run_checks(tags=[checks.Tags.caches])

    assert [e.id for e in errors] == ["reactsite.E001"]
    assert errors[0].level == checks.ERROR
    assert "reactsite.E001" in [e.id for e in registered]  # registered, so `manage.py check` runs it


@pytest.mark.parametrize(
    "backend", ["django.core.cache.backends.db.DatabaseCache", "django.core.cache.backends.redis.RedisCache"]
)
def test_a_shared_cache_passes_the_check(backend):
    with override_settings(CACHES={"default": {"BACKEND": backend, "LOCATION": "x"}}):
        assert check_shared_cache() == []


def test_ratelimit_counts_in_the_default_cache_and_only_w001_is_silenced(loaded):
    """django-ratelimit counts in the shared default cache; only W001 ("not officially supported") is silenced, so
    E003 (a non-atomic incr) stays live."""
    for name in ("production_redis", "production"):
        values = loaded[name]
        assert "django_ratelimit" in values["INSTALLED_APPS"]
        assert values["RATELIMIT_USE_CACHE"] == "default"
        assert values["SILENCED_SYSTEM_CHECKS"] == ["django_ratelimit.W001"]


def test_the_configured_cache_passes_every_cache_check():
    """The cache of this run (the embedded default, or Redis) raises nothing but the silenced W001."""
    assert [m for m in checks.run_checks(tags=[checks.Tags.caches]) if not m.is_silenced()] == []


def test_django_plain_database_cache_is_flagged():
    """Its incr is not atomic, so counters in it would lose hits: django-ratelimit's E003 reports it."""
    with override_settings(
        CACHES={"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "x"}}
    ):
        ids = [m.id for m in checks.run_checks(tags=[checks.Tags.caches]) if not m.is_silenced()]
    assert ids == ["django_ratelimit.E003"]


def test_a_per_process_cache_fails_check_in_production():
    """With production settings a LocMemCache configuration fails `check`: our E001 and django-ratelimit's E003."""
    code = (
        "from django.conf import settings\n"
        "from django.core import checks\n"
        "from django.test.utils import override_settings\n"
        "with override_settings(CACHES={'default': {'BACKEND': 'django.core.cache.backends.locmem.LocMemCache'}}):\n"
        "    ids = sorted({m.id for m in checks.run_checks(tags=['caches']) if not m.is_silenced()})\n"
        "print(' '.join(ids))\n"
    )
    proc = run_py(code, env=clean_env(**production(REDIS_URL=REDIS)))

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["django_ratelimit.E003", "reactsite.E001"]  # not shared, for both


@pytest.mark.django_db(transaction=True)
def test_postgresql_prepares_the_hot_statements():
    """On PostgreSQL the server binds parameters and a statement run twice on a connection is prepared there
    (DB_SERVER_SIDE_BINDING, DB_PREPARE_THRESHOLD): the hot path's statements are planned once per connection."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    from agents.models import Run

    for _ in range(3):
        list(Run.objects.filter(status="done", owner_id=0)[:1])
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("agents_run" in statement and "$1" in statement for statement in prepared), prepared


def test_server_side_binding_can_be_switched_off_for_pgbouncer():
    url = "postgres://u@127.0.0.1:5432/x"
    on, off = load(
        {"DATABASE_URL": url, "DEBUG": "1"}, {"DATABASE_URL": url, "DEBUG": "1", "DB_SERVER_SIDE_BINDING": "0"}
    )
    assert on["DATABASES"]["default"]["OPTIONS"]["server_side_binding"] is True
    assert on["DATABASES"]["default"]["OPTIONS"]["prepare_threshold"] == 2
    assert "server_side_binding" not in off["DATABASES"]["default"]["OPTIONS"]
    assert "prepare_threshold" not in off["DATABASES"]["default"]["OPTIONS"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AGENT_TASK_BACKEND": "rq"}, "AGENT_TASK_BACKEND must be one of db, celery, not 'rq'."),
        (
            {"AGENT_TASK_BACKEND": "celery"},
            "AGENT_TASK_BACKEND=celery needs CELERY_BROKER_URL (amqp://… or redis://…).",
        ),
    ],
    ids=["unknown backend", "celery without a broker"],
)
def test_a_task_backend_that_cannot_work_stops_every_process_at_start(env, message):
    proc = manage("check", env=clean_env(DEBUG="1", **env))
    assert proc.returncode != 0
    assert message in proc.stderr


def test_the_celery_backend_with_a_broker_passes_the_checks():
    env = clean_env(DEBUG="1", AGENT_TASK_BACKEND="celery", CELERY_BROKER_URL="redis://127.0.0.1:6379/2")
    code = (
        "from django.tasks import task_backends\n"
        "from reactsite.celery import app\n"
        "print(type(task_backends['default']).__name__, app.conf.task_acks_late, app.conf.broker_heartbeat,\n"
        "      app.conf.task_default_queue, app.conf.worker_prefetch_multiplier)\n"
    )
    done = run_py(code, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["CeleryBackend", "True", "0", "reactsite", "1"]
    assert manage("check", env=env).returncode == 0
