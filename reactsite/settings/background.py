"""Background work (docs/operations.md): Django's tasks API over one of two backends.

- `AGENT_TASK_BACKEND=db` (the default): tasks are rows of the database (django-tasks-db), committed with what queued
  them; `manage.py run_worker` runs them, many in flight per process, and drives the periodic sweeps.
- `AGENT_TASK_BACKEND=celery`: tasks are messages on a broker (`CELERY_BROKER_URL`: RabbitMQ `amqp://…` or Redis
  `redis://…`), sent once the transaction that queued them commits; `celery -A reactsite worker` runs them and
  `celery -A reactsite beat` sends the sweeps (agents/background/celery_backend.py, reactsite/celery.py).

Either way a run's lease, not the queue, decides who drives it: a message delivered twice never drives a run twice.
"""

from django.core.exceptions import ImproperlyConfigured

from reactsite.settings.base import env

AGENT_TASK_BACKEND = env.str("AGENT_TASK_BACKEND", default="db")
_BACKENDS = {
    "db": "django_tasks_db.DatabaseBackend",
    "celery": "agents.background.celery_backend.CeleryBackend",
}
if AGENT_TASK_BACKEND not in _BACKENDS:
    raise ImproperlyConfigured(f"AGENT_TASK_BACKEND must be one of {', '.join(_BACKENDS)}, not {AGENT_TASK_BACKEND!r}.")
TASKS = {"default": {"BACKEND": _BACKENDS[AGENT_TASK_BACKEND]}}

# Celery (read by reactsite/celery.py, every name CELERY_…). Only the broker is needed: results are not kept (a
# run's outcome is its row).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
if AGENT_TASK_BACKEND == "celery" and not CELERY_BROKER_URL:
    raise ImproperlyConfigured("AGENT_TASK_BACKEND=celery needs CELERY_BROKER_URL (amqp://… or redis://…).")
# The queue our tasks go to and workers take from by default, apart from a shop's other Celery apps.
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="reactsite")
# A message is acknowledged once its task has run, not when a worker takes it: a worker killed mid-run leaves it to
# be delivered again (and the run's lease makes the second delivery wait for, or skip, the first).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# One message ahead per slot of the pool (a gevent worker with -c 200 holds 200): none waits behind a long run.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Redis as the broker: a message not acknowledged within this many seconds goes to another worker. It must exceed
# the longest task (a background run's share ends at its time budget, AGENT_DEFAULT_TIMEOUT_S or its own) and the
# longest delay a task is queued with; RabbitMQ needs none (it redelivers when the worker's connection closes).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT_S", default=3600)}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# AMQP heartbeats off by default: with them on, Celery 5.7's loop for gevent workers waits up to 0.1 s on its events
# connection after every message it takes (celery/worker/loops.py, synloop's `_quick_drain`), which holds one worker
# to about 10 new tasks a second, whatever its -c. A dead worker's connection is still noticed: kill -9 closes it at
# once, and py-amqp's TCP keepalive (idle 60 s) finds a host gone. docs/operations.md has the measurement.
CELERY_BROKER_HEARTBEAT = env.int("CELERY_BROKER_HEARTBEAT", default=0)
# Flower and `celery events` see the tasks: workers send task events, and a queued task its "sent" event.
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_TASK_SEND_SENT_EVENT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False  # the project's JSON logging stays (reactsite/settings/base.py)
# A worker-only machine's Prometheus metrics (run_worker or a Celery worker): served on this port of its own, with
# AGENT_METRICS on and AGENT_METRICS_TOKEN's rule (docs/observability.md). 0: none.
AGENT_WORKER_METRICS_PORT = env.int("AGENT_WORKER_METRICS_PORT", default=0)
AGENT_WORKER_METRICS_HOST = env.str("AGENT_WORKER_METRICS_HOST", default="127.0.0.1")
