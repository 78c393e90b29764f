"""gunicorn settings. Agent runs spend nearly all their life waiting on a model, so:

- worker_class gevent (default): a waiting run is a parked greenlet, not an OS thread (`GUNICORN_WORKER_CLASS=gthread`
  brings back threads: WEB_CONCURRENCY × GUNICORN_THREADS at once); either is gunicorn's own worker with its error
  pages in JSON (reactsite/serving/gunicorn_worker.py). gunicorn patches the standard library before loading the app,
  so the SDKs' sockets, psycopg 3 and redis-py yield while they wait.
- timeout: longer than the largest run budget, so gunicorn never kills a sync run inside its own deadline.
  Model calls are bounded by the run's deadline (each call's timeout × attempts is capped by what remains).
"""

import os

bind = os.environ.get("GUNICORN_BIND", f"127.0.0.1:{os.environ.get('PORT', '8000')}")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))  # one per core: a greenlet worker is CPU-bound, not I/O-bound
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gevent")
if worker_class == "gevent":  # gunicorn's, its own errors in JSON like the API's
    worker_class = "reactsite.serving.gunicorn_worker.GeventWorker"
elif worker_class == "gthread":  # gunicorn's, its own errors in JSON like the API's
    worker_class = "reactsite.serving.gunicorn_worker.ThreadWorker"
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "1000"))  # runs in flight per gevent worker
threads = int(os.environ.get("GUNICORN_THREADS", "4"))  # gthread only
timeout = 660  # > the largest timeout_s (600 s) plus a margin for committing the last step
graceful_timeout = 30
keepalive = 5
# No plain-text access line: the app logs each request as one JSON line with its request id (LOG_REQUESTS, settings).
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None  # "-" brings gunicorn's own line back (to stdout)
errorlog = "-"
logger_class = "reactsite.serving.gunicorn_log.JsonLogger"  # gunicorn's own lines in JSON, like the app's
# gunicorn 27 puts every instance's control socket at one per-user path, so a second gunicorn on the host (the
# benchmark, the tests, another checkout) would take it over and delete it on exit. We don't use gunicornc.
control_socket_disable = True


def on_starting(server) -> None:
    """Metrics on (AGENT_METRICS): the workers are told the metrics directory, and the files there of processes no
    longer running go (their counters start again from zero, as after any restart): reactsite/observability/metrics.py.
    The master asks a short child process, as it loads nothing of the app itself (a gevent worker must import the
    database drivers after its monkey-patching, not inherit them)."""
    import subprocess
    import sys

    code = "from reactsite import settings as s; print(s.AGENT_METRICS_DIR if s.AGENT_METRICS else '')"
    try:
        asked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):  # settings that fail to load: the workers will say why
        return
    directory = asked.stdout.strip()
    if directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        from reactsite.observability import metrics

        metrics.drop_dead(directory)


def child_exit(server, worker) -> None:
    """A worker gone: its gauges of work in progress (runs in flight, streams open) no longer count."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def worker_exit(server, worker) -> None:
    """A worker stopping (a deploy, or past graceful_timeout) hands the runs it still held back to the queue at once."""
    try:
        from agents.runs import recovery

        recovery.hand_back_all()
    except Exception as exc:  # noqa: BLE001 - never block a shutdown; the orphan sweep catches these runs anyway
        server.log.warning("could not hand runs back: %s", exc)
    try:
        from django.conf import settings

        if settings.AGENT_OTEL_TRACES:  # the last spans sent now: at interpreter exit gevent can no longer send them
            from reactsite.observability import tracing

            tracing.flush()
    except Exception as exc:  # noqa: BLE001 - never block a shutdown for a trace
        server.log.warning("could not send the last spans: %s", exc)


def post_worker_init(worker) -> None:
    """What the first runs would build is built first (agents/runs/runtime.py `warm`), and the garbage collector is set
    for a long-lived process (reactsite/serving/heap.py). On SIGTERM a gevent worker hands its runs in flight back to
    the queue at once instead of holding them through the graceful period: each run's greenlet is interrupted and
    releases and re-queues its run."""
    import signal

    from agents.runs import runtime
    from reactsite.serving import heap

    runtime.warm()  # the SDKs and tables its first requests would otherwise build while every other request waits
    heap.install()  # the garbage collector set for a long-lived process (reactsite/serving/heap.py)
    if "gevent" not in worker.cfg.worker_class_str.lower():  # "gevent", ours, or gunicorn's class by its path
        return
    stop = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame) -> None:
        import gevent

        from agents.runs import leases

        gevent.spawn(leases.stop_all)
        if callable(stop):
            stop(signum, frame)

    signal.signal(signal.SIGTERM, on_term)
