"""A process builds what its first runs need before it serves (agents/runs/runtime.py `warm`): importing an SDK or
building the look-alike table during a first call would stall every run in flight in a gevent process for up to ~2 s."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from types import SimpleNamespace

import pytest

from agents import providers
from agents.runs import runtime
from tests.integration._support import ROOT, clean_env

WARM = """
import json, sys, django
django.setup()
from agents.runs import runtime
from agents.engine import wrapping
before = {m: m in sys.modules for m in ("openai", "anthropic")} | {"table": wrapping._folding.cache_info().currsize}
runtime.warm()
after = {m: m in sys.modules for m in ("openai", "anthropic")} | {"table": wrapping._folding.cache_info().currsize}
print(json.dumps([before, after]))
"""


def warm_in_a_fresh_process(**env: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", WARM],
        cwd=ROOT,
        env=clean_env(DJANGO_SETTINGS_MODULE="reactsite.settings", DEBUG="1", **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_warm_imports_the_sdks_of_the_providers_that_have_a_key_and_builds_the_table():
    before, after = warm_in_a_fresh_process(OPENAI_API_KEY="sk-test-only")
    assert before == {"openai": False, "anthropic": False, "table": 0}  # nothing is built at start-up by itself
    assert after == {"openai": True, "anthropic": False, "table": 1}  # no key for anthropic: its SDK stays out


def test_a_provider_that_is_not_allowed_is_not_imported():
    _, after = warm_in_a_fresh_process(ANTHROPIC_API_KEY="sk-test-only", AGENT_ALLOWED_PROVIDERS="demo,openai")
    assert after["anthropic"] is False and after["openai"] is False


def test_the_key_settings_are_the_providers_own():
    for name in providers.PROVIDERS:
        cls = providers.provider_class(name)
        assert providers.KEY_SETTINGS.get(name) == (getattr(cls, "key_setting", "") or None), name


def test_warm_names_what_it_imported(settings):
    settings.AGENT_ALLOWED_PROVIDERS = ["demo", "openai", "xai"]
    settings.OPENAI_API_KEY, settings.XAI_API_KEY = "sk-test-only", ""
    assert providers.warm() == ["demo", "openai"]


def test_a_provider_that_fails_to_import_is_logged_and_the_others_are_warmed(settings, monkeypatch, caplog):
    monkeypatch.setitem(providers.PROVIDERS, "broken", "agents.providers.no_such_module:Nothing")
    settings.AGENT_ALLOWED_PROVIDERS = ["broken", "demo"]
    with caplog.at_level("WARNING", logger="agents.providers"):
        assert providers.warm() == ["demo"]
    assert "provider broken could not be imported" in caplog.text


@pytest.mark.parametrize("worker_class", ["reactsite.serving.gunicorn_worker.GeventWorker", "gthread"])
def test_gunicorns_workers_warm_before_they_serve(monkeypatch, worker_class):
    calls = []
    monkeypatch.setattr(runtime, "warm", lambda: calls.append("warm"))
    monkeypatch.setattr("signal.signal", lambda *args: None)  # the gevent branch's SIGTERM handler: not in pytest
    monkeypatch.setattr("reactsite.serving.heap.install", lambda: calls.append("heap"))
    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    conf["post_worker_init"](SimpleNamespace(cfg=SimpleNamespace(worker_class_str=worker_class)))
    assert calls == ["warm", "heap"]  # warmed first, so the heap's first freeze keeps what it built


def test_run_worker_warms_before_it_takes_work(monkeypatch):
    from django.core.management import call_command

    from agents.background.worker import ConcurrentWorker

    calls = []
    monkeypatch.setattr("reactsite.serving.green.patched", lambda: True)
    monkeypatch.setattr(runtime, "warm", lambda: calls.append("warm"))
    monkeypatch.setattr(ConcurrentWorker, "configure_signals", lambda self: None)
    monkeypatch.setattr(ConcurrentWorker, "run", lambda self: calls.append("run"))
    call_command("run_worker", "--batch")
    assert calls == ["warm", "run"]


def test_warm_up_off_builds_nothing():
    _, after = warm_in_a_fresh_process(OPENAI_API_KEY="sk-test-only", AGENT_WARM_UP="0")
    assert after == {"openai": False, "anthropic": False, "table": 0}
