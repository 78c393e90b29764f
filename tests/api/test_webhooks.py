"""Webhook registration over HTTP (API.md v1.1, "Webhooks"): validation, ownership, the secret shown once, the
private-address rule at registration; and the console's read-only webhook pages."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Webhook, WebhookAttempt, WebhookDelivery
from agents.notifications import webhooks
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

WEBHOOKS = "/api/v1/webhooks"
PUBLIC = "http://93.184.215.14/hooks"  # an address literal: no name is looked up, nothing is connected to
KEYS = {"id", "url", "events", "created_at"}


def register(client, url: str = PUBLIC, events=("run.done",)):
    return client.post(WEBHOOKS, {"url": url, "events": list(events)}, format="json")


# --- registering ---------------------------------------------------------------------------------------------------


def test_the_secret_is_shown_once_in_the_create_answer(api, alice):
    response = register(api, events=["run.awaiting_approval", "run.done"])

    assert response.status_code == 201
    body = response.json()
    assert set(body) == KEYS | {"secret"}
    assert (body["url"], body["events"]) == (PUBLIC, ["run.done", "run.awaiting_approval"])
    assert body["secret"].startswith("whsec_") and len(body["secret"]) >= 38
    stored = Webhook.objects.get(pk=body["id"])
    assert (stored.owner, stored.secret) == (alice, body["secret"])

    listed = api.get(WEBHOOKS).json()
    assert listed["count"] == 1
    assert set(listed["results"][0]) == KEYS
    assert body["secret"] not in str(listed)


def test_each_webhook_gets_its_own_secret(api):
    secrets = {register(api).json()["secret"] for _ in range(3)}
    assert len(secrets) == 3


def test_a_trailing_slash_works_too(api):
    assert api.post(WEBHOOKS + "/", {"url": PUBLIC, "events": ["run.done"]}, format="json").status_code == 201
    assert api.get(WEBHOOKS + "/").json()["count"] == 1


@pytest.mark.parametrize(
    "events, message",
    [
        ([], "Ensure this field has at least 1 elements."),
        (["run.started"], '"run.started" is not a valid choice.'),
        (["run.done", 5], "Expected a string, got a number."),
        ("run.done", 'Expected a list of items but got type "str".'),
        (None, "This field may not be null."),
    ],
)
def test_events_must_be_a_non_empty_list_of_known_events(api, events, message):
    response = api.post(WEBHOOKS, {"url": PUBLIC, "events": events}, format="json")
    assert response.status_code == 400
    assert message in str(response.json()["events"])
    assert not Webhook.objects.exists()


def test_events_are_required(api):
    response = api.post(WEBHOOKS, {"url": PUBLIC}, format="json")
    assert response.status_code == 400 and response.json()["events"] == ["This field is required."]


def test_a_repeated_event_is_kept_once(api):
    response = register(api, events=["run.done", "run.done"])
    assert response.status_code == 201 and response.json()["events"] == ["run.done"]


@pytest.mark.parametrize(
    "url, message",
    [
        ("ftp://93.184.215.14/hooks", "Only http and https URLs can receive webhooks."),
        ("file:///etc/passwd", "Only http and https URLs can receive webhooks."),
        ("javascript:alert(1)", "Only http and https URLs can receive webhooks."),
        ("93.184.215.14/hooks", "Only http and https URLs can receive webhooks."),
        ("http://", "Enter a valid URL"),
        ("https://exa mple.com/", "Enter a valid URL"),
        ("http://93.184.215.14:99999/", "The URL's port is not valid."),
        ("", "This field may not be blank."),
    ],
)
def test_the_url_must_be_http_or_https(api, url, message):
    response = register(api, url=url)
    assert response.status_code == 400
    assert message in response.json()["url"][0]
    assert not Webhook.objects.exists()


def test_a_url_that_is_not_a_string_is_refused(api):
    response = api.post(WEBHOOKS, {"url": 5, "events": ["run.done"]}, format="json")
    assert response.status_code == 400 and response.json()["url"] == ["Expected a string, got a number."]


def test_a_body_that_is_not_an_object_is_refused(api):
    response = api.post(WEBHOOKS, ["run.done"], format="json")
    assert response.status_code == 400


def test_anonymous_callers_get_401(client):
    assert client.get(WEBHOOKS).status_code == 401
    response = client.post(WEBHOOKS, {"url": PUBLIC, "events": ["run.done"]}, content_type="application/json")
    assert response.status_code == 401 and response.has_header("WWW-Authenticate")


def test_a_user_has_at_most_a_few_webhooks(api):
    for _ in range(webhooks.MAX_PER_USER):
        assert register(api).status_code == 201
    response = register(api)
    assert response.status_code == 400 and "At most" in response.json()["detail"]
    assert Webhook.objects.count() == webhooks.MAX_PER_USER


# --- private, loopback and metadata destinations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, kind",
    [
        ("http://127.0.0.1:8000/hooks", "loopback"),
        ("http://localhost/hooks", "loopback"),
        ("http://[::1]/hooks", "loopback"),
        ("http://[::ffff:127.0.0.1]/hooks", "loopback"),
        ("http://10.1.2.3/hooks", "private"),
        ("http://192.168.1.10/hooks", "private"),
        ("http://172.16.0.1/hooks", "private"),
        ("http://[fd12:3456::1]/hooks", "private"),
        ("http://169.254.169.254/latest/meta-data", "cloud metadata"),
        ("http://[fd00:ec2::254]/", "cloud metadata"),
        ("http://169.254.10.1/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://240.0.0.1/", "private"),  # reserved, which Python also files under private
        ("http://100.64.0.1/", "non-public"),  # carrier-grade NAT
        ("http://[2002:7f00:1::1]/", "loopback"),  # 6to4 wrapping 127.0.0.1
    ],
)
def test_private_destinations_are_refused_at_registration(api, settings, url, kind):
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False
    response = register(api, url=url)
    assert response.status_code == 400
    message = response.json()["url"][0]
    assert f"a {kind} address" in message and "only go to public addresses" in message
    assert not Webhook.objects.exists()


def test_names_are_checked_by_what_they_resolve_to(api, settings, resolver):
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = False
    resolver["hooks.example.test"] = ["93.184.215.14"]
    resolver["inside.example.test"] = ["10.20.30.40"]
    resolver["both.example.test"] = ["93.184.215.14", "192.168.0.7"]  # one private answer is enough to refuse
    resolver["metadata.example.test"] = ["169.254.169.254"]

    assert register(api, url="https://hooks.example.test/in").status_code == 201
    for host, shown in [("inside", "10.20.30.40"), ("both", "192.168.0.7"), ("metadata", "169.254.169.254")]:
        response = register(api, url=f"https://{host}.example.test/in")
        assert response.status_code == 400
        assert response.json()["url"][0].startswith(f"{host}.example.test resolves to {shown}, a ")
    assert Webhook.objects.count() == 1


def test_a_name_that_does_not_resolve_is_refused(api, resolver):
    response = register(api, url="https://nowhere.example.test/hooks")
    assert response.status_code == 400
    assert response.json()["url"] == ["The host nowhere.example.test could not be resolved."]


def test_the_setting_allows_private_addresses_but_never_metadata(api, settings):
    settings.AGENT_WEBHOOK_ALLOW_PRIVATE = True
    assert register(api, url="http://127.0.0.1:9/hooks").status_code == 201
    assert register(api, url="http://10.1.2.3/hooks").status_code == 201
    response = register(api, url="http://169.254.169.254/latest/meta-data")
    assert response.status_code == 400 and "a cloud metadata address" in response.json()["url"][0]


# --- ownership -----------------------------------------------------------------------------------------------------


def test_webhooks_are_per_user(api, bob_api, reviewer_api):
    mine = register(api).json()["id"]
    theirs = register(bob_api).json()["id"]

    assert [w["id"] for w in api.get(WEBHOOKS).json()["results"]] == [mine]
    assert [w["id"] for w in bob_api.get(WEBHOOKS).json()["results"]] == [theirs]
    assert reviewer_api.get(WEBHOOKS).json()["count"] == 0  # reviewers see every run, not everyone's webhooks


def test_another_users_webhook_is_404_and_stays(api, bob_api):
    webhook_id = register(api).json()["id"]

    response = bob_api.delete(f"{WEBHOOKS}/{webhook_id}")
    assert response.status_code == 404
    assert Webhook.objects.filter(pk=webhook_id).exists()
    assert "url" not in response.json()


def test_deleting_a_webhook_takes_its_deliveries_along(api, alice):
    webhook_id = register(api).json()["id"]
    delivery = WebhookDelivery.objects.create(webhook_id=webhook_id, event="run.done", payload="{}")
    WebhookAttempt.objects.create(delivery=delivery, number=1, at=delivery.created_at, status_code=500)

    assert api.delete(f"{WEBHOOKS}/{webhook_id}").status_code == 204
    assert api.delete(f"{WEBHOOKS}/{webhook_id}/").status_code == 404
    assert not WebhookDelivery.objects.exists() and not WebhookAttempt.objects.exists()


@pytest.mark.parametrize("bad_id", ["nope", "12345", "00000000-0000-0000-0000-000000000000"])
def test_an_unknown_or_malformed_id_is_404(api, bad_id):
    assert api.delete(f"{WEBHOOKS}/{bad_id}").status_code == 404


# --- the console ---------------------------------------------------------------------------------------------------


@pytest.fixture
def console(db):
    client = Client()
    client.force_login(make_user("root", staff=True, superuser=True))
    return client


@pytest.fixture
def delivered(api):
    """A webhook with one delivery that failed once, then got through."""
    created = register(api).json()
    delivery = WebhookDelivery.objects.create(
        webhook_id=created["id"], event="run.done", payload='{"id": "x", "event": "run.done"}', status="delivered"
    )
    WebhookAttempt.objects.create(delivery=delivery, number=1, at=delivery.created_at, status_code=503)
    WebhookAttempt.objects.create(delivery=delivery, number=2, at=delivery.created_at, status_code=204)
    return created, delivery


def test_the_console_lists_webhooks_but_never_their_secrets(console, delivered):
    created, _ = delivered
    listing = console.get("/admin/agents/webhook/")
    page = console.get(f"/admin/agents/webhook/{created['id']}/change/")

    assert listing.status_code == page.status_code == 200
    assert PUBLIC in listing.content.decode() and PUBLIC in page.content.decode()
    for response in (listing, page):
        assert created["secret"] not in response.content.decode()
        assert "secret" not in response.content.decode().lower()


def test_deliveries_show_every_attempt_and_are_read_only(console, delivered):
    _, delivery = delivered
    page = console.get(f"/admin/agents/webhookdelivery/{delivery.pk}/change/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "503" in html and "204" in html and "run.done" in html
    assert 'name="_save"' not in html  # nothing to save
    assert console.get("/admin/agents/webhookdelivery/add/").status_code == 403
    assert console.get("/admin/agents/webhook/add/").status_code == 403
    assert console.post(f"/admin/agents/webhookdelivery/{delivery.pk}/delete/", {"post": "yes"}).status_code == 403
    assert WebhookDelivery.objects.filter(pk=delivery.pk).exists()


def test_deliveries_filter_by_status(console, delivered):
    _, delivery = delivered
    failed = WebhookDelivery.objects.create(webhook=delivery.webhook, event="run.awaiting_approval", payload="{}")
    WebhookDelivery.objects.filter(pk=failed.pk).update(status="failed")

    shown = console.get("/admin/agents/webhookdelivery/", {"status__exact": "failed"}).content.decode()
    assert str(failed.pk)[:8] in shown and str(delivery.pk)[:8] not in shown
