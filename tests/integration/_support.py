"""Helpers shared by the integration and CLI tests: subprocess environments, the test database's URL, threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from tests.providers.stub_llm import OPENAI_PATH, openai_text

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
MANAGE = str(ROOT / "manage.py")
# Variables the settings read: a subprocess gets only the ones a test gives it, never the caller's by accident.
_OWN_VARS = (
    "DATABASE_URL",
    "REDIS_URL",
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DJANGO_SETTINGS_MODULE",
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "TAVILY_API_KEY",
    "HF_TOKEN",
    "WEB_CONCURRENCY",
    "GUNICORN_BIND",
    "PORT",
    "LOG_LEVEL",
    "ADMIN_PASSWORD",
    "CORS_ALLOWED_ORIGINS",
    "DATA_UPLOAD_MAX_MEMORY_SIZE",
    "REACTSITE_ENV_FILE",
)
_OWN_PREFIXES = (
    "AGENT_", "OPENAI_", "ANTHROPIC_", "XAI_", "OPENROUTER_", "HF_", "DUCKDUCKGO_", "TAVILY_", "SEARCH_", "SECURE_",
    "GUNICORN_", "DB_POOL", "CONN_MAX_AGE",
)  # fmt: skip


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without any setting of ours, plus `extra` (loopback never through a proxy)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _OWN_VARS and not k.startswith(_OWN_PREFIXES) and k != "PYTEST_CURRENT_TEST"
    }
    env |= {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"}
    env["REACTSITE_ENV_FILE"] = ""  # the developer's .env (DEBUG=1, a dev key) must not leak into what a test loads
    env["AGENT_DEMO_WORD_PAUSE_S"] = "0"  # the demo model writes at once (a test that wants the pause sets it)
    env |= {k: str(v) for k, v in extra.items()}
    return env


def db_url() -> str:
    """A DATABASE_URL naming the database this test uses (the test database, not the development one)."""
    from django.db import connection

    conf = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///" + str(Path(conf["NAME"]).resolve())
    if connection.vendor == "postgresql":
        auth = quote(conf["USER"] or "", safe="")
        if conf.get("PASSWORD"):
            auth += ":" + quote(conf["PASSWORD"], safe="")
        host = conf.get("HOST") or "127.0.0.1"
        port = conf.get("PORT") or 5432
        return f"postgres://{auth}@{host}:{port}/{conf['NAME']}"
    raise AssertionError(f"no URL for the {connection.vendor} backend")


def app_env(**extra: str) -> dict[str, str]:
    """The environment of a process that shares this test's database and cache."""
    # AGENT_WARM_UP off: each server or worker process a test starts is a second of CPU faster to start (warming is
    # tested on its own: tests/integration/test_warm.py); a test that needs it warm passes AGENT_WARM_UP="1".
    # On PostgreSQL, small pools (1 to 5 connections a process): the suite's processes share the server's 100 with
    # the test processes, and a run hands its connection back during each model call anyway; a test that needs more
    # passes its own DB_POOL_MIN_SIZE / DB_POOL_MAX_SIZE.
    env = {
        "DEBUG": "1",
        "DATABASE_URL": db_url(),
        "AGENT_WARM_UP": "0",
        "DB_POOL_MIN_SIZE": "1",
        "DB_POOL_MAX_SIZE": "5",
    }
    if os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = os.environ["REDIS_URL"]
    return clean_env(**(env | extra))


def run_py(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -c code` in the project directory, after django.setup()."""
    script = "import django, os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'reactsite.settings')\n"
    script += "django.setup()\n" + code
    return subprocess.run(
        [PYTHON, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def manage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python manage.py …` in the project directory."""
    return subprocess.run(
        [PYTHON, MANAGE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def in_threads(n: int, target: Callable[[int], Any], timeout: float = 60) -> list[Any]:
    """Run target(i) in n threads released at once; return each result or the exception it raised.

    Each thread closes its own database connection when it ends.
    """
    from django.db import connection

    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def body(i: int) -> None:
        try:
            barrier.wait(timeout=timeout)
            results[i] = target(i)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a worker thread did not finish"
    return results


def window_left(user_pk: int, period: int = 60) -> float:
    """Seconds until the last second of this user's rate-limit window (agents.usage.ratelimit.window_end - 1)."""
    now = time.time()
    ts = int(now)
    edge = ts - (ts % period) + (zlib.crc32(str(user_pk).encode()) % period)
    if edge < ts:
        edge += period
    return edge - now


def quick_user(username: str, **fields: Any):
    """A user with no usable password (no slow password hashing): the tests authenticate with API tokens."""
    from django.contrib.auth.models import User

    return User.objects.create_user(username, **fields)


def token_key(user) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=user)[0].key


def user_far_from_window_edge(prefix: str, min_left: float = 20.0):
    """A new user whose rate-limit window has at least `min_left` seconds to run (a burst never straddles two)."""
    for n in range(20):
        user = quick_user(f"{prefix}{n}")
        if window_left(user.pk) >= min_left:
            return user
    raise AssertionError("no user with a rate-limit window far enough from its edge")


class Barrier:
    """Stub model replies held until `wanted` calls wait at once, then until `release` is set (each wait at most
    `wait_s`, so a failing test still ends)."""

    def __init__(self, stub, wanted: int, wait_s: float = 20) -> None:
        self.wanted, self.arrived, self.lock = wanted, 0, threading.Lock()
        self.everyone, self.release = threading.Event(), threading.Event()
        payload = json.dumps(openai_text("done")).encode()

        def handler(_request):
            with self.lock:
                self.arrived += 1
                if self.arrived >= self.wanted:
                    self.everyone.set()
            self.everyone.wait(wait_s)
            self.release.wait(wait_s)
            return 200, {"Content-Type": "application/json"}, payload

        stub.add("POST", OPENAI_PATH, handler=handler, repeat=True)


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, limit_s: float = 20.0) -> None:
    """Wait until a server started by a test answers its health route 200; fail with its log's end if it exits
    or stays unhealthy."""
    deadline = time.monotonic() + limit_s
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"gunicorn exited with {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            resp = requests.get(url + "/api/v1/health", timeout=2)
            if resp.status_code == 200:
                return
            last = f"{resp.status_code} {resp.text[:300]}"
        except requests.RequestException as exc:
            last = type(exc).__name__
        time.sleep(0.1)
    pytest.fail(f"gunicorn not healthy after {limit_s:g} s ({last}):\n{log.read_text(errors='replace')[-4000:]}")


def stop(proc: subprocess.Popen) -> None:
    """Stop a server a test started: SIGTERM, then SIGKILL after 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
