"""Webhook deliveries and reviewer e-mails (API.md v1.1): a receiver on 127.0.0.1 checks every signature with its
secret; failures are retried on the backoff schedule and every attempt is recorded; private destinations are
refused again at delivery; `run.done` fires once per run and only once its commit is made; a pause fires
`run.awaiting_approval` and e-mails the reviewers once. Deliveries are driven by running the queued tasks here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.core import mail
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.module_loading import import_string
from django_tasks_db.models import DBTaskResult

from agents.models import DeliveryStatus, Run, WebhookAttempt, WebhookDelivery
from agents.notifications import notify, webhooks
from agents.runs import review, submit
from agents.tasks import deliver_webhook, email_reviewers
from tests.conftest import client_for, make_user
from tests.support.http_stub import RecordedRequest, StubServer

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs"
HOOK_PATH = "/hooks"
RUN_KEYS = {
    "id", "status", "stop_reason", "ok", "output", "output_json", "turns", "input", "thread_id", "agent", "mode",
    "protocol", "provider", "model", "max_turns", "timeout_s", "tools", "sensitive_tools", "pending_action",
    "pending_actions", "error", "usage", "cost", "max_total_tokens", "max_tool_calls", "tool_limits",
    "guardrails", "fallback_models", "metadata", "parent", "forked_from", "created_at", "updated_at",
    "agent_version", "prompt_cache", "history",
}  # fmt: skip
DELIVER = "agents.tasks.deliver_webhook"
EMAIL = "agents.tasks.email_reviewers"


def verify(secret: str, headers: dict[str, str], body: bytes, tolerance_s: int = 300) -> bool:
    """What a receiver does (README): recompute the HMAC of "<t>.<body>" and compare; refuse an old timestamp."""
    fields = dict(part.split("=", 1) for part in headers["x-reactsite-signature"].split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return abs(time.time() - int(fields["t"])) <= tolerance_s and hmac.compare_digest(expected, fields["v1"])


class Receiver:
    """A webhook endpoint on the stub: answers each POST with the next scripted status if its signature verifies
    with `secret`, else 400; remembers what it checked."""

    def __init__(self, stub: StubServer) -> None:
        self.stub, self.secret, self.checked = stub, "", []

    @property
    def url(self) -> str:
        return self.stub.url + HOOK_PATH

    @property
    def requests(self) -> list[RecordedRequest]:
        return [r for r in self.stub.requests if r.path == HOOK_PATH]

    def answer(self, *statuses: int, then: int = 204, delay_s: float = 0.0) -> None:
        for status in statuses:
            self.stub.add("POST", HOOK_PATH, handler=self._handler(status), delay_s=delay_s)
        self.stub.add("POST", HOOK_PATH, handler=self._handler(then), delay_s=delay_s, repeat=True)

    def _handler(self, status: int):
        def handle(request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
            ok = verify(self.secret, request.headers, request.body)
            self.checked.append(ok)
            return (status if ok else 400), {}, b""

        return handle


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def receiver(stub, settings) -> Receiver:
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1
    settings.AGENT_WEBHOOK_RETRY_BASE_S = 0  # retries are due at once (the schedule has its own test)
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"  # search can only reach the stub (404: a tool error), never the network
    return Receiver(stub)


def subscribe(client, receiver: Receiver, *events: str) -> dict:
    response = client.post("/api/v1/webhooks", {"url": receiver.url, "events": list(events)}, format="json")
    assert response.status_code == 201, response.content
    receiver.secret = response.json()["secret"]
    return response.json()


def queued(task_path: str) -> list[DBTaskResult]:
    return list(DBTaskResult.objects.filter(task_path=task_path, status="READY").order_by("enqueued_at"))


def work(limit: int | None = None) -> list:
    """What a task worker does with the queue, in this process: every task that is due (at most `limit`), until
    none is; their results."""
    results: list = []
    while limit is None or len(results) < limit:
        due = DBTaskResult.objects.ready().order_by("enqueued_at").first()
        if due is None:
            break
        assert len(results) < 50, "the queue never empties"
        DBTaskResult.objects.filter(pk=due.pk).update(status="SUCCESSFUL")
        call = due.args_kwargs
        results.append(import_string(due.task_path).call(*call["args"], **call["kwargs"]))
    return results


def sync_run(client, committed, input: str = "What is 12*7, plus 1?", **fields) -> dict:
    """A run through the API; what waited for the commit runs as it would in production (the test holds a
    transaction open around everything)."""
    with committed(execute=True):
        response = client.post(RUNS, {"input": input, **fields}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    return django_capture_on_commit_callbacks


# --- delivery ------------------------------------------------------------------------------------------------------


def test_a_finished_run_is_posted_signed_and_the_receiver_verifies_it(api, receiver, committed):
    hook = subscribe(api, receiver, "run.done")
    receiver.answer()
    run = sync_run(api, committed)

    assert receiver.requests == []  # never sent in the request: the delivery is the worker's
    (delivery,) = WebhookDelivery.objects.all()
    assert (delivery.status, delivery.attempts, str(delivery.webhook_id)) == ("pending", 0, hook["id"])
    assert [t.args_kwargs for t in queued(DELIVER)] == [{"args": [], "kwargs": {"delivery_id": str(delivery.pk)}}]

    assert deliver_webhook.call(delivery_id=str(delivery.pk)) == "delivered"

    (request,) = receiver.requests
    assert receiver.checked == [True]
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-reactsite-event"] == "run.done"
    assert request.headers["x-reactsite-delivery"] == str(delivery.pk)
    body = request.json()
    assert set(body) == {"id", "event", "created_at", "run"}
    assert (body["id"], body["event"]) == (str(delivery.pk), "run.done")
    assert set(body["run"]) == RUN_KEYS  # the run object without steps
    detail = api.get(f"{RUNS}/{run['id']}").json()
    assert body["run"] == {k: v for k, v in detail.items() if k not in ("steps", "children", "scores")} == run
    assert (body["run"]["status"], body["run"]["output"]) == ("done", "85")
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("delivered", 1, None)
    assert delivery.delivered_at is not None
    (attempt,) = delivery.attempt_log.all()
    assert (attempt.number, attempt.status_code, attempt.error) == (1, 204, "")


def test_the_signature_check_fails_with_another_secret_or_body(api, receiver, committed):
    subscribe(api, receiver, "run.done")
    receiver.answer()
    sync_run(api, committed)
    work()

    (request,) = receiver.requests
    secret = receiver.secret
    assert verify(secret, request.headers, request.body)
    assert not verify(webhooks.new_secret(), request.headers, request.body)
    assert not verify(secret, request.headers, request.body.replace(b'"85"', b'"86"'))
    signature = request.headers["x-reactsite-signature"]
    old = {"x-reactsite-signature": signature.replace(signature[2:12], str(int(time.time()) - 3600))}
    assert not verify(secret, old, request.body)


def test_a_receivers_500s_are_retried_until_delivered(api, receiver, committed):
    subscribe(api, receiver, "run.done")
    receiver.answer(500, 503, then=200)
    sync_run(api, committed)

    assert work() == ["retrying", "retrying", "delivered"]

    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("delivered", 3)
    assert [(a.number, a.status_code) for a in delivery.attempt_log.all()] == [(1, 500), (2, 503), (3, 200)]
    assert receiver.checked == [True, True, True]  # each retry is signed afresh
    bodies = {r.body for r in receiver.requests}
    assert len(bodies) == 1  # the same payload, byte for byte
    assert {r.headers["x-reactsite-delivery"] for r in receiver.requests} == {str(delivery.pk)}
    assert queued(DELIVER) == []


def test_retries_follow_an_exponential_schedule_of_about_an_hour(api, receiver, committed, settings):
    settings.AGENT_WEBHOOK_RETRY_BASE_S = 60
    subscribe(api, receiver, "run.done")
    receiver.answer(then=500)
    sync_run(api, committed)
    delivery = WebhookDelivery.objects.get()

    waits = []
    for _ in range(3):
        (task,) = queued(DELIVER)
        DBTaskResult.objects.filter(pk=task.pk).delete()
        before = timezone.now()
        assert deliver_webhook.call(delivery_id=str(delivery.pk)) == "retrying"
        (task,) = queued(DELIVER)
        waits.append(round((task.run_after - before).total_seconds()))
        delivery.refresh_from_db()
        assert delivery.next_attempt_at == task.run_after
    assert waits == [60, 120, 240]
    assert work() == []  # nothing is due yet: the worker leaves it for later

    total = sum(webhooks.retry_delay_s(n) for n in range(1, settings.AGENT_WEBHOOK_MAX_ATTEMPTS))
    assert settings.AGENT_WEBHOOK_MAX_ATTEMPTS >= 5
    assert timedelta(minutes=45) <= timedelta(seconds=total) <= timedelta(minutes=90)


def test_a_delivery_fails_for_good_after_its_last_attempt(api, receiver, committed, settings):
    settings.AGENT_WEBHOOK_MAX_ATTEMPTS = 3
    subscribe(api, receiver, "run.done")
    receiver.answer(then=500)
    sync_run(api, committed)

    assert work() == ["retrying", "retrying", "failed"]
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("failed", 3, None)
    assert delivery.attempt_log.count() == 3 and len(receiver.requests) == 3
    assert deliver_webhook.call(delivery_id=str(delivery.pk)) == "skipped"  # settled: never sent again
    assert len(receiver.requests) == 3


def test_timeouts_and_connection_errors_are_recorded_and_retried(api, receiver, committed, settings):
    settings.AGENT_WEBHOOK_TIMEOUT_S = 0.2
    hook = subscribe(api, receiver, "run.done")
    receiver.answer(then=204, delay_s=1.0)
    sync_run(api, committed)
    delivery = WebhookDelivery.objects.get()
    DBTaskResult.objects.all().delete()

    assert deliver_webhook.call(delivery_id=str(delivery.pk)) == "retrying"
    with StubServer() as closed:
        port = closed.port  # a port nothing listens on once this server is gone
    from agents.models import Webhook

    Webhook.objects.filter(pk=hook["id"]).update(url=f"http://127.0.0.1:{port}/hooks")
    assert deliver_webhook.call(delivery_id=str(delivery.pk)) == "retrying"

    first, second = delivery.attempt_log.all()
    assert (first.status_code, first.error) == (None, "no answer within 0.2 s")
    assert second.status_code is None and "ConnectionError" in second.error and "refused" in second.error.lower()
    assert str(port) not in second.error  # the cause, not the URL (it may carry a token)
    assert WebhookDelivery.objects.get().status == "pending"


def test_a_private_destination_is_refused_again_at_delivery(api, receiver, committed, settings):
    subscribe(api, receiver, "run.done")  # allowed when it was registered
    receiver.answer()
    sync_run(api, committed)
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False

    assert work(limit=1) == ["retrying"]

    assert receiver.requests == []
    (attempt,) = WebhookAttempt.objects.all()
    assert attempt.status_code is None
    assert (
        attempt.error
        == "127.0.0.1 resolves to 127.0.0.1, a loopback address: webhooks may only go to public addresses."
    )
    assert WebhookDelivery.objects.get().status == "pending"


def test_the_connected_address_is_checked_too(api, receiver, committed, settings, monkeypatch):
    """A name that resolved to a public address when checked and to a private one when connected (DNS rebinding)
    is refused on the socket, before anything is sent."""
    subscribe(api, receiver, "run.done")
    receiver.answer()
    sync_run(api, committed)
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False
    monkeypatch.setattr(webhooks, "destination_problem", lambda url: None)  # the name check passed

    assert work(limit=1) == ["retrying"]

    assert receiver.requests == []
    assert WebhookAttempt.objects.get().error == "connected to 127.0.0.1, a loopback address: refused"


def test_redirects_are_not_followed(api, receiver, committed, settings):
    settings.AGENT_WEBHOOK_MAX_ATTEMPTS = 1
    subscribe(api, receiver, "run.done")
    receiver.stub.add("POST", HOOK_PATH, status=302, headers={"Location": receiver.stub.url + "/elsewhere"})
    sync_run(api, committed)

    assert work() == ["failed"]
    assert [r.path for r in receiver.stub.requests] == [HOOK_PATH]
    assert WebhookAttempt.objects.get().status_code == 302


def test_a_delivery_of_a_deleted_webhook_is_skipped(api, receiver, committed):
    hook = subscribe(api, receiver, "run.done")
    sync_run(api, committed)
    assert api.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 204

    assert work() == ["skipped"]
    assert receiver.requests == []


# --- when events fire ----------------------------------------------------------------------------------------------


def test_run_done_fires_once_per_run_and_only_for_subscribers(api, bob, receiver, committed):
    bob_api = client_for(bob)
    subscribe(api, receiver, "run.done")
    subscribe(bob_api, Receiver(receiver.stub), "run.awaiting_approval")  # bob's runs, another event
    first = sync_run(api, committed)
    second = sync_run(api, committed)
    sync_run(bob_api, committed)

    assert sorted(str(d.run_id) for d in WebhookDelivery.objects.all()) == sorted([first["id"], second["id"]])
    assert {d.event for d in WebhookDelivery.objects.all()} == {"run.done"}


def test_run_done_waits_for_the_commit(api, receiver, committed):
    subscribe(api, receiver, "run.done")
    with committed(execute=False) as callbacks:
        api.post(RUNS, {"input": "What is 12*7, plus 1?"}, format="json")
        assert not WebhookDelivery.objects.exists()  # the run is done, but its commit is not made yet
    assert len(callbacks) == 1
    callbacks[0]()
    assert WebhookDelivery.objects.count() == 1


def test_a_rolled_back_run_announces_nothing(alice, receiver, committed):
    from agents.runs.submit import RunOptions

    subscribe(client_for(alice), receiver, "run.done")
    with committed(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            run = submit.submit_run(owner=alice, options=RunOptions(input="What is 12*7, plus 1?"))
            assert run.status == "done"
            raise RuntimeError("the caller's transaction fails")
    assert callbacks == [] and not WebhookDelivery.objects.exists() and not Run.objects.exists()
    assert work() == [] and receiver.requests == []


def test_a_cancelled_run_fires_run_done_once(api, receiver, committed):
    subscribe(api, receiver, "run.done")
    run = sync_run(api, committed, mode="step")
    assert not WebhookDelivery.objects.exists()  # still running

    assert api.post(f"{RUNS}/{run['id']}/cancel", format="json").status_code == 200
    assert api.post(f"{RUNS}/{run['id']}/cancel", format="json").status_code == 409

    (delivery,) = WebhookDelivery.objects.all()
    assert json.loads(delivery.payload)["run"]["stop_reason"] == "cancelled"


def test_a_pause_fires_run_awaiting_approval_then_run_done(api, receiver, reviewer, committed):
    subscribe(api, receiver, "run.awaiting_approval", "run.done")
    receiver.answer()
    run = sync_run(api, committed, input="search python")
    assert run["status"] == "awaiting_approval"

    (paused,) = WebhookDelivery.objects.all()
    assert paused.event == "run.awaiting_approval"
    work()
    (request,) = receiver.requests
    assert request.headers["x-reactsite-event"] == "run.awaiting_approval"
    body = request.json()["run"]
    assert (body["id"], body["status"]) == (run["id"], "awaiting_approval")
    assert [a["tool"] for a in body["pending_actions"]] == ["search"]
    assert body["pending_action"] == body["pending_actions"][0] and body["pending_action"]["expires_at"]

    with committed(execute=True):
        decided = client_for(reviewer).post(f"{RUNS}/{run['id']}/advance", {"approval": False}, format="json")
    assert decided.json()["status"] == "done"
    work()
    assert [r.headers["x-reactsite-event"] for r in receiver.requests] == ["run.awaiting_approval", "run.done"]
    assert receiver.checked == [True, True]


def test_an_expired_approval_that_ends_the_run_fires_run_done(alice, receiver, committed):
    """The worker's sweep is another writer: its announcements go out the same way."""
    api = client_for(alice)
    subscribe(api, receiver, "run.done")
    run = sync_run(api, committed, input="search python")
    Run.objects.filter(pk=run["id"]).update(approval_expires_at=timezone.now() - timedelta(seconds=1))

    with committed(execute=True):
        assert review.sweep_expired_approvals() == 1
    with committed(execute=True):
        work()  # the run goes on as a background run and finishes (its announcement waits for the commit)

    assert Run.objects.get(pk=run["id"]).status == "done"
    assert [d.event for d in WebhookDelivery.objects.all()] == ["run.done"]


