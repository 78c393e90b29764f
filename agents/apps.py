from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from agents import (
            admin_webhooks,  # noqa: F401  (registers the webhook pages of the console)
            checks,  # noqa: F401  (registers the system checks)
        )
        from reactsite import green

        green.install()
