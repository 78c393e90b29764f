"""/metrics of a worker-only machine: its own port, the web's token rule, the workers' own metrics."""

from __future__ import annotations

import pytest
import requests
from django.core.management import call_command
from django.core.management.base import CommandError

from agents import periodic
from agents.background import metrics_server
from agents.runs import telemetry
from tests.observability.test_metrics import metrics_on, parse, value  # noqa: F401  (metrics_on: a fixture)


@pytest.fixture
def served(metrics_on):  # noqa: F811
    server = metrics_server.start("127.0.0.1", 0)
    assert server is not None
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        metrics_server.stop()


@pytest.mark.django_db(transaction=True)
def test_a_worker_serves_the_queue_its_claims_sweeps_and_task_latency(served):
    telemetry.tasks_claimed(3)
    with telemetry.task("agents.tasks.advance_in_background", 0.25):
        pass
    with telemetry.task("agents.tasks.advance_in_background", 1.5) as record:
        record.is_error = True
    periodic.run(periodic.get("approvals"))

    response = requests.get(served + "/metrics", timeout=5)
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/plain")
    samples = parse(response.text)
    assert value(samples, "reactsite_worker_claims_total") == 3
    assert value(samples, "reactsite_sweeps_total", sweep="approvals", outcome="ok") == 1
    task = {"task": "advance_in_background"}
    assert value(samples, "reactsite_task_queue_wait_seconds_count", **task) == 2
    assert value(samples, "reactsite_task_queue_wait_seconds_sum", **task) == 1.75
    assert value(samples, "reactsite_task_duration_seconds_count", **task, outcome="ok") == 1
    assert value(samples, "reactsite_task_duration_seconds_count", **task, outcome="error") == 1
    assert value(samples, "reactsite_queue_ready_tasks") == 0  # read from the database at the scrape


@pytest.mark.django_db(transaction=True)
def test_a_failed_sweep_is_counted_as_an_error(served):
    def broken():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        periodic.run(periodic.Sweep("broken", broken, float))
    samples = parse(requests.get(served + "/metrics", timeout=5).text)
    assert value(samples, "reactsite_sweeps_total", sweep="broken", outcome="error") == 1


@pytest.mark.django_db(transaction=True)
def test_the_token_rule_is_the_webs(served, settings):
    settings.AGENT_METRICS_TOKEN = "s3cret-metrics"
    refused = requests.get(served + "/metrics", timeout=5)
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert requests.get(served + "/metrics", headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401
    ok = requests.get(served + "/metrics", headers={"Authorization": "Bearer s3cret-metrics"}, timeout=5)
    assert ok.status_code == 200 and "reactsite_worker_claims_total" in ok.text


@pytest.mark.django_db(transaction=True)
def test_only_get_or_head_of_metrics_is_served(served):
    assert requests.get(served + "/", timeout=5).status_code == 404
    assert requests.get(served + "/api/v1/runs", timeout=5).status_code == 404
    post = requests.post(served + "/metrics", timeout=5)
    assert post.status_code == 405 and post.headers["Allow"] == "GET, HEAD"
    head = requests.head(served + "/metrics", timeout=5)
    assert head.status_code == 200 and head.content == b"" and int(head.headers["Content-Length"]) > 0


def test_a_port_taken_is_logged_and_serves_nothing(served, caplog):
    port = int(served.rsplit(":", 1)[1])
    assert metrics_server.start("127.0.0.1", port) is None
    assert any("not served" in r.getMessage() for r in caplog.records)


def test_the_port_setting_needs_metrics_on(settings):
    settings.AGENT_METRICS, settings.AGENT_WORKER_METRICS_PORT = False, 9464
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="needs AGENT_METRICS=1"):
        metrics_server.start_from_settings()
    settings.AGENT_WORKER_METRICS_PORT = 0
    assert metrics_server.start_from_settings() is None


@pytest.mark.parametrize(
    ("settings_of", "args", "message"),
    [
        ({"AGENT_TASK_BACKEND": "celery"}, [], "start `celery -A reactsite worker`"),
        ({"AGENT_METRICS": False}, ["--metrics-port", "9464"], "needs AGENT_METRICS=1"),
        ({"AGENT_METRICS": True}, ["--metrics-port", "70000"], "between 0 and 65535"),
    ],
    ids=["celery backend", "metrics off", "port out of range"],
)
def test_run_worker_refuses_what_it_cannot_do(settings, monkeypatch, settings_of, args, message):
    for name, setting in settings_of.items():
        setattr(settings, name, setting)
    monkeypatch.setattr("reactsite.serving.green.patched", lambda: True)
    with pytest.raises(CommandError, match=message):
        call_command("run_worker", *args)
