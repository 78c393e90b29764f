"""Prometheus metrics at /metrics (AGENT_METRICS): what runs, model calls, tool calls, approvals, the queue and event
streams show, the switch and the token, and the total of several gunicorn workers (multiprocess mode)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from agents import periodic
from agents.engine import ModelError
from agents.runs import signals, telemetry
from reactsite.observability import metrics
from tests.api.conftest import RUNS, create_run
from tests.integration._support import ROOT, app_env, clean_env, quick_user, run_py, stop, token_key, wait_healthy

METRICS = "/metrics"


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """What a commit sets off (run_done) happens: the test's transaction never commits."""
    return django_capture_on_commit_callbacks


@pytest.fixture
def metrics_on(settings, tmp_path, monkeypatch):
    """Metrics on as agents/apps.py turns them on, in a directory of this test's own; all undone after it."""
    directory = str(tmp_path / "metrics")
    settings.AGENT_METRICS, settings.AGENT_METRICS_TOKEN, settings.AGENT_METRICS_DIR = True, "", directory
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", directory)  # install() sets it; put back after the test
    observer = metrics.install(directory)
    telemetry.add_observer(observer)
    signals.run_done.connect(observer.run_done, dispatch_uid="tests.metrics.run_done")
    periodic.observe(observer.sweep_done)
    try:
        yield directory
    finally:
        periodic.unobserve(observer.sweep_done)
        signals.run_done.disconnect(dispatch_uid="tests.metrics.run_done")
        telemetry.remove_observer(observer)
        metrics.uninstall()
        shutil.rmtree(directory, ignore_errors=True)


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def scrape(client=None, **headers) -> list[tuple[str, dict[str, str], float]]:
    response = (client or Client()).get(METRICS, **headers)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain")
    return parse(response.content.decode())


