"""docs/agents.md's tour works as written: each `api …` line of its first shell block is sent, as the page's `api`
shell function sends it, by the staff user `make run` creates, and answers what its comment says (the status, and
each `"field": value` it names, top-level or in a list's first item)."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.test_readme_commands import shell_lines
from tests.conftest import client_for, make_user
from tests.integration._support import ROOT
from tests.support.doc_tours import send, tour

PAGE = ROOT / "docs" / "agents.md"
NAMED = re.compile(r'"(\w+)": (\d+|"[^"]*")')


@pytest.mark.django_db
def test_the_pages_tour_answers_what_it_says(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"
    steps = tour(PAGE)
    assert len(steps) >= 7 and all(command.startswith("api ") for command, _ in steps)
    assert any(line.startswith("api()") for line in shell_lines(PAGE.read_text(encoding="utf-8")))
    client = client_for(make_user("admin", staff=True, superuser=True))
    for command, said in steps:
        response = send(client, command)
        status = re.match(r"(\d{3})\b", said)
        expected = int(status.group(1)) if status else 200 if "-d" not in command else 201
        assert response.status_code == expected, (command, response.status_code, response.content[:400])
        if response.status_code == 204:
            continue
        data = response.json()
        shown = data[0] if isinstance(data, list) else data
        named: dict[str, str] = {}
        for field, value in NAMED.findall(said):
            named.setdefault(field, value)  # a list's comment names its first item first
        for field, value in named.items():
            assert field in shown and shown[field] == json.loads(value), (command, field, shown.get(field))