def test_a_notification_that_cannot_be_queued_never_fails_the_run(api, receiver, committed, monkeypatch, caplog):
    def broken(run, event):
        raise RuntimeError("the webhook table is gone")

    subscribe(api, receiver, "run.awaiting_approval")  # the owner has a webhook: announce is called, and fails
    monkeypatch.setattr(webhooks, "announce", broken)
    run = sync_run(api, committed, input="search python")  # 201: the pause is committed and stays

    assert Run.objects.get(pk=run["id"]).status == "awaiting_approval"
    assert len(queued(EMAIL)) == 1  # the other notification still goes out
    assert [r.getMessage() for r in caplog.records if r.name == "agents.notifications.notify"] == [
        "notification not queued"
    ]


# --- the reviewers' e-mail -----------------------------------------------------------------------------------------


@pytest.fixture
def reviewers(db):
    """Who may decide, with and without an address, and who may not."""
    group = Group.objects.create(name="reviewers")
    group.permissions.add(Permission.objects.get(codename="review_run"))
    direct = make_user("direct", staff=True, reviewer=True)
    in_group = make_user("grouped")
    in_group.groups.add(group)
    boss = make_user("boss", superuser=True)
    no_address = make_user("quiet", reviewer=True)
    gone = make_user("gone", reviewer=True)
    plain = make_user("plain")
    for user, address in [
        (direct, "direct@example.test"),
        (in_group, "grouped@example.test"),
        (boss, "boss@example.test"),
        (gone, "gone@example.test"),
        (plain, "plain@example.test"),
    ]:
        user.email = address
        user.save(update_fields=["email"])
    gone.is_active = False
    gone.save(update_fields=["is_active"])
    assert no_address.email == ""
    return {"direct@example.test", "grouped@example.test", "boss@example.test"}