def value(samples, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when there is none)."""
    return sum(v for n, lab, v in samples if n == name and labels.items() <= lab.items())


def test_a_sync_run_shows_its_run_its_model_calls_with_tokens_and_its_tool_calls(api, metrics_on, committed):
    with committed(execute=True):  # run_done is sent after the commit
        run = create_run(api).json()
    assert (run["status"], run["output"], run["turns"]) == ("done", "85", 3)

    samples = scrape()

    assert value(samples, "reactsite_runs_created_total", mode="sync") == 1
    assert value(samples, "reactsite_runs_finished_total", stop_reason="final_answer", ok="true") == 1
    assert value(samples, "reactsite_runs_finished_total") == 1
    model = {"provider": "demo", "model": run["model"]}
    assert value(samples, "reactsite_model_call_duration_seconds_count", **model) == 3
    assert value(samples, "reactsite_model_call_duration_seconds_bucket", le="+Inf", **model) == 3
    assert value(samples, "reactsite_model_call_duration_seconds_sum", **model) > 0
    assert value(samples, "reactsite_model_call_errors_total") == 0
    usage = run["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert value(samples, "reactsite_model_tokens_total", kind="input", **model) == usage["prompt_tokens"]
    assert value(samples, "reactsite_model_tokens_total", kind="output", **model) == usage["completion_tokens"]
    assert value(samples, "reactsite_tool_call_duration_seconds_count", tool="calculator") == 2
    assert value(samples, "reactsite_tool_call_errors_total") == 0
    assert value(samples, "reactsite_runs_in_flight") == 0  # driven and handed back
    in_flight = [lab for n, lab, _ in samples if n == "reactsite_runs_in_flight"]
    assert in_flight == [{"pid": str(os.getpid())}]  # per process


def test_runs_in_flight_counts_a_run_while_it_is_driven(api, metrics_on, monkeypatch):
    from agents.providers.demo import DemoProvider

    seen: list[float] = []
    complete = DemoProvider.complete

    def looking(self, request):
        seen.append(value(scrape(), "reactsite_runs_in_flight"))
        return complete(self, request)

    monkeypatch.setattr(DemoProvider, "complete", looking)
    create_run(api)

    assert seen == [1, 1, 1]
    assert value(scrape(), "reactsite_runs_in_flight") == 0


def test_a_failing_tool_and_a_failing_model_call_are_counted_as_errors(api, metrics_on, monkeypatch, committed):
    with committed(execute=True):
        create_run(api, "What is 1/0?")  # the calculator raises: the model is told, the run goes on
    samples = scrape()
    assert value(samples, "reactsite_tool_call_errors_total", tool="calculator") == 1
    assert value(samples, "reactsite_tool_call_duration_seconds_count", tool="calculator") == 1

    from agents.providers.demo import DemoProvider

    def fails(self, request):
        raise ModelError("the provider is down")

    monkeypatch.setattr(DemoProvider, "complete", fails)
    with committed(execute=True):
        run = create_run(api).json()
    assert (run["status"], run["stop_reason"]) == ("done", "model_error")

    samples = scrape()
    model = {"provider": "demo", "model": run["model"]}
    assert value(samples, "reactsite_model_call_errors_total", error="ModelError", **model) == 1
    assert value(samples, "reactsite_runs_finished_total", stop_reason="model_error", ok="false") == 1
    assert value(samples, "reactsite_runs_finished_total") == 2


def test_a_paused_run_is_an_approval_waiting(api, metrics_on):
    assert value(scrape(), "reactsite_approvals_waiting") == 0

    run = create_run(api, "search django").json()  # search is sensitive: the run waits for a decision
    assert run["status"] == "awaiting_approval"

    samples = scrape()
    assert value(samples, "reactsite_approvals_waiting") == 1
    assert value(samples, "reactsite_runs_finished_total") == 0


def test_a_queued_background_run_is_in_the_queue_depth(api, metrics_on):
    assert value(scrape(), "reactsite_queue_ready_tasks") == 0

    response = create_run(api, mode="background")
    assert response.status_code == 202

    samples = scrape()
    assert value(samples, "reactsite_queue_ready_tasks") == 1
    assert value(samples, "reactsite_runs_created_total", mode="background") == 1


def test_an_open_event_stream_counts_until_it_ends(api, metrics_on):
    run = create_run(api).json()
    assert value(scrape(), "reactsite_event_streams_open") == 0

    response = api.get(f"{RUNS}/{run['id']}/events", HTTP_ACCEPT="text/event-stream")
    frames = iter(response.streaming_content)
    first = next(frames)  # the stream is open, between two frames
    assert b"event: step" in first

    assert value(scrape(), "reactsite_event_streams_open") == 1
    rest = b"".join(frames)  # the run is done: the stream ends
    assert b"event: done" in rest
    assert value(scrape(), "reactsite_event_streams_open") == 0


def test_off_metrics_is_the_404_of_an_unknown_address_and_nothing_is_observed(db, settings):
    settings.AGENT_METRICS = False
    client = Client()

    unknown = client.get("/no-such-page")
    for response in (client.get(METRICS), client.get(METRICS + "/"), client.post(METRICS)):
        assert response.status_code == unknown.status_code == 404
        assert response["Content-Type"] == unknown["Content-Type"]
    assert not any(isinstance(o, metrics.Observer) for o in telemetry._observers)  # this process started with it off


def test_with_a_token_a_scrape_needs_it_as_a_bearer_token(db, metrics_on, settings):
    settings.AGENT_METRICS_TOKEN = "s3cret-metrics-token"
    client = Client()

    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": "Token s3cret-metrics-token"}):
        response = client.get(METRICS, **headers)
        assert response.status_code == 401, headers
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"reactsite_" not in response.content

    samples = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert value(samples, "reactsite_approvals_waiting") == 0
    assert any(n == "reactsite_runs_in_flight" for n, _, _ in samples)


def test_a_process_gone_keeps_its_counts_but_not_its_runs_in_flight(db, metrics_on):
    """A run_worker that died driving 5 runs: its count stays in the total, its runs in flight go at the next scrape."""
    code = (
        "import os, sys; os.environ['PROMETHEUS_MULTIPROC_DIR'] = sys.argv[1]\n"
        "from prometheus_client import Counter, Gauge\n"
        "Counter('reactsite_runs_created', 'x', ['mode'], registry=None).labels('background').inc(7)\n"
        "Gauge('reactsite_runs_in_flight', 'x', registry=None, multiprocess_mode='liveall').set(5)\n"
        "print(os.getpid())\n"
    )
    done = subprocess.run([sys.executable, "-c", code, metrics_on], capture_output=True, text=True, check=True)
    gone = done.stdout.strip()

    samples = scrape()

    assert value(samples, "reactsite_runs_created_total", mode="background") == 7
    assert [lab["pid"] for n, lab, _ in samples if n == "reactsite_runs_in_flight"] == [str(os.getpid())]
    assert not (Path(metrics_on) / f"gauge_liveall_{gone}.db").exists()
    assert (Path(metrics_on) / f"counter_{gone}.db").exists()


def test_metrics_is_not_in_the_openapi_document(api, metrics_on):
    paths = api.get("/api/v1/schema.json").json()["paths"]
    assert "/api/v1/runs/" in paths
    assert not [p for p in paths if "metrics" in p]


def test_a_post_is_not_allowed(db, metrics_on):
    assert Client().post(METRICS).status_code == 405


def test_prometheus_asking_for_openmetrics_gets_it(api, metrics_on):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    create_run(api, mode="background")
    accept = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    response = Client().get(METRICS, HTTP_ACCEPT=accept)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    families = {f.name: f for f in openmetrics_families(response.content.decode())}  # ends with "# EOF" or raises
    assert families["reactsite_runs_created"].type == "counter"
    assert [s.value for s in families["reactsite_runs_created"].samples] == [1]
    assert [s.value for s in families["reactsite_queue_ready_tasks"].samples] == [1]


@pytest.mark.parametrize("on", [False, True])
def test_the_app_registers_the_observer_only_with_metrics_on(tmp_path, on):
    """What agents/apps.py does when the app is ready, in a process of its own: off, prometheus_client is not even
    imported."""
    directory = tmp_path / "metrics"
    code = (
        "import sys\n"
        "from agents.runs import signals, telemetry\n"
        "import reactsite.urls\n"
        "names = sorted(type(o).__module__ + '.' + type(o).__name__ for o in telemetry._observers)\n"
        "told = any(key[0] == 'reactsite.metrics.run_done' for key, *_ in signals.run_done.receivers)\n"
        "print(names, 'prometheus_client' in sys.modules, told)\n"
    )
    env = clean_env(DEBUG="1", PROMETHEUS_MULTIPROC_DIR=str(directory), **({"AGENT_METRICS": "1"} if on else {}))
    done = run_py(code, env)

    assert done.returncode == 0, done.stderr[-2000:]
    observers, imported, told = done.stdout.strip().rsplit(" ", 2)
    if on:
        assert "'reactsite.observability.metrics.Observer'" in observers
        assert (imported, told) == ("True", "True")
        # the gauges', and the unlabelled counter of the workers' claims (at 0): nothing counted yet
        assert directory.is_dir() and {p.name.split("_")[0] for p in directory.iterdir()} == {"gauge", "counter"}
    else:
        assert "metrics" not in observers
        assert (imported, told) == ("False", "False")
        assert not directory.exists()


# --- several processes: gunicorn with two workers ---------------------------------------------------------------


def _stale_counter(directory: Path) -> int:
    """A counter file of a process that is gone (100 sync runs), as a gunicorn stopped earlier leaves: the pid."""
    code = (
        "import os, sys; os.environ['PROMETHEUS_MULTIPROC_DIR'] = sys.argv[1]\n"
        "from prometheus_client import Counter\n"
        "Counter('reactsite_runs_created', 'x', ['mode'], registry=None).labels('sync').inc(100)\n"
        "print(os.getpid())\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True, check=True)
    pid = int(done.stdout)
    assert (directory / f"counter_{pid}.db").exists()
    return pid


def _gauge_pids(directory: Path) -> set[str]:
    """The processes with a gauge of runs in flight: each live one, from when it loaded the app."""
    return {path.stem.rsplit("_", 1)[1] for path in directory.glob("gauge_liveall_*.db")}


def _runs_by_worker(directory: Path) -> dict[str, float]:
    """Runs created per process, read from each process's own counter file."""
    from prometheus_client.multiprocess import MultiProcessCollector

    found = {}
    for path in directory.glob("counter_*.db"):
        for family in MultiProcessCollector.merge([str(path)]):
            total = sum(s.value for s in family.samples if s.name == "reactsite_runs_created_total")
            if total:
                found[path.stem.rsplit("_", 1)[1]] = total
    return found


