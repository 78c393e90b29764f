"""A key is bound to its run the moment the run exists (issue 39, item 2): a retry after any failure of the first
request finds that run (its current state, or its final response once done) instead of creating another, answers
409 only while the first request still holds the run's lease, and a sync request whose process stops gracefully
answers 202 with the run, now continuing in the background."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import IdempotencyKey, Run
from agents.providers.fake import ScriptedModel, calls, text
from agents.runs import drive, leases, runtime, store, submit
from tests.api.conftest import ARITHMETIC, RUNS, run_count

pytestmark = pytest.mark.django_db

BODY = {"input": ARITHMETIC, "provider": "demo"}


def _post(client, body: dict, key: str):
    return client.post(RUNS, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def _model(monkeypatch, *script) -> ScriptedModel:
    model = ScriptedModel(script)
    monkeypatch.setattr(runtime, "build_model", lambda run: model)
    return model


def test_the_key_names_its_run_from_the_insert_on(api, monkeypatch):
    seen = {}

    def answer(request):
        seen["bound"] = IdempotencyKey.objects.get(key="k").run_id  # during the model call: already bound
        return text("85")

    _model(monkeypatch, answer)
    response = _post(api, BODY, "k")
    assert response.status_code == 201
    assert str(seen["bound"]) == response.json()["id"]


def test_a_request_that_fails_after_its_run_exists_keeps_its_key(api, monkeypatch):
    """The run lives on (a worker continues it): a retry finds it, and no second run is made."""
    _model(monkeypatch, calls(("calculator", {"expression": "12*7"})))
    original = store.commit_unit
    commits = []

    def failing_commit(*args, **kwargs):
        commits.append(1)
        if len(commits) == 2:  # the tool's commit: the database went away, say
            raise RuntimeError("connection lost")
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "commit_unit", failing_commit)
    api.raise_request_exception = False
    assert _post(api, BODY, "k").status_code == 500
    run = Run.objects.get()
    record = IdempotencyKey.objects.get(key="k")
    assert (record.run_id, record.status_code) == (run.pk, None)
    Run.objects.filter(pk=run.pk).update(lease_owner="", lease_expires=None)  # as its dead request left it
    again = _post(api, BODY, "k")
    assert again.status_code == 202 and again.json()["id"] == str(run.pk)
    assert run_count() == 1


def test_a_retry_while_the_first_request_holds_the_run_is_409_for_at_most_a_lease(api, alice, settings):
    settings.AGENT_LEASE_S = 15
    run = submit.start_run(owner=alice, options=submit.RunOptions(**BODY), lease_owner="live")
    record = IdempotencyKey.objects.create(user=alice, key="k", fingerprint=_digest(BODY), run=run)
    busy = _post(api, BODY, "k")
    assert busy.status_code == 409 and 1 <= int(busy["Retry-After"]) <= 16
    Run.objects.filter(pk=run.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))  # its request died
    found = _post(api, BODY, "k")
    assert found.status_code == 202 and found.json()["id"] == str(run.pk)
    assert found.json()["status"] == "running"
    assert run_count() == 1 and IdempotencyKey.objects.get(pk=record.pk).status_code is None


def test_once_the_run_is_done_a_retry_gets_its_final_response_and_it_is_kept(api, alice):
    run = submit.start_run(owner=alice, options=submit.RunOptions(**BODY))
    IdempotencyKey.objects.create(user=alice, key="k", fingerprint=_digest(BODY), run=run)
    drive.execute(run_id=run.pk)  # a worker finished it after its request died
    final = _post(api, BODY, "k")
    assert final.status_code == 201
    assert (final.json()["id"], final.json()["output"], final.json()["status"]) == (str(run.pk), "85", "done")
    record = IdempotencyKey.objects.get(key="k")
    assert (record.status_code, record.response["id"]) == (201, str(run.pk))
    assert _post(api, BODY, "k").json() == final.json() and run_count() == 1


def test_a_background_request_retried_before_its_response_was_stored_gets_202(api, alice):
    body = {**BODY, "mode": "background"}
    run = submit.start_run(owner=alice, options=submit.RunOptions(**body))
    IdempotencyKey.objects.create(user=alice, key="k", fingerprint=_digest(body), run=run)
    response = _post(api, body, "k")
    assert (response.status_code, response.json()["id"]) == (202, str(run.pk)) and run_count() == 1


def test_a_sync_request_stopped_by_a_graceful_shutdown_answers_202_with_the_run(api, monkeypatch):
    """A deploy's SIGTERM interrupts the run's greenlet (leases.Stopping): the run goes back to the queue, the client
    gets 202 and the run's id, and a retry with the key reports the same run."""
    from django_tasks_db.models import DBTaskResult

    def stop(request):
        raise leases.Stopping

    _model(monkeypatch, calls(("calculator", {"expression": "12*7"})), stop)
    response = _post(api, BODY, "k")
    assert response.status_code == 202
    run = Run.objects.get()
    assert response.json()["id"] == str(run.pk) and response.json()["status"] == "running"
    assert (run.mode, run.lease_owner) == ("background", "")
    assert DBTaskResult.objects.filter(status="READY").count() == 1  # queued for a worker at once
    record = IdempotencyKey.objects.get(key="k")
    assert (record.run_id, record.status_code) == (run.pk, None)  # not final: a retry reports the run as it is
    again = _post(api, BODY, "k")
    assert (again.status_code, again.json()["id"]) == (202, str(run.pk))

    _model(monkeypatch, calls(("calculator", {"expression": "84+1"})), text("85"))
    drive.run_background(run_id=run.pk)
    done = _post(api, BODY, "k")
    assert (done.status_code, done.json()["output"]) == (201, "85") and run_count() == 1


def test_a_key_taken_over_while_its_request_was_starting_leaves_no_run(api, alice, monkeypatch):
    """The first request looked dead (no run after two leases) and a retry took its key: the first request's run
    insert rolls back with the binding it can no longer make."""
    original = submit.start_run

    def slow_start(**kwargs):
        IdempotencyKey.objects.filter(pk=kwargs["key_id"]).delete()  # taken over meanwhile
        IdempotencyKey.objects.create(user=alice, key="k", fingerprint=_digest(BODY))
        return original(**kwargs)

    monkeypatch.setattr(submit, "start_run", slow_start)
    response = _post(api, BODY, "k")
    assert response.status_code == 409
    assert run_count() == 0


def _digest(body: dict) -> str:
    from agents.runs.idempotency import fingerprint

    return fingerprint(body)