def test_reviewers_with_an_address_get_one_email_per_pause(api, reviewers, receiver, committed, settings):
    settings.AGENT_PUBLIC_URL = "https://agents.example.test/"
    run = sync_run(api, committed, input="search python")
    assert mail.outbox == []  # not in the request
    assert len(queued(EMAIL)) == 1

    assert work() == [3]

    assert sorted(m.to[0] for m in mail.outbox) == sorted(reviewers)
    assert all(len(m.to) == 1 and not m.cc and not m.bcc for m in mail.outbox)  # no one sees the others
    link = f"https://agents.example.test/admin/agents/run/{run['id']}/change/"
    for message in mail.outbox:
        assert run["id"][:8] in message.subject and "waiting for approval" in message.subject
        assert link in message.body and "search" in message.body and "alice" in message.body
    assert work() == [] and len(mail.outbox) == 3  # once


def test_the_emailed_link_opens_the_runs_console_page(api, reviewers, reviewer, receiver, committed):
    run = sync_run(api, committed, input="search python")
    work()
    link = next(line for line in mail.outbox[0].body.splitlines() if line.startswith("Decide here: "))
    path = link.removeprefix("Decide here: http://127.0.0.1:8000")
    console = Client()
    console.force_login(reviewer)
    page = console.get(path)
    assert page.status_code == 200 and run["id"] in page.content.decode()


