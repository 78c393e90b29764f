from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.models.signals import post_delete, post_migrate, post_save

        from agents import checks  # noqa: F401  (registers the system checks)
        from agents.limits import dbtriggers, prices
        from agents.models import ModelPrice
        from agents.notifications import notify
        from agents.runs import children, multitask, signals, telemetry
        from reactsite.serving import cache, green

        green.install()
        # The runs' commits tell the notifications (webhooks, reviewer e-mail) through signals: runs import neither.
        signals.run_done.connect(notify.on_run_done, dispatch_uid="agents.notify.run_done")
        signals.run_awaiting_approval.connect(notify.on_run_awaiting_approval, dispatch_uid="agents.notify.awaiting")
        # A child run's end (or pause) takes its parent up again (agents/runs/children.py).
        children.install()
        signals.run_done.connect(children.on_run_done, dispatch_uid="agents.children.run_done")
        signals.run_waiting.connect(children.on_run_waiting, dispatch_uid="agents.children.run_waiting")
        signals.run_done.connect(multitask.on_run_done, dispatch_uid="agents.multitask.run_done")  # next on its thread
        post_migrate.connect(dbtriggers.ensure, sender=self, dispatch_uid="agents.limits.dbtriggers")
        post_migrate.connect(cache.ensure_tables, sender=self, dispatch_uid="reactsite.serving.cache")  # no half set-up
        # A price saved in the console is used by this process's next call (the others read the rows within seconds).
        post_save.connect(prices.ROWS.forget, sender=ModelPrice, dispatch_uid="agents.limits.prices.saved")
        post_delete.connect(prices.ROWS.forget, sender=ModelPrice, dispatch_uid="agents.limits.prices.deleted")
        if settings.AGENT_OTEL_TRACES:  # each process its own exporter (gunicorn loads the app after the fork)
            from reactsite.observability import tracing

            telemetry.add_observer(tracing.install())
        if settings.AGENT_METRICS:  # Prometheus metrics at /metrics: each process writes its own files (after the fork)
            from reactsite.observability import metrics

            observer = metrics.install(settings.AGENT_METRICS_DIR)
            telemetry.add_observer(observer)
            signals.run_done.connect(observer.run_done, dispatch_uid="reactsite.metrics.run_done")
