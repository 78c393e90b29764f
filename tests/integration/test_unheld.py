"""Nothing is held across a model call (issue 11): the run's database connection goes back before each call."""

from __future__ import annotations

import pytest
from django.db import connection

from agents.models import Run
from agents.providers.fake import ScriptedModel, calls, text
from agents.runs import runtime, submit
from tests.integration._support import quick_user

QUESTION = "What is 12*7, plus 1?"


def _recording(seen: list[bool], reply):
    """A scripted reply that notes whether a database connection was open while the model was called."""

    def complete(request):
        seen.append(connection.connection is not None)
        return reply

    return complete


def _run(monkeypatch, replies) -> tuple[object, list[bool]]:
    seen: list[bool] = []
    model = ScriptedModel([_recording(seen, r) for r in replies])
    monkeypatch.setattr(runtime, "build_model", lambda run: model)
    owner = quick_user("una")
    run = submit.submit_run(owner=owner, options=submit.RunOptions(input=QUESTION, tools=["calculator"]))
    return run, seen


@pytest.mark.django_db(transaction=True)
def test_no_connection_is_open_during_any_model_call(monkeypatch, settings):
    settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS = True
    replies = [calls(("calculator", {"expression": "12*7"})), calls(("calculator", {"expression": "84+1"})), text("85")]

    run, seen = _run(monkeypatch, replies)

    assert (run.status, run.output) == ("done", "85")
    assert seen == [False, False, False]
    assert list(run.steps.order_by("index").values_list("kind", flat=True)) == ["model", "tool"] * 2 + ["model"]


@pytest.mark.django_db(transaction=True)
def test_the_switch_keeps_the_connection_when_it_is_a_local_file(monkeypatch, settings):
    """SQLite's default: a connection is a file handle, not a server slot, and reopening it costs CPU each call."""
    settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS = False

    run, seen = _run(monkeypatch, [text("85")])

    assert run.output == "85" and seen == [True]


def test_the_default_releases_on_postgresql_only():
    from django.conf import settings

    expected = connection.vendor == "postgresql"
    assert settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS is expected


@pytest.mark.django_db(transaction=True)
def test_an_open_event_stream_holds_no_connection_between_polls(settings):
    """A stream waits for minutes; on PostgreSQL a pool slot held meanwhile starves the requests doing work."""
    from agents.api.events import run_events
    from tests.conftest import stored_run_fields

    settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS = True
    settings.AGENT_DOORBELL = "poll"  # the polling path (with a doorbell the stream sleeps on the bell instead)
    run = Run.objects.create(owner=quick_user("sam"), **stored_run_fields(status="running", output=None))
    held_while_sleeping: list[bool] = []

    def sleep(seconds: float) -> None:
        held_while_sleeping.append(connection.connection is not None)
        if len(held_while_sleeping) == 2:
            Run.objects.filter(pk=run.pk).update(status="done", stop_reason="cancelled")

    frames = list(run_events(run.pk, -1, poll_s=0.01, max_s=10, sleep=sleep))

    assert held_while_sleeping == [False, False]
    assert frames[-1].startswith("event: done")


@pytest.mark.django_db(transaction=True)
def test_no_connection_is_open_while_a_guardrail_calls_out(monkeypatch, settings):
    """A guardrail that asks outside the process (a moderation endpoint, a team's hook) is waited on like a model:
    the run holds no database connection meanwhile (issue 38)."""
    from tests.guardrails import hooks

    settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS = True
    settings.AGENT_GUARDRAIL_HOOKS = {"noter": "tests.guardrails.hooks.notes_the_connection"}
    hooks.HELD.clear()
    replies = [calls(("calculator", {"expression": "12*7"})), text("84")]
    seen: list[bool] = []
    model = ScriptedModel([_recording(seen, r) for r in replies])
    monkeypatch.setattr(runtime, "build_model", lambda run: model)
    options = submit.RunOptions(input=QUESTION, tools=["calculator"], guardrails=[{"type": "hook", "name": "noter"}])

    run = submit.submit_run(owner=quick_user("una"), options=options)

    assert (run.status, run.output) == ("done", "84")
    # input, tool arguments, tool output, final answer: each checked, none with a connection open
    assert len(hooks.HELD) == 4 and not any(hooks.HELD), hooks.HELD
    assert seen == [False, False]
