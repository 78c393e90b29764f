"""The Celery app, for `AGENT_TASK_BACKEND=celery` (reactsite/settings/background.py, docs/operations.md).

`celery -A reactsite worker` runs the project's tasks (agents/tasks.py) and `celery -A reactsite beat` sends the
periodic sweeps (agents/periodic.py) on their intervals. The app reads the CELERY_… settings; Celery's Django fixup
sets Django up in each worker and beat before any task runs. Tasks are not declared here: the task backend
(agents/background/celery_backend.py) registers each task of Django's tasks API under its path when that task is
defined, in every process.

A worker serves Prometheus metrics on AGENT_WORKER_METRICS_PORT when it is set (agents/background/celery_backend.py).
"""

from __future__ import annotations

import os

from celery import Celery

from agents import periodic

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")

app = Celery("reactsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["agents"])  # agents/tasks.py, whose tasks the backend registers as they are defined


@app.on_after_finalize.connect
def _schedule_sweeps(sender: Celery, **kwargs) -> None:
    """Beat's schedule: every registered sweep, on its interval (Django is set up by now, so the list is whole)."""
    sender.conf.beat_schedule = {
        f"reactsite.{sweep.name}": {
            "task": "agents.tasks.run_periodic",
            "schedule": sweep.interval_s(),
            "args": [sweep.name],
            "options": {"expires": sweep.interval_s()},  # a tick no worker took in time is dropped: the next one comes
        }
        for sweep in periodic.sweeps()
    }
