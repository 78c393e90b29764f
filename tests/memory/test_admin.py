"""The Django admin for facts: staff can list, search and delete facts, never add or edit them."""

from __future__ import annotations

import pytest
from django.test import Client

from memory import services
from memory.models import Fact
from tests.conftest import make_user
from tests.memory.conftest import store

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/memory/fact/"


@pytest.fixture
def admin_client(db):
    client = Client()
    client.force_login(make_user("root", staff=True, superuser=True))
    return client


def test_the_changelist_lists_every_users_facts(admin_client, alice, bob):
    store(alice, "alice likes teal")
    store(bob, "bob likes orange")
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert "alice likes teal" in page and "bob likes orange" in page
    assert "2 facts" in page


def test_search_filters_by_text_and_owner(admin_client, alice, bob):
    store(alice, "likes teal")
    store(bob, "likes orange")
    by_text = admin_client.get(CHANGELIST, {"q": "teal"})
    assert by_text.status_code == 200
    assert list(by_text.context["cl"].result_list) == list(Fact.objects.filter(owner=alice))
    assert "likes orange" not in by_text.content.decode()
    by_owner = admin_client.get(CHANGELIST, {"q": "bob"})  # the username, not in any fact's text
    assert [f.text for f in by_owner.context["cl"].result_list] == ["likes orange"]
    nothing = admin_client.get(CHANGELIST, {"q": "purple"})
    assert list(nothing.context["cl"].result_list) == []


def test_a_superuser_can_delete_a_fact(admin_client, alice):
    fact = store(alice, "to be removed by staff")
    kept = store(alice, "stays")
    url = f"{CHANGELIST}{fact.pk}/delete/"
    confirm = admin_client.get(url)
    assert confirm.status_code == 200
    assert "to be removed by staff" in confirm.content.decode()
    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/")  # Django sends view-only admins to the index
    assert list(Fact.objects.all()) == [kept]
    assert services.recall(alice, "removed staff", mode="text") == []
    # its vector left the index with it: by meaning, it is not found either (without an index: text, as above)
    assert [f.text for f in services.recall(alice, "to be removed by staff", mode="semantic")] in ([], ["stays"])


def test_facts_are_never_added_or_edited_in_the_admin(admin_client, alice):
    fact = store(alice, "the user's own words")
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    detail = admin_client.get(f"{CHANGELIST}{fact.pk}/change/")
    assert detail.status_code == 200  # view-only
    assert not detail.context["has_change_permission"]
    admin_client.post(f"{CHANGELIST}{fact.pk}/change/", {"text": "edited by staff"})
    assert Fact.objects.get(pk=fact.pk).text == "the user's own words"


def test_non_staff_users_are_sent_to_the_login(alice):
    client = Client()
    client.force_login(alice)
    fact = store(alice, "mine")
    assert client.get(CHANGELIST).status_code == 302
    assert client.post(f"{CHANGELIST}{fact.pk}/delete/", {"post": "yes"}).status_code == 302
    assert Fact.objects.filter(pk=fact.pk).exists()
