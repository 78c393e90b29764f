"""Helpers of the export and replay tests: real runs on the demo model, exporting them, replaying them."""

from __future__ import annotations

import io
from pathlib import Path

from django.contrib import admin
from django.contrib.admin.sites import AdminSite
from django.contrib.messages.storage.cookie import CookieStorage
from django.core.management import call_command
from django.test import RequestFactory

from agents.evals.actions import make_eval_case
from agents.models import EvalRun, Run
from agents.runs import submit

ARITHMETIC = "What is 12*7, plus 1?"
DDG_ANSWER = {"Heading": "Python", "AbstractText": "Python is a programming language."}
SEARCH_ANSWER = "Python: Python is a programming language."


def demo_run(owner, goal: str = ARITHMETIC, **options) -> Run:
    """A real run on the demo model, through the same service as the API."""
    return submit.submit_run(owner=owner, options=submit.RunOptions(input=goal, provider="demo", **options))


def export(*args: str) -> tuple[str, str]:
    """`manage.py export_cases ARGS`: (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("export_cases", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def export_to(path: Path, *args: str) -> Path:
    path.write_text(export(*args)[0], encoding="utf-8")
    return path


class RunsForTests(admin.ModelAdmin):
    """A test-only admin of runs with the action (the project's RunAdmin adds it itself)."""

    actions = [make_eval_case]


def run_action(user, runs, model_admin: admin.ModelAdmin | None = None):
    """POST the changelist's action form for `runs` through Django's own action handling: (response, messages)."""
    data = {"action": "make_eval_case", "_selected_action": [str(r.pk) for r in runs], "index": "0"}
    request = RequestFactory().post("/admin/agents/run/", data)
    request.user = user
    request._messages = CookieStorage(request)
    model_admin = model_admin or RunsForTests(Run, AdminSite())
    response = model_admin.response_action(request, Run.objects.all())
    return response, [str(m) for m in request._messages]


def replay(cases: Path, *args: str) -> tuple[EvalRun, str]:
    """`manage.py run_evals --replay --cases FILE ARGS` on the demo model: the stored eval run and the table."""
    out = io.StringIO()
    try:
        call_command("run_evals", "--replay", "--cases", str(cases), "--provider", "demo", *args, stdout=out)
    except SystemExit as exc:  # some case failed
        assert exc.code == 1
    return EvalRun.objects.latest("created_at"), out.getvalue()


def script_search(stub, settings):
    """DuckDuckGo answered by the local stub: the original runs never touch the network either."""
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json=DDG_ANSWER, repeat=True)
    return stub