def test_no_email_for_runs_that_do_not_pause_or_no_longer_wait(api, reviewers, reviewer, receiver, committed):
    sync_run(api, committed)  # finishes without pausing
    assert queued(EMAIL) == []

    run = sync_run(api, committed, input="search python")
    with committed(execute=True):
        client_for(reviewer).post(f"{RUNS}/{run['id']}/advance", {"approval": False}, format="json")
    assert len(queued(EMAIL)) == 1  # the decision came before the worker: the pause is over
    assert email_reviewers.call(run_id=run["id"]) == 0
    assert mail.outbox == []


def test_no_reviewer_with_an_address_means_no_email(api, reviewer, receiver, committed):
    sync_run(api, committed, input="search python")
    assert work() == [0]
    assert mail.outbox == []


# --- cost in the request -------------------------------------------------------------------------------------------


def _statements(call) -> list[str]:
    from django.db import connection

    with CaptureQueriesContext(connection) as ctx:
        call()
    return [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]]


def test_announcing_costs_one_read_when_nothing_is_subscribed(alice):
    run = Run.objects.create(owner=alice, input="x", provider="demo", model="demo-1", deadline=timezone.now())
    done = _statements(lambda: notify.run_done(run))
    paused = _statements(lambda: notify.run_awaiting_approval(run))

    assert len(done) == 1 and done[0].startswith("SELECT") and "agents_webhook" in done[0]
    assert len(paused) == 2 and "agents_webhook" in paused[0] and paused[1].startswith("INSERT")  # + the e-mail task


def test_announcing_to_webhooks_costs_two_inserts_more(api, alice, receiver):
    subscribe(api, receiver, "run.done")
    subscribe(api, receiver, "run.done")
    run = Run.objects.create(
        owner=alice, input="x", provider="demo", model="demo-1", deadline=timezone.now(), status="done"
    )
    statements = _statements(lambda: notify.run_done(run))

    assert [s.split()[0] for s in statements] == ["SELECT", "INSERT", "INSERT", "INSERT"]  # deliveries, 2 tasks
    assert WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING).count() == 2


# --- the real worker -----------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_task_worker_delivers_and_emails(receiver, reviewers):
    """No test transaction: the request commits, announces, and `db_worker` sends what was queued."""
    from django.contrib.auth.models import User

    alice = User.objects.create_user("alice2", password="pw")
    api = client_for(alice)
    subscribe(api, receiver, "run.awaiting_approval")
    receiver.answer(500)

    run = api.post(RUNS, {"input": "search python"}, format="json").json()
    assert run["status"] == "awaiting_approval"
    assert receiver.requests == [] and mail.outbox == []

    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)

    assert receiver.checked == [True, True]  # a 500, then the retry
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    assert sorted(m.to[0] for m in mail.outbox) == sorted(reviewers)
