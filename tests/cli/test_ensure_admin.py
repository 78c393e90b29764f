"""`manage.py ensure_admin`: the demo superuser and its API token, created once."""

from __future__ import annotations

import io

from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.authtoken.models import Token


def ensure_admin(*args: str) -> str:
    out = io.StringIO()
    call_command("ensure_admin", *args, stdout=out)
    return out.getvalue()


def test_creates_the_superuser_once_and_prints_its_token(db, monkeypatch):
    monkeypatch.setenv("ADMIN_PASSWORD", "pw-" + "y" * 12)

    first = ensure_admin()
    second = ensure_admin()

    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    assert admin.check_password("pw-" + "y" * 12)
    token = Token.objects.get(user=admin).key
    assert "Created superuser 'admin' with password: (from ADMIN_PASSWORD)" in first
    assert "pw-yyyy" not in first  # the password itself is never printed when it came from the environment
    assert "Created" not in second
    assert f"API token for 'admin': {token}" in first
    assert f"API token for 'admin': {token}" in second
    assert User.objects.count() == 1


def test_a_generated_password_is_shown_once(db, monkeypatch):
    monkeypatch.delenv("ADMIN_PASSWORD", raising=False)

    out = ensure_admin("--username", "root2")

    password = out.split("with password: ", 1)[1].split()[0]
    assert User.objects.get(username="root2").check_password(password)


def test_creates_the_demo_agent_the_readme_uses_once_and_keeps_edits(db, monkeypatch):
    from agents.models import Agent

    monkeypatch.setenv("ADMIN_PASSWORD", "pw-" + "y" * 12)

    first = ensure_admin()
    Agent.objects.filter(name="support").update(instructions="edited by staff")
    second = ensure_admin()

    assert "Created the demo agent 'support'" in first
    assert "Created the demo agent 'maths'" in first and "Created the demo agent 'triage'" in first
    assert "demo agent" not in second
    agent = Agent.objects.get(name="support")
    assert (agent.name, agent.instructions, agent.sensitive_tools) == ("support", "edited by staff", ["remember"])
    assert Agent.objects.get(name="triage").agents == ["maths"]  # the sub-agent example of docs/composition.md


def test_a_deleted_demo_agent_comes_back(db, monkeypatch):
    from agents.models import Agent

    monkeypatch.setenv("ADMIN_PASSWORD", "pw-" + "y" * 12)
    ensure_admin()
    Agent.objects.all().delete()

    assert "Created the demo agent 'support'" in ensure_admin()
    assert Agent.objects.filter(name="support").exists()
