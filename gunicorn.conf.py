"""gunicorn settings. A sync run holds its worker for up to its own timeout_s (max 600 s), so:

- threads: a gthread worker keeps serving other requests while one request waits on a model;
- timeout: longer than the largest run budget, so gunicorn never kills a sync run inside its own deadline.
  Model calls are bounded by the run's deadline (each call's timeout × attempts is capped by what remains).
"""

import os

bind = os.environ.get("GUNICORN_BIND", f"127.0.0.1:{os.environ.get('PORT', '8000')}")
workers = int(os.environ.get("WEB_CONCURRENCY", "3"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
timeout = 660  # > the largest timeout_s (600 s) plus a margin for committing the last step
graceful_timeout = 30
keepalive = 5
accesslog = "-"
errorlog = "-"
# gunicorn 27 puts every instance's control socket at one per-user path, so a second gunicorn on the host (the
# benchmark, the tests, another checkout) would take it over and delete it on exit. We don't use gunicornc.
control_socket_disable = True
