from django.apps import AppConfig


class AgentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "agents"

    def ready(self) -> None:
        from agents import checks  # noqa: F401  (registers the system checks)
        from reactsite import green

        green.install()
