"""Create the demo superuser `admin` if missing and print its API token."""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Ensure a superuser 'admin' exists (password from ADMIN_PASSWORD, else generated) and print its token."

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
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"API token for '{user.username}': {token.key}")
        port = os.environ.get("PORT", "8000")
        self.stdout.write(f'  curl -H "Authorization: Token {token.key}" http://127.0.0.1:{port}/api/v1/runs')
