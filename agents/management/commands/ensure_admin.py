"""Create the demo superuser `admin` and the demo agents (`support`; `triage`, which calls `maths`) if missing, and
print the admin's API token."""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from rest_framework.authtoken.models import Token

from agents.catalog import services as catalog
from agents.models import Agent

# The README's examples name this agent: `make run` creates it so they work on a fresh clone. Created only when
# missing, so a staff member's edits in the console are never overwritten.
DEMO_AGENT = {
    "name": "support",
    "instructions": "You are a concise support assistant. Use the calculator for arithmetic.",
    "sensitive_tools": ["remember"],
}
# Sub-agents (docs/composition.md): `triage` hands tasks to `maths`, each call a child run ("Ask maths: …").
DEMO_SUB_AGENTS = [
    {
        "name": "maths",
        "description": "Works out arithmetic with the calculator.",
        "instructions": "You do arithmetic, with the calculator.",
        "tools": ["calculator"],
    },
    {
        "name": "triage",
        "description": "Hands each task to the agent that fits it.",
        "instructions": "Hand each task to the agent that fits it, and answer with what it says.",
        "tools": [],
        "agents": ["maths"],
    },
]


class Command(BaseCommand):
    help = (
        "Ensure a superuser 'admin' exists (password from ADMIN_PASSWORD, else generated) and the demo agent "
        "'support' (and 'triage', which calls 'maths' as a sub-agent), and print the admin's API token."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args, **opts) -> None:
        users = get_user_model()
        user = users.objects.filter(username=opts["username"]).first()
        if user is None:
            password = os.environ.get("ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            user = users.objects.create_superuser(opts["username"], email="", password=password)
            shown = "(from ADMIN_PASSWORD)" if os.environ.get("ADMIN_PASSWORD") else password
            self.stdout.write(f"Created superuser '{user.username}' with password: {shown}  (shown once)")
        for agent in [DEMO_AGENT, *DEMO_SUB_AGENTS]:
            fields = {k: v for k, v in agent.items() if k != "name"}
            with transaction.atomic():
                made, created = Agent.objects.get_or_create(name=agent["name"], defaults=fields)
                if created:
                    catalog.record(made, user)  # its version 1, as an agent made over the API or in the console
            if created:
                self.stdout.write(f"Created the demo agent '{agent['name']}'")
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"API token for '{user.username}': {token.key}")
        base = f"http://127.0.0.1:{os.environ.get('PORT') or '8000'}"  # where `make run` serves: its PORT
        self.stdout.write(f'  curl -H "Authorization: Token {token.key}" {base}/api/v1/runs')
        self.stdout.write(f"Playground: {base}/  Console: {base}/admin/  API docs: {base}/api/v1/docs")
