from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from agents import (
            admin_agents,  # noqa: F401  (registers the agents page of the console)
            admin_usage,  # noqa: F401  (registers the usage pages of the console)
            admin_webhooks,  # noqa: F401  (registers the webhook pages of the console)
            checks,  # noqa: F401  (registers the system checks)
            dbtriggers,
        )
        from reactsite import green

        green.install()
        post_migrate.connect(dbtriggers.ensure, sender=self, dispatch_uid="agents.dbtriggers")