@pytest.mark.django_db(transaction=True)
def test_gunicorn_workers_report_the_total_of_all_their_runs(tmp_path):
    directory = tmp_path / "metrics"
    directory.mkdir()
    stale = _stale_counter(directory)
    token = token_key(quick_user("metrics-mp"))
    env = app_env(
        AGENT_METRICS="1",
        AGENT_METRICS_TOKEN="mp-token",
        PROMETHEUS_MULTIPROC_DIR=str(directory),
        AGENT_RATE_LIMIT="100000/m",
        LOG_LEVEL="WARNING",
    )
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "gunicorn.log"
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    command = [gunicorn, "-c", "gunicorn.conf.py", "--workers", "2", "--bind", f"127.0.0.1:{port}", "reactsite.wsgi"]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        wait_healthy(url, proc, log)
        assert not (directory / f"counter_{stale}.db").exists()  # on_starting: the files of processes gone, gone

        posted = _post_runs_until_both_workers_served(url, token, directory)

        auth = {"Authorization": "Bearer mp-token"}
        pids_seen = set()
        for _ in range(8):  # new connections: either worker answers
            response = requests.get(url + METRICS, headers=auth, timeout=10)
            assert response.status_code == 200
            samples = parse(response.text)
            assert value(samples, "reactsite_runs_created_total", mode="sync") == posted
            assert value(samples, "reactsite_runs_finished_total", stop_reason="final_answer") == posted
            assert value(samples, "reactsite_tool_call_duration_seconds_count", tool="calculator") == 2 * posted
            assert value(samples, "reactsite_model_call_duration_seconds_count") == 3 * posted
            pids_seen |= {lab["pid"] for n, lab, _ in samples if n == "reactsite_runs_in_flight"}
        workers = set(_runs_by_worker(directory))
        assert len(workers) == 2 and workers <= pids_seen

        # A worker killed: its runs still count; its gauge of runs in flight goes (child_exit), its successor's comes
        # once that one has loaded the app (and so can be stopped: a SIGTERM before that is lost, gunicorn's own race).
        gone = sorted(workers)[0]
        os.kill(int(gone), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (gone in _gauge_pids(directory) or not _gauge_pids(directory) - workers):
            time.sleep(0.1)
        assert gone not in _gauge_pids(directory)
        successor = _gauge_pids(directory) - workers
        assert len(successor) == 1
        samples = parse(requests.get(url + METRICS, headers=auth, timeout=10).text)
        assert value(samples, "reactsite_runs_created_total", mode="sync") == posted
        in_flight = {lab["pid"] for n, lab, _ in samples if n == "reactsite_runs_in_flight"}
        assert in_flight == (workers - {gone}) | successor
    finally:
        stop(proc)


def _post_runs_until_both_workers_served(url: str, token: str, directory: Path) -> int:
    """Sync runs, 4 at a time, until each of the two workers has served some (at most 60): how many were posted."""
    headers = {"Authorization": f"Token {token}"}
    posted = 0
    while posted < 60:
        codes: list[int] = []
        threads = [threading.Thread(target=_post_run, args=(url, headers, codes)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert codes == [201] * 4
        posted += 4
        if len(_runs_by_worker(directory)) == 2:
            return posted
    pytest.fail("60 runs all landed on one worker")


def _post_run(url: str, headers: dict[str, str], codes: list[int]) -> None:
    body = {"input": "What is 12*7, plus 1?", "provider": "demo"}
    codes.append(requests.post(url + "/api/v1/runs", json=body, headers=headers, timeout=30).status_code)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
