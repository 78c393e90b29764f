from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from agents import checks  # noqa: F401  (registers the system checks)
        from agents.limits import dbtriggers
        from agents.notifications import notify
        from agents.runs import signals
        from reactsite.serving import green

        green.install()
        # The runs' commits tell the notifications (webhooks, reviewer e-mail) through signals: runs import neither.
        signals.run_done.connect(notify.on_run_done, dispatch_uid="agents.notify.run_done")
        signals.run_awaiting_approval.connect(notify.on_run_awaiting_approval, dispatch_uid="agents.notify.awaiting")
        post_migrate.connect(dbtriggers.ensure, sender=self, dispatch_uid="agents.limits.dbtriggers")
