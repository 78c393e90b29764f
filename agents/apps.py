from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_delete, post_migrate, post_save, pre_migrate

        from agents import checks, periodic  # noqa: F401  (checks: registers the system checks)
        from agents.models import ModelPrice
        from agents.notifications import notify
        from agents.runs import children, persist, signals, telemetry
        from agents.usage import dbtriggers, prices
        from reactsite.serving import cache, green

        green.install()
        # Every sweep registers where it is defined (agents/periodic.py): the worker and beat import none of them.
        from agents.background import retention  # noqa: F401
        from agents.notifications import webhooks  # noqa: F401
        from agents.runs import recovery, review  # noqa: F401
        from agents.schedules import services  # noqa: F401

        # The runs' commits tell their observers, the notifications (webhooks, reviewer e-mail), through signals: runs
        # import neither. What follows a run's end (its parent resumed, its thread's next run started) is no observer:
        # the commit settles the run itself (agents/runs/settle.py).
        signals.run_done.connect(notify.on_run_done, dispatch_uid="agents.notify.run_done")
        signals.run_awaiting_approval.connect(notify.on_run_awaiting_approval, dispatch_uid="agents.notify.awaiting")
        # Runs get their sub-agents' tools; a parent let go waiting on a child acts on a child done meanwhile.
        children.install()
        # SQLite: each connection's one-statement unit commit, off while migrations run (agents/runs/persist.py).
        connection_created.connect(persist.install_sqlite_commit, dispatch_uid="agents.runs.persist.sqlite_commit")
        pre_migrate.connect(persist.drop_sqlite_commit, dispatch_uid="agents.runs.persist.sqlite_commit_off")
        post_migrate.connect(persist.install_sqlite_commit, dispatch_uid="agents.runs.persist.sqlite_commit_on")
        post_migrate.connect(dbtriggers.ensure, sender=self, dispatch_uid="agents.usage.dbtriggers")
        post_migrate.connect(cache.ensure_tables, sender=self, dispatch_uid="reactsite.serving.cache")  # no half set-up
        # A price saved in the console is used by this process's next call (the others read the rows within seconds).
        post_save.connect(prices.ROWS.forget, sender=ModelPrice, dispatch_uid="agents.usage.prices.saved")
        post_delete.connect(prices.ROWS.forget, sender=ModelPrice, dispatch_uid="agents.usage.prices.deleted")
        if settings.AGENT_OTEL_TRACES:  # each process its own exporter (gunicorn loads the app after the fork)
            from reactsite.observability import tracing

            telemetry.add_observer(tracing.install())
        if settings.AGENT_METRICS:  # Prometheus metrics at /metrics: each process writes its own files (after the fork)
            from reactsite.observability import metrics

            observer = metrics.install(settings.AGENT_METRICS_DIR)
            telemetry.add_observer(observer)
            signals.run_done.connect(observer.run_done, dispatch_uid="reactsite.metrics.run_done")
            periodic.observe(observer.sweep_done)
