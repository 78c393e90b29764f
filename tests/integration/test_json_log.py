"""The server's log is JSON only (issue 34): what `make run` prints once it serves — gunicorn's own lines, Django's
(`Bad Request: …`, `Not Found: …`, which Django's default handler printed as plain text under DEBUG) and the worker's
— is one JSON object a line, with DEBUG on as `make run` has it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.integration._support import MANAGE, PYTHON, ROOT, app_env, quick_user, token_key, wait_healthy
from tests.integration.conftest import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def not_json(text: str) -> list[str]:
    """The lines that are not one JSON object each."""
    wrong = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if not ok:
            wrong.append(line)
    return wrong


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def serve(env: dict[str, str], logs: Path) -> tuple[str, subprocess.Popen, Path]:
    port = free_port()
    cmd = [
        str(Path(sys.executable).parent / "gunicorn"), "-c", "gunicorn.conf.py", "--workers", "1",
        "--bind", f"127.0.0.1:{port}", "--no-control-socket", "reactsite.wsgi",
    ]  # fmt: skip
    log = logs / "gunicorn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, log)
    return url, proc, log


def test_the_servers_and_the_workers_log_is_json_only_with_debug_on(tmp_path):
    key = token_key(quick_user("logan"))
    env = app_env(LOG_LEVEL="INFO")
    assert env["DEBUG"] == "1"
    url, server, log = serve(env, tmp_path)
    try:
        auth = {"Authorization": f"Token {key}"}
        answers = [
            requests.post(f"{url}/api/v1/runs", json={"input": 5}, headers=auth, timeout=30).status_code,
            requests.get(f"{url}/api/v1/nope", timeout=30).status_code,
            requests.get(f"{url}/api/v1/runs", timeout=30).status_code,
            requests.get(f"{url}/no-such-page/", timeout=30).status_code,
            requests.post(f"{url}/api/v1/runs", json={"input": "What is 2+2?", "mode": "background"}, headers=auth,
                          timeout=30).status_code,
        ]  # fmt: skip
        assert answers == [400, 404, 401, 404, 202]
    finally:
        server.terminate()
        server.wait(timeout=30)
    worker = subprocess.run(
        [PYTHON, MANAGE, "run_worker", "--batch", "--interval", "0.05"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    served = log.read_text(errors="replace")
    assert not not_json(served), not_json(served)[:10]
    assert not not_json(worker.stdout + worker.stderr), not_json(worker.stdout + worker.stderr)[:10]
    assert worker.returncode == 0, worker.stderr[-3000:]
    messages = {(r["name"], r["message"]) for r in records(served)}
    assert ("django.request", "Bad Request: /api/v1/runs") in messages
    assert ("django.request", "Not Found: /api/v1/nope") in messages
    assert any(name == "gunicorn.error" and m.startswith("Booting worker") for name, m in messages), messages
    tasks = [r for r in records(worker.stderr) if r["name"].startswith("django.tasks")]
    assert tasks, worker.stderr[-3000:]  # the background run's task, done by the worker, in JSON
