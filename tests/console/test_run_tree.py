"""The console's run page: a run's place in a tree (its parent, its children, the run it was forked from) and
"re-run from here" on every step (a fork through the same service as the API's)."""

from __future__ import annotations

import pytest

from agents.models import Run
from tests.api.conftest import create_run
from tests.api.test_children import EXPECTED, agents, model  # noqa: F401  (fixtures)
from tests.conftest import make_user
from tests.console.conftest import logged_in, run_page


@pytest.mark.django_db
def test_a_parents_page_links_its_children_and_a_childs_page_its_parent(api, alice, model, agents):  # noqa: F811
    run = create_run(api, input="Please work out 6*7", agent="triage").json()
    child = Run.objects.get(parent_id=run["id"])
    staff = logged_in(make_user("rita", staff=True, reviewer=True))

    parent_html = staff.get(run_page(Run.objects.get(pk=run["id"]))).content.decode()
    child_html = staff.get(run_page(child)).content.decode()

    assert f'href="/admin/agents/run/{child.pk}/change/"' in parent_html
    assert "agent helper, Done (final_answer), called at step #0" in parent_html
    assert 'id="parent-link"' in child_html and f'href="/admin/agents/run/{run["id"]}/change/"' in child_html


@pytest.mark.django_db(transaction=True)
def test_re_run_from_here_forks_the_run_and_opens_the_new_one(api, alice, model, agents):  # noqa: F811
    run = create_run(api, input="Please work out 6*7", agent="triage").json()
    staff = logged_in(make_user("rita", staff=True, reviewer=True))
    page = staff.get(run_page(Run.objects.get(pk=run["id"]))).content.decode()
    assert page.count("Re-run from here") == 2  # every step but the final answer

    response = staff.post(f"/admin/agents/run/{run['id']}/fork/", {"from_step": "1"})

    new = Run.objects.get(forked_from_run=run["id"])
    assert response.status_code == 302 and response["Location"] == f"/admin/agents/run/{new.pk}/change/"
    assert (new.forked_from_step, new.mode, new.status) == (1, "background", "queued")
    assert list(new.steps.order_by("index").values_list("kind", flat=True)) == ["model", "tool"]
    html = staff.get(response["Location"]).content.decode()
    assert 'id="forked-from-link"' in html
    bad = staff.post(f"/admin/agents/run/{run['id']}/fork/", {"from_step": "9"}, follow=True)
    assert "Out of range: this run has steps 0 to 2." in bad.content.decode()
    assert Run.objects.filter(forked_from_run=run["id"]).count() == 1
