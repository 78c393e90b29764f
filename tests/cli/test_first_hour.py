"""A newcomer's first hour as the README and docs/ have it (issue 34, item 2): the port they chose in every address
printed, `make run` creating what the examples use, a clear word for an unknown `--user`, and the examples that need
the internet saying so."""

from __future__ import annotations

import io
import re
import subprocess

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.cli.test_plain_shell import manage, plain_shell
from tests.cli.test_readme_commands import API, PAGES, README, page_id, shell_lines
from tests.integration._support import ROOT, clean_env, run_py


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> dict[str, str]:
    """A plain shell after `make run`'s set-up: .env written, the database migrated."""
    made = subprocess.run(["make", "-s", ".env"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    env = plain_shell(DATABASE_URL=f"sqlite:///{tmp_path_factory.mktemp('first-hour') / 'db.sqlite3'}")
    proc = manage("migrate", "--noinput", "-v", "0", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return env


# --- the port ---------------------------------------------------------------------------------------------------------


def test_ensure_admin_prints_the_addresses_on_the_chosen_port(shell):
    proc = manage("ensure_admin", env=shell | {"PORT": "9123"})

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "http://127.0.0.1:9123/api/v1/runs" in proc.stdout
    assert "http://127.0.0.1:9123/admin/" in proc.stdout and "http://127.0.0.1:9123/ " in proc.stdout
    assert ":8000" not in proc.stdout


def test_ensure_admin_without_a_port_prints_make_runs_default(db, monkeypatch):
    monkeypatch.delenv("PORT", raising=False)
    out = io.StringIO()
    call_command("ensure_admin", stdout=out)
    addresses = set(re.findall(r"http://127\.0\.0\.1:(\d+)", out.getvalue()))
    assert addresses == {"8000"}, out.getvalue()


@pytest.mark.parametrize(("port", "expected"), [("9123", "http://127.0.0.1:9123"), (None, "http://127.0.0.1:8000")])
def test_links_in_e_mails_follow_the_port_unless_set(port, expected):
    env = clean_env(DEBUG="1", **({"PORT": port} if port else {}))
    proc = run_py("from django.conf import settings; print(settings.AGENT_PUBLIC_URL)", env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == expected

    env["AGENT_PUBLIC_URL"] = "https://agents.example.com"
    assert run_py("from django.conf import settings; print(settings.AGENT_PUBLIC_URL)", env).stdout.strip() == (
        "https://agents.example.com"
    )


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_page_shows_a_fixed_port_for_our_server(page):
    lines = shell_lines(page.read_text(encoding="utf-8"))
    fixed = [line for line in lines if re.search(r"(127\.0\.0\.1|localhost):8000\b", line)]
    assert not fixed, f"say ${{PORT:-8000}} (or $PORT) instead: {fixed}"


def test_make_run_sets_up_what_the_examples_use_before_serving():
    """`make run` runs ensure_admin (the admin, its token, the demo agent `support`) before gunicorn starts."""
    plan = subprocess.run(
        ["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    ).stdout  # fmt: skip
    assert "manage.py ensure_admin" in plan and "gunicorn" in plan
    assert plan.index("manage.py ensure_admin") < plan.index("bin/gunicorn")


# --- an unknown --user ------------------------------------------------------------------------------------------------


def test_export_cases_names_the_unknown_user_it_was_given(shell):
    proc = manage("export_cases", "--stop-reason", "final_answer", "--user", "alice", env=shell)

    assert proc.returncode == 2
    assert "No user 'alice'." in proc.stderr
    assert "pass --user" not in proc.stderr and proc.stdout == ""


def test_export_cases_without_its_default_user_says_how_to_make_it(db):
    with pytest.raises(CommandError) as exc:
        call_command("export_cases", "--status", "done", stdout=io.StringIO(), stderr=io.StringIO())
    assert exc.value.returncode == 2
    assert str(exc.value).startswith("No user 'admin' (the default --user)")
    assert "ensure_admin" in str(exc.value)


# --- what needs the internet --------------------------------------------------------------------------------------


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks, a list's items and a table's rows each on their own."""
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        blocks += re.split(r"\n(?=- |\| )", block)
    return blocks


NEEDS_INTERNET = re.compile(r"internet access (and|or) DNS")


@pytest.mark.parametrize(
    ("page", "mention"),
    [
        (README, "- **Tools**: a calculator, web search"),
        (README, "- **For operators**"),  # webhooks
        (API, "`POST /api/v1/tools/search/invoke`"),
        (API, "A webhook tells one of your systems"),
    ],
)
def test_what_needs_the_internet_says_so_where_it_is_shown(page, mention):
    where = [p for p in paragraphs(page.read_text(encoding="utf-8")) if mention in p]
    assert where, f"{page_id(page)} no longer mentions {mention!r}"
    assert all(NEEDS_INTERNET.search(p) for p in where), [p[:200] for p in where if not NEEDS_INTERNET.search(p)]
