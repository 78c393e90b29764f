"""Memory facts in the admin: listed by user, searchable, read-only, escaped."""

from __future__ import annotations

import pytest

from memory import services
from memory.models import Fact
from tests.console.conftest import logged_in, stored_run

pytestmark = pytest.mark.django_db

FACTS = "/admin/memory/fact/"


@pytest.fixture
def facts(alice, bob):
    run = stored_run(alice, input="remember that my cat is called Tom")
    tom, _ = services.remember(alice, "My cat is called Tom", run=run)
    tea, _ = services.remember(alice, "I prefer green tea")
    paris, _ = services.remember(bob, "Bob lives in Paris")
    return {"tom": tom, "tea": tea, "paris": paris, "run": run}


def listed(response) -> set[int]:
    assert response.status_code == 200
    return {fact.pk for fact in response.context["cl"].result_list}


def test_facts_are_listed(superuser, facts):
    response = logged_in(superuser).get(FACTS)
    assert listed(response) == {f.pk for f in Fact.objects.all()}
    html = response.content.decode()
    for column in ("short_text", "owner", "created_at", "run"):
        assert f"column-{column}" in html
    assert "My cat is called Tom" in html and "Bob lives in Paris" in html
    assert "alice" in html and "bob" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [("cat", {"tom"}), ("TEA", {"tea"}), ("bob", {"paris"}), ("alice", {"tom", "tea"}), ("nothing-like-it", set())],
)
def test_facts_search_by_text_and_username(superuser, facts, query, expected):
    response = logged_in(superuser).get(FACTS, {"q": query})
    assert listed(response) == {facts[name].pk for name in expected}


def test_facts_filter_by_owner(superuser, facts, alice):
    response = logged_in(superuser).get(FACTS, {"owner__id__exact": alice.pk})
    assert listed(response) == {facts["tom"].pk, facts["tea"].pk}


def test_facts_are_read_only(superuser, facts):
    client = logged_in(superuser)
    assert client.get(f"{FACTS}add/").status_code == 403
    page = client.get(f"{FACTS}{facts['tom'].pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="_save"' not in html
    assert "My cat is called Tom" in html
    assert client.post(f"{FACTS}{facts['tom'].pk}/change/", {"text": "changed"}).status_code == 403
    facts["tom"].refresh_from_db()
    assert facts["tom"].text == "My cat is called Tom"


def test_staff_may_delete_facts(superuser, facts):
    client = logged_in(superuser)
    response = client.post(f"{FACTS}{facts['paris'].pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Fact.objects.filter(pk=facts["paris"].pk).exists()


def test_fact_text_is_escaped(superuser, alice):
    services.remember(alice, "<script>alert(1)</script> and <b>bold</b>")
    html = logged_in(superuser).get(FACTS).content.decode()
    assert "<script>alert(1)</script>" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_staff_without_permission_cannot_see_facts(facts):
    from tests.conftest import make_user

    response = logged_in(make_user("sam", staff=True)).get(FACTS)
    assert response.status_code == 403


def test_viewer_sees_facts(staff_viewer, facts):
    assert listed(logged_in(staff_viewer).get(FACTS, {"q": "paris"})) == {facts["paris"].pk}
